/* What forwarding costs: ncclCommCount called through libshunt (which forwards to the NCCL
 * test double) against the same function of the double called directly.
 * Run: SHUNT_NCCL_LIB=build/tests/fakenccl/libfakenccl.so build/bench/forward/forward_bench [calls]
 * or with SHUNT_NCCL_LIB=build/bench/forward/libnull_nccl.so, an NCCL whose ncclCommCount does
 * nothing, so that the difference is forwarding alone. */
#include <dlfcn.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

typedef ncclResult_t (*count_fn)(const ncclComm_t, int*);

static double run(count_fn f, long calls) {
  int n = 0;
  ncclComm_t comm = (ncclComm_t)&n;
  double best = 1e30;
  for (int rep = 0; rep < 5; rep++) {
    double t0 = now_ns();
    for (long i = 0; i < calls; i++) f(comm, &n);
    double per = (now_ns() - t0) / (double)calls;
    if (per < best) best = per;
  }
  return best;
}

int main(int argc, char** argv) {
  long calls = argc > 1 ? atol(argv[1]) : 5000000;
  const char* lib = getenv("SHUNT_NCCL_LIB");
  if (!lib) {
    fprintf(stderr, "set SHUNT_NCCL_LIB to the NCCL test double (build/tests/fakenccl/libfakenccl.so)\n");
    return 2;
  }
  int v;
  ncclGetVersion(&v); /* loads the double through shunt */
  void* h = dlopen(lib, RTLD_NOW | RTLD_NOLOAD);
  count_fn direct = h ? (count_fn)dlsym(h, "ncclCommCount") : NULL;
  if (!direct) {
    fprintf(stderr, "cannot reach the double: %s\n", dlerror());
    return 1;
  }
  run(ncclCommCount, calls / 10); /* warm up */
  double fwd = run(ncclCommCount, calls), dir = run(direct, calls);
  printf("calls per run        %ld (best of 5 runs)\n", calls);
  printf("direct call          %.2f ns\n", dir);
  printf("through shunt        %.2f ns\n", fwd);
  printf("added by forwarding  %.2f ns\n", fwd - dir);
  return 0;
}
