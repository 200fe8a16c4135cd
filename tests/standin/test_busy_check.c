/* The GPU self-check on a busy device, over the CUDA driver stand-in: another application's
 * resident kernel holds every block slot of rank 0's GPU (fakecuda_occupy) while the
 * communicator is made, so rank 0's check kernel cannot start until it frees up, and rank 1's
 * waits run past SHUNT_GPU_CHECK_TIMEOUT meanwhile. The device frees up within the check's retry
 * budget: the check must pass, and an allreduce on device buffers be served by a plan, not by
 * NCCL, on every rank.
 *
 * Two ranks as processes (each its own GPU). */
#include <nccl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/fork_ranks.h"
#include "fakecuda/fake_cuda_api.h"
#include "shunt/shunt.h"

#define NRANKS 2
#define COUNT 1024
/* Longer than the check's bound (1 s, set by the test's environment), shorter than its retries. */
#define BUSY_MS 2500

int fakecuda_occupy(int device, int slots, int ms);
int cuDeviceGetAttribute(int* v, int attr, int dev);
int cuDevicePrimaryCtxRelease_v2(int dev);

static int run_rank(int rank, const ncclUniqueId* ids) {
  fc_handle ctx = NULL, st = NULL;
  CHECK_EQ_INT(cuInit(0), 0);
  CHECK_EQ_INT(cuDevicePrimaryCtxRetain(&ctx, 0), 0);
  CHECK_EQ_INT(cuCtxSetCurrent(ctx), 0);
  if (rank == 0) {
    int sms = 0;
    CHECK_EQ_INT(cuDeviceGetAttribute(&sms, 16 /* multiprocessor count */, 0), 0);
    /* Every slot of the device (16 blocks per multiprocessor, as the stand-in's occupancy says). */
    CHECK_EQ_INT(fakecuda_occupy(0, sms * 16, BUSY_MS), 0);
  }
  ncclComm_t comm = NULL;
  CHECK_EQ_INT(ncclCommInitRank(&comm, NRANKS, ids[0], rank), ncclSuccess);
  if (!comm) CHECK_DONE();
  CHECK_EQ_INT(cuStreamCreate(&st, 1), 0);
  unsigned long long buf = 0;
  CHECK_EQ_INT(cuMemAlloc_v2(&buf, COUNT * sizeof(float)), 0);
  float* host = malloc(COUNT * sizeof(float));
  for (size_t i = 0; i < COUNT; i++) host[i] = (float)(rank + 1 + (int)(i % 7));
  CHECK_EQ_INT(cuMemcpyHtoD_v2(buf, host, COUNT * sizeof(float)), 0);
  CHECK_EQ_INT(
      ncclAllReduce((void*)(uintptr_t)buf, (void*)(uintptr_t)buf, COUNT, ncclFloat32, ncclSum, comm, st),
      ncclSuccess);
  CHECK_EQ_INT(cuStreamSynchronize(st), 0);
  const char* plan = NULL;
  CHECK_EQ_INT(shuntLastPlan(comm, &plan), 0);
  CHECK_MSG(plan && strcmp(plan, "nccl") != 0,
            "rank %d: the allreduce went to NCCL: the self-check blamed shunt for a busy device", rank);
  CHECK_EQ_INT(cuMemcpyDtoH_v2(host, buf, COUNT * sizeof(float)), 0);
  size_t bad = 0;
  for (size_t i = 0; i < COUNT; i++) bad += host[i] != (float)(3 + 2 * (int)(i % 7));
  CHECK_MSG(bad == 0, "rank %d: %zu of %d elements wrong", rank, bad, COUNT);
  CHECK_EQ_INT(ncclCommDestroy(comm), ncclSuccess);
  cuMemFree_v2(buf);
  cuStreamDestroy_v2(st);
  free(host);
  CHECK_EQ_INT(cuCtxSetCurrent(NULL), 0);
  CHECK_EQ_INT(cuDevicePrimaryCtxRelease_v2(0), 0);
  CHECK_DONE();
}

int main(void) {
  return fork_ranks(NRANKS, 1, 1, run_rank);
}
