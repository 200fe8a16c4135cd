/* Peer checks between ranks in processes of their own, each seeing only its own GPU
 * (FAKECUDA_VISIBLE set per rank, as CUDA_VISIBLE_DEVICES is), on the stand-in's machine.
 *
 * Usage: test_peers SCENARIO
 *   pcie      ranks on physical GPUs 0 and 1, a pair without native peer atomics
 *             (FAKECUDA_PEER_ATOMICS=0-1:0): the peer's device is not visible to the driver,
 *             NVML (by bus id) says no atomics: the GPU executor is refused, calls go to NCCL
 *   nvlink    the same pair with atomics: the GPU executor runs the calls on plans
 *   stale     both ranks on physical GPU 0, an MPS control pipe on disk but the driver says
 *             this process is no MPS client: refused (time-sliced ranks would wait forever)
 *   mps       both on GPU 0 as MPS clients (FAKECUDA_MPS=1): the GPU executor runs them
 * Every call's result is exact either way. */
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/check.h"
#include "common/fork_ranks.h"
#include "fakecuda/fake_cuda_api.h"
#include "shunt/shunt.h"

#define NRANKS 2

static const char* scenario;

static int rank_main(int rank, const ncclUniqueId* ids) {
  int shared = !strcmp(scenario, "stale") || !strcmp(scenario, "mps");
  /* Before the process's first driver call: the stand-in reads its machine once. */
  setenv("FAKECUDA_VISIBLE", shared ? "0" : rank == 0 ? "0" : "1", 1);
  fc_handle ctx = NULL, st = NULL;
  CHECK_EQ_INT(cuInit(0), 0);
  CHECK_EQ_INT(cuDevicePrimaryCtxRetain(&ctx, 0), 0);
  CHECK_EQ_INT(cuCtxSetCurrent(ctx), 0);
  CHECK_EQ_INT(cuStreamCreate(&st, 1), 0);
  ncclComm_t comm = NULL;
  CHECK_EQ_INT(ncclCommInitRank(&comm, NRANKS, ids[0], rank), ncclSuccess);
  int on = -2;
  CHECK_EQ_INT(shuntGpuExecutor(comm, &on), 0);
  int want = !strcmp(scenario, "nvlink") || !strcmp(scenario, "mps");
  CHECK_MSG(on == want, "rank %d, %s: the GPU executor is %d, expected %d", rank, scenario, on, want);
  size_t count = 4096;
  float* h = malloc(count * sizeof(float));
  for (size_t i = 0; i < count; i++) h[i] = (float)(rank + 1 + (int)(i % 5));
  unsigned long long d = 0;
  CHECK_EQ_INT(cuMemAlloc_v2(&d, count * sizeof(float)), 0);
  CHECK_EQ_INT(cuMemcpyHtoD_v2(d, h, count * sizeof(float)), 0);
  CHECK_EQ_INT(ncclAllReduce((void*)(uintptr_t)d, (void*)(uintptr_t)d, count, ncclFloat, ncclSum, comm, st),
               ncclSuccess);
  CHECK_EQ_INT(cuStreamSynchronize(st), 0);
  CHECK_EQ_INT(cuMemcpyDtoH_v2(h, d, count * sizeof(float)), 0);
  size_t bad = 0;
  for (size_t i = 0; i < count; i++) bad += h[i] != (float)(3 + 2 * (int)(i % 5));
  CHECK_MSG(bad == 0, "rank %d: %zu elements wrong", rank, bad);
  const char* plan = NULL;
  CHECK_EQ_INT(shuntLastPlan(comm, &plan), 0);
  if (!plan) plan = "nccl";
  CHECK_MSG((strcmp(plan, "nccl") != 0) == want, "rank %d, %s: served by %s", rank, scenario, plan);
  CHECK_EQ_INT(ncclCommDestroy(comm), ncclSuccess);
  cuMemFree_v2(d);
  cuStreamDestroy_v2(st);
  free(h);
  CHECK_DONE();
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: test_peers pcie|nvlink|stale|mps\n");
    return 2;
  }
  scenario = argv[1];
  if (!strcmp(scenario, "pcie")) setenv("FAKECUDA_PEER_ATOMICS", "0-1:0", 1);
  if (!strcmp(scenario, "mps")) setenv("FAKECUDA_MPS", "1", 1);
  char dir[] = "/tmp/shunt-mps-XXXXXX";
  if (!strcmp(scenario, "stale")) {
    /* A control pipe left behind: no daemon serves this process. */
    CHECK(mkdtemp(dir) != NULL);
    char path[64];
    snprintf(path, sizeof(path), "%s/control", dir);
    CHECK(mkfifo(path, 0600) == 0);
    setenv("CUDA_MPS_PIPE_DIRECTORY", dir, 1);
  }
  int rc = fork_ranks(NRANKS, 1, 1, rank_main);
  if (!strcmp(scenario, "stale")) {
    char path[64];
    snprintf(path, sizeof(path), "%s/control", dir);
    unlink(path);
    rmdir(dir);
  }
  return rc;
}
