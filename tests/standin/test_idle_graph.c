/* A communicator of one host costs no CPU between calls, also once a call was captured into a
 * CUDA graph (whose replays no one announces to shunt): its kernels move every port channel's
 * data themselves, so it runs no proxy thread that would have to stay awake for them.
 *
 * Two ranks as processes (CUDA IPC over the stand-in). An allreduce eager, then captured and
 * replayed twice, exact; then, idle, each process must neither wake up (voluntary context
 * switches: a thread napping in a loop makes thousands a second) nor use the CPU. */
#include <nccl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "common/check.h"
#include "common/fork_ranks.h"
#include "fakecuda/fake_cuda_api.h"
#include "shunt/shunt.h"

int cuDevicePrimaryCtxRelease_v2(int dev);

#define NRANKS 2
#define COUNT 2048
#define IDLE_US 300000
#define MAX_WAKEUPS 100 /* in IDLE_US; a 20 us nap loop makes some 4000 */

static float value(int rank, int it, size_t i) {
  return (float)((rank + 1) * (it + 1) + (int)(i % 11));
}

static void fill(int rank, int it, unsigned long long d) {
  float* h = malloc(COUNT * sizeof(float));
  for (size_t i = 0; i < COUNT; i++) h[i] = value(rank, it, i);
  CHECK_EQ_INT(cuMemcpyHtoD_v2(d, h, COUNT * sizeof(float)), 0);
  free(h);
}

static void check(int rank, int it, unsigned long long d) {
  float* h = malloc(COUNT * sizeof(float));
  CHECK_EQ_INT(cuMemcpyDtoH_v2(h, d, COUNT * sizeof(float)), 0);
  size_t bad = 0;
  for (size_t i = 0; i < COUNT; i++) bad += h[i] != value(0, it, i) + value(1, it, i);
  CHECK_MSG(bad == 0, "rank %d: run %d: %zu elements wrong", rank, it, bad);
  free(h);
}

static int run_rank(int rank, const ncclUniqueId* ids) {
  fc_handle ctx = NULL, st = NULL, graph = NULL, exec = NULL;
  CHECK_EQ_INT(cuInit(0), 0);
  CHECK_EQ_INT(cuDevicePrimaryCtxRetain(&ctx, 0), 0);
  CHECK_EQ_INT(cuCtxSetCurrent(ctx), 0);
  ncclComm_t comm = NULL;
  CHECK_EQ_INT(ncclCommInitRank(&comm, NRANKS, ids[0], rank), ncclSuccess);
  if (!comm) CHECK_DONE();
  CHECK_EQ_INT(cuStreamCreate(&st, 1), 0);
  unsigned long long a = 0;
  CHECK_EQ_INT(cuMemAlloc_v2(&a, COUNT * sizeof(float)), 0);
  fill(rank, 0, a);
  CHECK_EQ_INT(ncclAllReduce((void*)(uintptr_t)a, (void*)(uintptr_t)a, COUNT, ncclFloat32, ncclSum, comm, st),
               ncclSuccess);
  CHECK_EQ_INT(cuStreamSynchronize(st), 0);
  check(rank, 0, a);
  CHECK_EQ_INT(cuStreamBeginCapture_v2(st, 0), 0);
  CHECK_EQ_INT(ncclAllReduce((void*)(uintptr_t)a, (void*)(uintptr_t)a, COUNT, ncclFloat32, ncclSum, comm, st),
               ncclSuccess);
  CHECK_EQ_INT(cuStreamEndCapture(st, &graph), 0);
  const char* plan = NULL;
  CHECK_MSG(shuntLastPlan(comm, &plan) == 0 && plan, "rank %d: the captured call went to NCCL", rank);
  CHECK_EQ_INT(cuGraphInstantiateWithFlags(&exec, graph, 0), 0);
  for (int it = 1; it <= 2 && exec; it++) {
    fill(rank, it, a);
    CHECK_EQ_INT(cuGraphLaunch(exec, st), 0);
    CHECK_EQ_INT(cuStreamSynchronize(st), 0);
    check(rank, it, a);
  }
  usleep(50000); /* past any polling right after the last execution */
  struct rusage u0, u1;
  getrusage(RUSAGE_SELF, &u0);
  usleep(IDLE_US);
  getrusage(RUSAGE_SELF, &u1);
  long wakeups = u1.ru_nvcsw - u0.ru_nvcsw;
  double cpu_ms =
      (double)(u1.ru_utime.tv_sec - u0.ru_utime.tv_sec + u1.ru_stime.tv_sec - u0.ru_stime.tv_sec) * 1e3 +
      (double)(u1.ru_utime.tv_usec - u0.ru_utime.tv_usec + u1.ru_stime.tv_usec - u0.ru_stime.tv_usec) / 1e3;
  CHECK_MSG(wakeups <= MAX_WAKEUPS, "rank %d: %ld wake-ups (%.1f ms of CPU) in %d ms of an idle communicator",
            rank, wakeups, cpu_ms, IDLE_US / 1000);
  if (exec) cuGraphExecDestroy(exec);
  if (graph) cuGraphDestroy(graph);
  CHECK_EQ_INT(ncclCommDestroy(comm), ncclSuccess);
  cuMemFree_v2(a);
  cuStreamDestroy_v2(st);
  CHECK_EQ_INT(cuCtxSetCurrent(NULL), 0);
  CHECK_EQ_INT(cuDevicePrimaryCtxRelease_v2(0), 0);
  CHECK_DONE();
}

int main(void) {
  return fork_ranks(NRANKS, 1, 1, run_rank);
}
