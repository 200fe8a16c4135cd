/* PreMulSum with a device-resident scalar (ncclScalarDevice) on device buffers, over the CUDA
 * driver stand-in: the scalar is read on the device when the reduction runs, as NCCL does.
 *
 * Two ranks as processes. Each makes an op with ncclRedOpCreatePreMulSum(ncclScalarDevice)
 * whose scalar lives in a cuMemAlloc allocation, runs one eager allreduce, then captures one
 * allreduce into a CUDA graph and replays it while changing its scalar between replays with
 * cuMemcpyHtoD: every result must be exact for the scalar of that replay (the values are exact
 * in float whatever the order of the sum). An op with a host-immediate scalar runs alongside.
 * Every call must be served by a plan, not by NCCL. */
#include <nccl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/fork_ranks.h"
#include "fakecuda/fake_cuda_api.h"
#include "shunt/shunt.h"

#define NRANKS 2
#define COUNT 4096

static const char* last_plan(ncclComm_t comm) {
  const char* name = NULL;
  if (shuntLastPlan(comm, &name) != 0) return "?";
  return name ? name : "nccl";
}

static float input(int rank, int it, size_t i) {
  return (float)((rank + 1) * 3 + it + (int)(i % 13));
}

/* One call's result: out[i] == sum over ranks of input(r, it, i) * scalar(r). */
static size_t wrong(const float* out, int it, const float* scalars) {
  size_t bad = 0;
  for (size_t i = 0; i < COUNT; i++) {
    float want = 0;
    for (int r = 0; r < NRANKS; r++) want += input(r, it, i) * scalars[r];
    bad += out[i] != want;
  }
  return bad;
}

/* The scalar of rank r at step it: a power of two, so every product and sum is exact. */
static float scalar_of(int r, int it) {
  static const float s[] = {2.0f, 0.5f, 4.0f, -1.0f, 0.25f, 8.0f};
  return s[(it + r) % 6];
}

static int run_rank(int rank, const ncclUniqueId* ids) {
  fc_handle ctx = NULL, st = NULL;
  CHECK_EQ_INT(cuInit(0), 0);
  CHECK_EQ_INT(cuDevicePrimaryCtxRetain(&ctx, 0), 0);
  CHECK_EQ_INT(cuCtxSetCurrent(ctx), 0);
  ncclComm_t comm = NULL;
  CHECK_EQ_INT(ncclCommInitRank(&comm, NRANKS, ids[0], rank), ncclSuccess);
  if (!comm) CHECK_DONE();
  CHECK_EQ_INT(cuStreamCreate(&st, 1), 0);
  unsigned long long buf = 0, dscalar = 0;
  CHECK_EQ_INT(cuMemAlloc_v2(&buf, COUNT * sizeof(float)), 0);
  CHECK_EQ_INT(cuMemAlloc_v2(&dscalar, sizeof(float)), 0);
  float* host = malloc(COUNT * sizeof(float));
  float scalars[NRANKS];

  /* The device-resident scalar, set before the op is made and changed after. */
  float s = scalar_of(rank, 0);
  CHECK_EQ_INT(cuMemcpyHtoD_v2(dscalar, &s, sizeof(s)), 0);
  ncclRedOp_t dev_op, host_op;
  CHECK_EQ_INT(
      ncclRedOpCreatePreMulSum(&dev_op, (void*)(uintptr_t)dscalar, ncclFloat32, ncclScalarDevice, comm),
      ncclSuccess);
  float hs = 0.5f;
  CHECK_EQ_INT(ncclRedOpCreatePreMulSum(&host_op, &hs, ncclFloat32, ncclScalarHostImmediate, comm),
               ncclSuccess);

  /* Eager, both kinds of scalar. */
  for (int k = 0; k < 2; k++) {
    for (size_t i = 0; i < COUNT; i++) host[i] = input(rank, 0, i);
    CHECK_EQ_INT(cuMemcpyHtoD_v2(buf, host, COUNT * sizeof(float)), 0);
    CHECK_EQ_INT(ncclAllReduce((void*)(uintptr_t)buf, (void*)(uintptr_t)buf, COUNT, ncclFloat32,
                               k == 0 ? dev_op : host_op, comm, st),
                 ncclSuccess);
    CHECK_EQ_INT(cuStreamSynchronize(st), 0);
    CHECK_MSG(strcmp(last_plan(comm), "nccl") != 0, "rank %d: the eager PreMulSum went to NCCL", rank);
    CHECK_EQ_INT(cuMemcpyDtoH_v2(host, buf, COUNT * sizeof(float)), 0);
    for (int r = 0; r < NRANKS; r++) scalars[r] = k == 0 ? scalar_of(r, 0) : 0.5f;
    size_t bad = wrong(host, 0, scalars);
    CHECK_MSG(bad == 0, "rank %d: eager PreMulSum with a %s scalar: %zu elements wrong", rank,
              k == 0 ? "device" : "host-immediate", bad);
  }

  /* Captured once, replayed with a new device scalar each time. */
  fc_handle graph = NULL, exec = NULL;
  CHECK_EQ_INT(cuStreamBeginCapture_v2(st, 0), 0);
  CHECK_EQ_INT(
      ncclAllReduce((void*)(uintptr_t)buf, (void*)(uintptr_t)buf, COUNT, ncclFloat32, dev_op, comm, st),
      ncclSuccess);
  CHECK_EQ_INT(cuStreamEndCapture(st, &graph), 0);
  CHECK_MSG(strcmp(last_plan(comm), "nccl") != 0, "rank %d: the captured PreMulSum went to NCCL", rank);
  CHECK_EQ_INT(cuGraphInstantiateWithFlags(&exec, graph, 0), 0);
  for (int it = 1; it <= 6 && exec; it++) {
    s = scalar_of(rank, it);
    CHECK_EQ_INT(cuMemcpyHtoD_v2(dscalar, &s, sizeof(s)), 0);
    for (size_t i = 0; i < COUNT; i++) host[i] = input(rank, it, i);
    CHECK_EQ_INT(cuMemcpyHtoD_v2(buf, host, COUNT * sizeof(float)), 0);
    CHECK_EQ_INT(cuGraphLaunch(exec, st), 0);
    CHECK_EQ_INT(cuStreamSynchronize(st), 0);
    CHECK_EQ_INT(cuMemcpyDtoH_v2(host, buf, COUNT * sizeof(float)), 0);
    for (int r = 0; r < NRANKS; r++) scalars[r] = scalar_of(r, it);
    size_t bad = wrong(host, it, scalars);
    CHECK_MSG(bad == 0, "rank %d: replay %d (scalar %g): %zu of %d elements wrong", rank, it, (double)s, bad,
              COUNT);
    if (bad) break;
  }
  if (exec) cuGraphExecDestroy(exec);
  if (graph) cuGraphDestroy(graph);
  ncclRedOpDestroy(dev_op, comm);
  ncclRedOpDestroy(host_op, comm);
  CHECK_EQ_INT(ncclCommDestroy(comm), ncclSuccess);
  cuMemFree_v2(buf);
  cuMemFree_v2(dscalar);
  cuStreamDestroy_v2(st);
  free(host);
  CHECK_DONE();
}

int main(void) {
  return fork_ranks(NRANKS, 1, 1, run_rank);
}
