/* The self-check's verdict when a fault and a busy device meet, over the CUDA driver stand-in: a
 * rank whose kernel starts only after its peers gave up (its device busy) explains the waits
 * that led to it, not a wrong result. Rank 0's first check run starts only once its peers have
 * given up (the stand-in's fault "late:1", as when another application's kernels hold its GPU)
 * while rank 3's never executes (fault "skip:1": its result is wrong). The verdict must be
 * "failed", at once: not a busy device, retried until the fault is gone and the plan trusted.
 *
 * Four ranks as processes (each its own GPU); one plan (a folder with only
 * allreduce_4r_ll_outofplace, made from the shipped plans given as the argument). Every rank
 * must end with its device calls sent to NCCL. */
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/check.h"
#include "common/fork_ranks.h"
#include "fakecuda/fake_cuda_api.h"
#include "shunt/shunt.h"

int cuDevicePrimaryCtxRelease_v2(int dev);

#define NRANKS 4
#define PLAN "allreduce_4r_ll_outofplace.json"

static int run_rank(int rank, const ncclUniqueId* ids) {
  fc_handle ctx = NULL;
  CHECK_EQ_INT(cuInit(0), 0);
  CHECK_EQ_INT(cuDevicePrimaryCtxRetain(&ctx, 0), 0);
  CHECK_EQ_INT(cuCtxSetCurrent(ctx), 0);
  if (rank == 0) fakecuda_fault("late:1");
  if (rank == NRANKS - 1) fakecuda_fault("skip:1");
  ncclComm_t comm = NULL;
  CHECK_EQ_INT(ncclCommInitRank(&comm, NRANKS, ids[0], rank), ncclSuccess);
  if (!comm) CHECK_DONE();
  int on = -1;
  CHECK_EQ_INT(shuntGpuExecutor(comm, &on), 0);
  CHECK_MSG(on == 0, "rank %d: the self-check passed although rank %d's result was wrong", rank, NRANKS - 1);
  CHECK_EQ_INT(ncclCommDestroy(comm), ncclSuccess);
  CHECK_EQ_INT(cuCtxSetCurrent(NULL), 0);
  CHECK_EQ_INT(cuDevicePrimaryCtxRelease_v2(0), 0);
  CHECK_DONE();
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s SHIPPED_PLAN_DIR\n", argv[0]);
    return 2;
  }
  char dir[] = "/tmp/shunt-verdict-XXXXXX", from[4096], to[4096];
  if (!mkdtemp(dir)) return 2;
  snprintf(from, sizeof(from), "%s/%s", argv[1], PLAN);
  snprintf(to, sizeof(to), "%s/%s", dir, PLAN);
  if (symlink(from, to) != 0) return 2;
  setenv("SHUNT_PLAN_DIR", dir, 1);
  int rc = fork_ranks(NRANKS, 1, 1, run_rank);
  unlink(to);
  rmdir(dir);
  return rc;
}
