/* One rank's life. Rank 0 prints; every rank takes part in every exchange. */
#include "rank.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "device.h"
#include "shunt/shunt.h"

void perf_print_preamble(const struct perf_opts* o, int nranks) {
  int version = 0;
  ncclGetVersion(&version);
  printf("# shunt-perf nccl-headers=%d nccl-library=%d\n", NCCL_VERSION_CODE, version);
  /* shunt's own calls, when the NCCL in use is shunt */
  __typeof__(&shuntVersion) sv;
  __typeof__(&shuntRealNccl) real;
  *(void**)&sv = dlsym(RTLD_DEFAULT, "shuntVersion");
  *(void**)&real = dlsym(RTLD_DEFAULT, "shuntRealNccl");
  if (sv) {
    const char* path = NULL;
    int rv = 0;
    if (real && real(&path, &rv) == 0)
      printf("# shunt %s, fallback NCCL %s (%d)\n", sv(), path, rv);
    else
      printf("# shunt %s, no fallback NCCL: %s\n", sv(), path ? path : "?");
    const char* dir = getenv("SHUNT_PLAN_DIR");
    printf("# SHUNT_PLAN_DIR=%s\n", dir ? dir : "(unset)");
  } else {
    printf("# the NCCL library in use is not shunt\n");
  }
  printf("# Collective test starting: shunt-perf\n");
  printf("# nThread %d nGpus 1 nRanks %d minBytes %zu maxBytes %zu step: ", o->nthreads, nranks, o->min_bytes,
         o->max_bytes);
  if (o->step_factor > 1)
    printf("%g(factor)", o->step_factor);
  else
    printf("%zu(bytes)", o->step_bytes);
  int graphs = o->graph && perf_dev_graphs_supported();
  printf(" warmup iters: %d iters: %d agg iters: 1 validation: %d graph: %d\n", o->warmup, o->iters, o->check,
         graphs ? o->graph : 0);
  if (o->graph && !graphs)
    printf("# -G %d: CUDA graphs need GPU buffers; these are host buffers: running without graphs\n", o->graph);
  printf("#\n");
  fflush(stdout);
}

struct rank_desc {
  int rank, pid, device;
  char host[64];
  char name[64];
};

/* Rank 0 lists every rank's process and device, as nccl-tests' "Using devices". */
static int print_devices(struct perf_chan* ch, int rank, int nranks, const struct perf_device* dev) {
  struct rank_desc me = {rank, (int)getpid(), dev->index, "", ""};
  gethostname(me.host, sizeof(me.host) - 1);
  snprintf(me.name, sizeof(me.name), "%s", dev->name);
  struct rank_desc* all = calloc((size_t)nranks, sizeof(*all));
  if (!all || perf_chan_allgather(ch, rank, &me, sizeof(me), all) != 0) {
    free(all);
    return -1;
  }
  if (rank == 0) {
    printf("# Using devices\n");
    for (int r = 0; r < nranks; r++) {
      if (all[r].device < 0)
        printf("#  Rank %2d Group  0 Pid %6d on %10s device  - [%s]\n", all[r].rank, all[r].pid, all[r].host,
               all[r].name);
      else
        printf("#  Rank %2d Group  0 Pid %6d on %10s device %2d [%s]\n", all[r].rank, all[r].pid, all[r].host,
               all[r].device, all[r].name);
    }
    fflush(stdout);
  }
  free(all);
  return 0;
}

int perf_run_rank(const struct perf_opts* o, int rank, int nranks, const ncclUniqueId* id,
                  struct perf_chan* shm) {
  struct perf_verdict v = {0, 1, 0};
  struct perf_device dev;
  ncclComm_t comm = NULL;
  if (perf_dev_init(rank, &dev) != 0) {
    fprintf(stderr, "shunt-perf: rank %d: no device\n", rank);
    perf_chan_set_verdict(shm, rank, &v);
    return PERF_EXIT_FAILED;
  }
  ncclResult_t rc = ncclCommInitRank(&comm, nranks, *id, rank);
  if (rc != ncclSuccess) {
    fprintf(stderr, "shunt-perf: rank %d: ncclCommInitRank: %s (%s)\n", rank, ncclGetErrorString(rc),
            ncclGetLastError(NULL));
    perf_chan_set_verdict(shm, rank, &v);
    return PERF_EXIT_FAILED;
  }
  struct perf_chan* ch = shm ? shm : perf_chan_nccl(comm, nranks);
  struct perf_rank r = {.o = o, .rank = rank, .nranks = nranks, .comm = comm, .chan = ch};
  int ok = ch && print_devices(ch, rank, nranks, &dev) == 0 && perf_bench(&r) == 0;
  if (ch != shm) perf_chan_close(ch);
  if (ok && rank == 0) {
    printf("#\n# Collective test concluded: shunt-perf\n");
    fflush(stdout);
  }
  rc = ncclCommDestroy(comm);
  perf_dev_fini();
  ok = ok && rc == ncclSuccess;
  v = (struct perf_verdict){1, !ok, r.my_wrong > r.wrong ? r.my_wrong : r.wrong};
  perf_chan_set_verdict(shm, rank, &v);
  if (!ok) return PERF_EXIT_FAILED;
  return v.wrong > 0 ? PERF_EXIT_WRONG : PERF_EXIT_OK;
}
