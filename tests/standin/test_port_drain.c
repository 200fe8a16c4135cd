/* An execution ends only once the proxy has completed every port trigger it pushed, whatever
 * the plan's last op: over the CUDA driver stand-in, which checks at the end of each executor
 * kernel that the FIFO's completed count has reached its pushed count (fc_module.c) and ends
 * the process otherwise: the stream's next operation (a copy-out, the next call's staging, the
 * application's kernel) could overwrite a source that the proxy is still reading.
 *
 * Two ranks as processes, each its own host (SHUNT_HOSTID), so that their port channels go
 * through the proxy over TCP; the only plan (SHUNT_PLAN_DIR: plans_noflush/) is an allgather
 * whose puts are never flushed: its last port ops are a put with signal and a wait. Several
 * calls back to back, each exact and served by that plan. */
#include <nccl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/fork_ranks.h"
#include "fakecuda/fake_cuda_api.h"
#include "shunt/shunt.h"

int cuDevicePrimaryCtxRelease_v2(int dev);

#define NRANKS 2
#define COUNT 2048
#define CALLS 4

static float value(int rank, int call, size_t i) {
  return (float)(rank * 1000 + call * 10 + (int)(i % 97));
}

static int run_rank(int rank, const ncclUniqueId* ids) {
  /* Read when the communicator is made: each rank a host of its own. */
  setenv("SHUNT_HOSTID", rank ? "drain-host1" : "drain-host0", 1);
  fc_handle ctx = NULL, st = NULL;
  CHECK_EQ_INT(cuInit(0), 0);
  CHECK_EQ_INT(cuDevicePrimaryCtxRetain(&ctx, 0), 0);
  CHECK_EQ_INT(cuCtxSetCurrent(ctx), 0);
  ncclComm_t comm = NULL;
  CHECK_EQ_INT(ncclCommInitRank(&comm, NRANKS, ids[0], rank), ncclSuccess);
  if (!comm) CHECK_DONE();
  CHECK_EQ_INT(cuStreamCreate(&st, 1), 0);
  unsigned long long send = 0, recv = 0;
  CHECK_EQ_INT(cuMemAlloc_v2(&send, COUNT * sizeof(float)), 0);
  CHECK_EQ_INT(cuMemAlloc_v2(&recv, NRANKS * COUNT * sizeof(float)), 0);
  float* host = malloc(NRANKS * COUNT * sizeof(float));
  for (int call = 0; call < CALLS; call++) {
    for (size_t i = 0; i < COUNT; i++) host[i] = value(rank, call, i);
    CHECK_EQ_INT(cuMemcpyHtoD_v2(send, host, COUNT * sizeof(float)), 0);
    CHECK_EQ_INT(ncclAllGather((void*)(uintptr_t)send, (void*)(uintptr_t)recv, COUNT, ncclFloat32, comm, st),
                 ncclSuccess);
    CHECK_EQ_INT(cuStreamSynchronize(st), 0);
    const char* plan = NULL;
    CHECK_EQ_INT(shuntLastPlan(comm, &plan), 0);
    CHECK_MSG(plan && !strcmp(plan, "allgather_2r_port_noflush"), "rank %d: call %d served by %s", rank, call,
              plan ? plan : "NCCL");
    CHECK_EQ_INT(cuMemcpyDtoH_v2(host, recv, NRANKS * COUNT * sizeof(float)), 0);
    size_t bad = 0;
    for (int r = 0; r < NRANKS; r++)
      for (size_t i = 0; i < COUNT; i++) bad += host[(size_t)r * COUNT + i] != value(r, call, i);
    CHECK_MSG(bad == 0, "rank %d: call %d: %zu of %d elements wrong", rank, call, bad, NRANKS * COUNT);
  }
  CHECK_EQ_INT(ncclCommDestroy(comm), ncclSuccess);
  cuMemFree_v2(send);
  cuMemFree_v2(recv);
  cuStreamDestroy_v2(st);
  free(host);
  CHECK_EQ_INT(cuCtxSetCurrent(NULL), 0);
  CHECK_EQ_INT(cuDevicePrimaryCtxRelease_v2(0), 0);
  CHECK_DONE();
}

int main(void) {
  return fork_ranks(NRANKS, 1, 1, run_rank);
}
