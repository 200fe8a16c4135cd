/* What forwarding costs: NCCL functions called through libshunt (which forwards to the
 * library in SHUNT_NCCL_LIB) against the same functions of that library called directly, side
 * by side in one run. ncclCommCount is a 2.28 function; ncclCommMemStats (which checks its
 * communicator first) and ncclParamGetI32 (which takes none) are newer than 2.28.
 * Run: SHUNT_NCCL_LIB=build/bench/forward/libnull_nccl.so build/bench/forward/forward_bench [calls]
 * (an NCCL whose functions do nothing, so that the difference is forwarding alone), or with
 * the NCCL test double, build/tests/fakenccl/libfakenccl.so. */
#include <dlfcn.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "fallback/nccl_compat.h"

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

typedef ncclResult_t (*count_fn)(const ncclComm_t, int*);
typedef ncclResult_t (*memstats_fn)(ncclComm_t, ncclCommMemStat_t, uint64_t*);
typedef ncclResult_t (*param_fn)(ncclParamHandle_t, int32_t*);

/* Best of 5 runs of `calls` calls, in ns per call. */
#define TIME_CALLS(expr)                                \
  ({                                                    \
    double best_ = 1e30;                                \
    for (int rep_ = 0; rep_ < 5; rep_++) {              \
      double t0_ = now_ns();                            \
      for (long i_ = 0; i_ < calls; i_++) (void)(expr); \
      double per_ = (now_ns() - t0_) / (double)calls;   \
      if (per_ < best_) best_ = per_;                   \
    }                                                   \
    best_;                                              \
  })

int main(int argc, char** argv) {
  long calls = argc > 1 ? atol(argv[1]) : 5000000;
  const char* lib = getenv("SHUNT_NCCL_LIB");
  if (!lib) {
    fprintf(stderr, "set SHUNT_NCCL_LIB to build/bench/forward/libnull_nccl.so (or the NCCL test double)\n");
    return 2;
  }
  int v;
  ncclGetVersion(&v); /* loads the library through shunt */
  void* h = dlopen(lib, RTLD_NOW | RTLD_NOLOAD);
  count_fn count = h ? (count_fn)dlsym(h, "ncclCommCount") : NULL;
  memstats_fn memstats = h ? (memstats_fn)dlsym(h, "ncclCommMemStats") : NULL;
  param_fn param = h ? (param_fn)dlsym(h, "ncclParamGetI32") : NULL;
  if (!count || !memstats || !param) {
    fprintf(stderr, "%s lacks ncclCommCount, ncclCommMemStats or ncclParamGetI32\n", lib);
    return 1;
  }
  int n = 0;
  uint64_t u = 0;
  int32_t i32 = 0;
  ncclComm_t comm = (ncclComm_t)&n;
  ncclParamHandle_t ph = (ncclParamHandle_t)&n;
  long warm = calls;
  calls = warm / 10;
  (void)TIME_CALLS(ncclCommCount(comm, &n)); /* warm up */
  calls = warm;
  printf("calls per run %ld (best of 5 runs), ns per call\n", calls);
  printf("%-22s %8s %8s %8s\n", "function", "direct", "shunt", "added");
  double d, f;
  d = TIME_CALLS(count(comm, &n));
  f = TIME_CALLS(ncclCommCount(comm, &n));
  printf("%-22s %8.2f %8.2f %8.2f\n", "ncclCommCount", d, f, f - d);
  d = TIME_CALLS(memstats(comm, ncclStatGpuMemTotal, &u));
  f = TIME_CALLS(ncclCommMemStats(comm, ncclStatGpuMemTotal, &u));
  printf("%-22s %8.2f %8.2f %8.2f\n", "ncclCommMemStats", d, f, f - d);
  d = TIME_CALLS(param(ph, &i32));
  f = TIME_CALLS(ncclParamGetI32(ph, &i32));
  printf("%-22s %8.2f %8.2f %8.2f\n", "ncclParamGetI32", d, f, f - d);
  return 0;
}
