/* A communicator's teardown never frees memory a peer may still write, over the CUDA driver
 * stand-in (where a peer's access to memory its exporter freed is a device fault, as on a GPU).
 *
 * Two ranks as processes run one allreduce together. Rank 0 then destroys its communicator and
 * tells rank 1, and stays alive until rank 1 is done. Rank 1 then calls an allreduce that rank
 * 0 never joins: its kernel writes its contribution into rank 0's region, waits in vain, and,
 * once rank 1 aborts, writes the abort word into every peer's region. Rank 1 must end
 * normally: no device fault, the abort returning and its stream draining. */
#include <nccl.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/check.h"
#include "common/fork_ranks.h"
#include "fakecuda/fake_cuda_api.h"

#define COUNT 4096

static int to_peer[2], back[2]; /* rank 0 -> rank 1: destroyed; rank 1 -> rank 0: done */

static int run_rank(int rank, const ncclUniqueId* ids) {
  fc_handle ctx = NULL, st = NULL;
  CHECK_EQ_INT(cuInit(0), 0);
  CHECK_EQ_INT(cuDevicePrimaryCtxRetain(&ctx, 0), 0);
  CHECK_EQ_INT(cuCtxSetCurrent(ctx), 0);
  ncclComm_t comm = NULL;
  CHECK_EQ_INT(ncclCommInitRank(&comm, 2, ids[0], rank), ncclSuccess);
  if (!comm) CHECK_DONE();
  CHECK_EQ_INT(cuStreamCreate(&st, 1), 0);
  unsigned long long buf = 0;
  CHECK_EQ_INT(cuMemAlloc_v2(&buf, COUNT * sizeof(float)), 0);
  float* host = malloc(COUNT * sizeof(float));
  for (size_t i = 0; i < COUNT; i++) host[i] = (float)(rank + 1);
  CHECK_EQ_INT(cuMemcpyHtoD_v2(buf, host, COUNT * sizeof(float)), 0);
  CHECK_EQ_INT(
      ncclAllReduce((void*)(uintptr_t)buf, (void*)(uintptr_t)buf, COUNT, ncclFloat, ncclSum, comm, st),
      ncclSuccess);
  CHECK_EQ_INT(cuStreamSynchronize(st), 0);
  CHECK_EQ_INT(cuMemcpyDtoH_v2(host, buf, COUNT * sizeof(float)), 0);
  size_t bad = 0;
  for (size_t i = 0; i < COUNT; i++) bad += host[i] != 3.0f;
  CHECK_MSG(bad == 0, "rank %d: the joint allreduce: %zu elements wrong", rank, bad);
  char b = 1;
  if (rank == 0) {
    CHECK_EQ_INT(ncclCommDestroy(comm), ncclSuccess);
    CHECK(write(to_peer[1], &b, 1) == 1);
    /* Alive (its memory mapped) while rank 1 works; bounded, as rank 1 may die instead. */
    struct pollfd pf = {back[0], POLLIN, 0};
    CHECK(poll(&pf, 1, 10000) == 1 && read(back[0], &b, 1) == 1);
  } else {
    CHECK(read(to_peer[0], &b, 1) == 1);
    /* Rank 0 is gone: this call's kernel writes into its region, then waits for it. */
    CHECK_EQ_INT(
        ncclAllReduce((void*)(uintptr_t)buf, (void*)(uintptr_t)buf, COUNT, ncclFloat, ncclSum, comm, st),
        ncclSuccess);
    usleep(300000);
    CHECK_EQ_INT(ncclCommAbort(comm), ncclSuccess); /* its kernel gives up: abort words to every peer */
    CHECK_EQ_INT(cuStreamSynchronize(st), 0);
    CHECK(write(back[1], &b, 1) == 1);
  }
  cuMemFree_v2(buf);
  cuStreamDestroy_v2(st);
  free(host);
  CHECK_DONE();
}

int main(void) {
  if (pipe(to_peer) != 0 || pipe(back) != 0) return 2;
  return fork_ranks(2, 1, 1, run_rank);
}
