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
  printf("# nThread %d nGpus %d nRanks %d minBytes %zu maxBytes %zu step: ", o->nthreads, o->ngpus, nranks,
         o->min_bytes, o->max_bytes);
  if (o->step_factor > 1)
    printf("%g(factor)", o->step_factor);
  else
    printf("%zu(bytes)", o->step_bytes);
  int graphs = o->graph && perf_dev_graphs_supported();
  printf(" warmup iters: %d iters: %d agg iters: 1 validation: %d graph: %d\n", o->warmup, o->iters, o->check,
         graphs ? o->graph : 0);
  if (o->graph && !graphs)
    printf("# -G %d: CUDA graphs need GPU buffers; these are host buffers: running without graphs\n",
           o->graph);
  printf("#\n");
  fflush(stdout);
}

struct rank_desc {
  int rank, pid, device;
  char host[64];
  char name[64];
};

/* Rank 0 lists every rank's process and device, as nccl-tests' "Using devices". */
static int print_devices(struct perf_thread* t, const struct perf_device* dev) {
  struct rank_desc mine[64];
  /* The host as shunt places ranks: SHUNT_HOSTID when set (hosts made of namespaces of one
   * machine), else the machine's name. shunt-tune reads the placement from this list. */
  char host[64] = "";
  const char* forced = getenv("SHUNT_HOSTID");
  if (forced && *forced)
    snprintf(host, sizeof(host), "%s", forced);
  else
    gethostname(host, sizeof(host) - 1);
  for (int k = 0; k < t->nlocal; k++) {
    mine[k] = (struct rank_desc){t->lanes[k].rank, (int)getpid(), dev[k].index, "", ""};
    snprintf(mine[k].host, sizeof(mine[k].host), "%s", host);
    snprintf(mine[k].name, sizeof(mine[k].name), "%s", dev[k].name);
  }
  struct rank_desc* all = calloc((size_t)t->nranks, sizeof(*all));
  if (!all || perf_chan_allgather(t->chan, t->lanes[0].rank, t->nlocal, mine, sizeof(mine[0]), all) != 0) {
    free(all);
    return -1;
  }
  if (t->lanes[0].rank == 0) {
    printf("# Using devices\n");
    for (int r = 0; r < t->nranks; r++) {
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

/* Every rank's communicator: one ncclCommInitRank, or one per rank inside a group when the
 * thread drives several (NCCL's way of initialising several devices from one thread). The
 * device current at each call is that rank's. Returns 0 or -1. */
static int init_comms(struct perf_thread* t, int nranks, const ncclUniqueId* id) {
  int grouped = t->nlocal > 1;
  ncclResult_t rc = grouped ? ncclGroupStart() : ncclSuccess;
  int failed_rank = t->lanes[0].rank;
  for (int k = 0; k < t->nlocal && rc == ncclSuccess; k++) {
    perf_dev_make_current(t->lanes[k].dev);
    rc = ncclCommInitRank(&t->lanes[k].comm, nranks, *id, t->lanes[k].rank);
    failed_rank = t->lanes[k].rank;
  }
  if (grouped) {
    ncclResult_t end = ncclGroupEnd();
    if (rc == ncclSuccess) rc = end;
  }
  if (rc == ncclSuccess)
    for (int k = 0; k < t->nlocal; k++)
      if (!t->lanes[k].comm) rc = ncclInternalError;
  if (rc != ncclSuccess) {
    fprintf(stderr, "shunt-perf: rank %d: ncclCommInitRank: %s (%s)\n", failed_rank, ncclGetErrorString(rc),
            ncclGetLastError(NULL));
    return -1;
  }
  return 0;
}

static void set_verdicts(struct perf_chan* shm, int first, int nlocal, const struct perf_verdict* v) {
  for (int k = 0; k < nlocal; k++) perf_chan_set_verdict(shm, first + k, v);
}

int perf_run_thread(const struct perf_opts* o, int first, int nlocal, int nranks, const ncclUniqueId* id,
                    struct perf_chan* shm) {
  struct perf_verdict failed = {0, 1, 0};
  struct perf_lane lanes[64];
  struct perf_device dev[64];
  struct perf_thread t = {.o = o, .nranks = nranks, .nlocal = nlocal, .lanes = lanes};
  memset(lanes, 0, sizeof(lanes));
  int opened = 0, ok = nlocal >= 1 && nlocal <= 64;
  for (; ok && opened < nlocal; opened++) {
    lanes[opened].rank = first + opened;
    if (perf_dev_open(first + opened, &lanes[opened].dev, &dev[opened]) != 0) {
      fprintf(stderr, "shunt-perf: rank %d: no device\n", first + opened);
      ok = 0;
      break;
    }
  }
  if (!ok || init_comms(&t, nranks, id) != 0) {
    for (int k = 0; k < nlocal; k++)
      if (lanes[k].comm) ncclCommDestroy(lanes[k].comm);
    for (int k = 0; k < opened; k++) perf_dev_close(lanes[k].dev);
    set_verdicts(shm, first, nlocal, &failed);
    return PERF_EXIT_FAILED;
  }
  t.chan = shm ? shm : nlocal == 1 ? perf_chan_nccl(lanes[0].comm, lanes[0].dev, nranks) : NULL;
  ok = t.chan && print_devices(&t, dev) == 0 && perf_bench(&t) == 0;
  if (t.chan != shm) perf_chan_close(t.chan);
  if (ok && first == 0) {
    printf("#\n# Collective test concluded: shunt-perf\n");
    fflush(stdout);
  }
  for (int k = 0; k < nlocal; k++) {
    perf_dev_make_current(lanes[k].dev);
    ok = ncclCommDestroy(lanes[k].comm) == ncclSuccess && ok;
  }
  for (int k = 0; k < nlocal; k++) perf_dev_close(lanes[k].dev);
  int64_t wrong = t.wrong;
  for (int k = 0; k < nlocal; k++)
    if (lanes[k].my_wrong > wrong) wrong = lanes[k].my_wrong;
  struct perf_verdict v = {1, !ok, wrong};
  set_verdicts(shm, first, nlocal, &v);
  if (!ok) return PERF_EXIT_FAILED;
  return v.wrong > 0 ? PERF_EXIT_WRONG : PERF_EXIT_OK;
}
