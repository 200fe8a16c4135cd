/* A call's enqueue never waits on the host for the stream's earlier work, also when it is the
 * first launch of its program (which uploads the program). Over the CUDA driver stand-in, an
 * asynchronous copy from pageable host memory waits for its stream's earlier work before it
 * returns, as the driver may when it stages such a copy (tests/fakecuda/README.md): an upload
 * from pageable memory would hold the call until the stream's previous kernel, which waits for
 * the peers, has run, and NCCL's calls are asynchronous: a peer may join that kernel only
 * after this rank's next call has returned.
 *
 * Two ranks as processes. Both make the world with larger calls first (a world grows at the
 * same call on every rank, a collective step). Then rank 0 makes an allreduce and an allgather
 * of new sizes (two programs launched for the first time) while rank 1 makes none until rank 0's
 * allgather has returned (it gives up after a bound, so that the test fails rather than hangs);
 * then rank 1 makes both too. Both exact, served by plans. */
#include <nccl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "common/check.h"
#include "common/fork_ranks.h"
#include "fakecuda/fake_cuda_api.h"
#include "shunt/shunt.h"

int cuDevicePrimaryCtxRelease_v2(int dev);

#define NRANKS 2
#define BIG 4096   /* elements of the calls that make the world */
#define SMALL 2000 /* of the calls whose programs are new */
#define BOUND_S 5.0

static volatile int* returned; /* shared by the ranks: rank 0's allgather has returned */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static float value(int rank, size_t i) {
  return (float)(rank * 100 + (int)(i % 89));
}

static void calls(ncclComm_t comm, fc_handle st, unsigned long long in, unsigned long long sum,
                  unsigned long long all, size_t n) {
  CHECK_EQ_INT(ncclAllReduce((void*)(uintptr_t)in, (void*)(uintptr_t)sum, n, ncclFloat32, ncclSum, comm, st),
               ncclSuccess);
  CHECK_EQ_INT(ncclAllGather((void*)(uintptr_t)in, (void*)(uintptr_t)all, n, ncclFloat32, comm, st),
               ncclSuccess);
}

static void check(int rank, unsigned long long sum, unsigned long long all, size_t n) {
  float* h = malloc(NRANKS * n * sizeof(float));
  size_t bad = 0;
  CHECK_EQ_INT(cuMemcpyDtoH_v2(h, sum, n * sizeof(float)), 0);
  for (size_t i = 0; i < n; i++) bad += h[i] != value(0, i) + value(1, i);
  CHECK_EQ_INT(cuMemcpyDtoH_v2(h, all, NRANKS * n * sizeof(float)), 0);
  for (int r = 0; r < NRANKS; r++)
    for (size_t i = 0; i < n; i++) bad += h[(size_t)r * n + i] != value(r, i);
  CHECK_MSG(bad == 0, "rank %d: %zu elements wrong at %zu", rank, bad, n);
  free(h);
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
  unsigned long long in = 0, sum = 0, all = 0;
  CHECK_EQ_INT(cuMemAlloc_v2(&in, BIG * sizeof(float)), 0);
  CHECK_EQ_INT(cuMemAlloc_v2(&sum, BIG * sizeof(float)), 0);
  CHECK_EQ_INT(cuMemAlloc_v2(&all, NRANKS * BIG * sizeof(float)), 0);
  float* h = malloc(BIG * sizeof(float));
  for (size_t i = 0; i < BIG; i++) h[i] = value(rank, i);
  CHECK_EQ_INT(cuMemcpyHtoD_v2(in, h, BIG * sizeof(float)), 0);
  free(h);
  calls(comm, st, in, sum, all, BIG);
  CHECK_EQ_INT(cuStreamSynchronize(st), 0);
  check(rank, sum, all, BIG);
  if (rank == 0) {
    calls(comm, st, in, sum, all, SMALL);
    *returned = 1;
  } else {
    double t0 = now_s();
    while (!*returned && now_s() - t0 < BOUND_S) usleep(1000);
    CHECK_MSG(*returned, "rank 0's calls did not return within %.0f s while rank 1 had not joined them",
              BOUND_S);
    calls(comm, st, in, sum, all, SMALL);
  }
  CHECK_EQ_INT(cuStreamSynchronize(st), 0);
  check(rank, sum, all, SMALL);
  const char* plan = NULL;
  CHECK_MSG(shuntLastPlan(comm, &plan) == 0 && plan, "rank %d: the allgather went to NCCL", rank);
  CHECK_EQ_INT(ncclCommDestroy(comm), ncclSuccess);
  cuMemFree_v2(in);
  cuMemFree_v2(sum);
  cuMemFree_v2(all);
  cuStreamDestroy_v2(st);
  CHECK_EQ_INT(cuCtxSetCurrent(NULL), 0);
  CHECK_EQ_INT(cuDevicePrimaryCtxRelease_v2(0), 0);
  CHECK_DONE();
}

int main(void) {
  returned = mmap(NULL, sizeof(int), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (returned == MAP_FAILED) return 2;
  return fork_ranks(NRANKS, 1, 1, run_rank);
}
