/* Registered buffers reached in place by peers (zero-copy) when ranks' registrations differ:
 * every rank must take the same decision at the same call, and address each peer's buffer
 * where that peer's buffer is.
 *
 * Usage: test_gpu_zc_agree SCENARIO NRANKS (ranks as processes: peers map through CUDA IPC)
 *   layout  rank 0 registers its input and output as one buffer, the others as two: exact,
 *           and reached in place (no staging copies), no hang
 *   stale   after a first call, rank 1's output is freed and allocated again at the same
 *           address without deregistering: the next calls are exact (staged on every rank)
 *   offset  the call's buffers sit at a different offset inside their registration on every
 *           rank: exact, in place
 *   partial rank 0 registers its input only, the others both buffers (against NCCL's rule, but
 *           it must not hang or corrupt): exact, staged
 *   span    rank 1's registration spans two adjacent allocations and the call's output
 *           crosses from one into the other: peers' mapping of the first allocation does not
 *           hold it, so it is staged, exactly (and nothing reads past a mapping)
 * Each scenario runs an allreduce and an allgather of float sums (the Simple plans, which read
 * peers' buffers). */
#include <nccl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/check.h"
#include "common/fork_ranks.h"
#include "fakecuda/fake_cuda_api.h"
#include "shunt/shunt.h"

static const char* scenario;
static int nranks;

/* Sizes the Simple plans serve (they read peers' buffers). */
#define COUNT ((size_t)9 << 18)

static unsigned long long dalloc(size_t bytes) {
  unsigned long long d = 0;
  CHECK_EQ_INT(cuMemAlloc_v2(&d, bytes), 0);
  return d;
}

static const char* last_plan(ncclComm_t comm) {
  const char* name = NULL;
  if (shuntLastPlan(comm, &name) != 0) return "?";
  return name ? name : "nccl";
}

/* One float allreduce (ag 0) or allgather (ag 1) of COUNT elements per rank from `in` to
 * `out`, checked exactly; the bytes the stand-in copied for it. */
static long long call(ncclComm_t comm, int rank, fc_handle st, char* in, char* out, int ag, int salt) {
  size_t total = ag ? COUNT * (size_t)nranks : COUNT;
  float* h = malloc(total * sizeof(float));
  for (size_t i = 0; i < COUNT; i++) h[i] = (float)((rank + 1) * (salt + 2) + (int)(i % 17));
  CHECK_EQ_INT(cuMemcpyHtoD_v2((uintptr_t)in, h, COUNT * sizeof(float)), 0);
  long long before = fakecuda_copied_bytes();
  ncclResult_t rc = ag ? ncclAllGather(in, out, COUNT, ncclFloat, comm, st)
                       : ncclAllReduce(in, out, COUNT, ncclFloat, ncclSum, comm, st);
  CHECK_MSG(rc == ncclSuccess, "rank %d: %s %d failed: %s", rank, ag ? "allgather" : "allreduce", salt,
            ncclGetLastError(comm));
  CHECK_EQ_INT(cuStreamSynchronize(st), 0);
  long long moved = fakecuda_copied_bytes() - before;
  CHECK_MSG(strcmp(last_plan(comm), "nccl") != 0, "rank %d: the call went to NCCL", rank);
  memset(h, 0, total * sizeof(float));
  CHECK_EQ_INT(cuMemcpyDtoH_v2(h, (uintptr_t)out, total * sizeof(float)), 0);
  size_t bad = 0;
  for (size_t i = 0; i < total; i++) {
    float want = 0;
    if (ag)
      want = (float)(((int)(i / COUNT) + 1) * (salt + 2) + (int)(i % COUNT % 17));
    else
      for (int r = 0; r < nranks; r++) want += (float)((r + 1) * (salt + 2) + (int)(i % 17));
    bad += h[i] != want;
  }
  CHECK_MSG(bad == 0, "rank %d: %s %d: %zu of %zu floats wrong", rank, ag ? "allgather" : "allreduce", salt,
            bad, total);
  free(h);
  return moved;
}

static const size_t OUT_BYTES = COUNT * sizeof(float) * 16; /* room for an allgather of 16 ranks */
static const size_t IN_BYTES = COUNT * sizeof(float);

/* Rank 0: one allocation and one registration holding input and output; the others: two. */
static void run_layout(ncclComm_t comm, int rank, fc_handle st) {
  void *h1 = NULL, *h2 = NULL;
  char *in, *out, *one = NULL;
  if (rank == 0) {
    one = (char*)(uintptr_t)dalloc(IN_BYTES + OUT_BYTES);
    in = one;
    out = one + IN_BYTES;
    CHECK_EQ_INT(ncclCommRegister(comm, one, IN_BYTES + OUT_BYTES, &h1), ncclSuccess);
  } else {
    in = (char*)(uintptr_t)dalloc(IN_BYTES);
    out = (char*)(uintptr_t)dalloc(OUT_BYTES);
    CHECK_EQ_INT(ncclCommRegister(comm, out, OUT_BYTES, &h1), ncclSuccess);
    CHECK_EQ_INT(ncclCommRegister(comm, in, IN_BYTES, &h2), ncclSuccess);
  }
  for (int ag = 0; ag < 2; ag++)
    for (int k = 0; k < 2; k++) {
      long long moved = call(comm, rank, st, in, out, ag, 10 * ag + k);
      CHECK_MSG(moved < (long long)IN_BYTES, "rank %d: %s %d copied %lld bytes: staged, not in place", rank,
                ag ? "allgather" : "allreduce", k, moved);
    }
  CHECK_EQ_INT(ncclCommDeregister(comm, h1), ncclSuccess);
  if (h2) CHECK_EQ_INT(ncclCommDeregister(comm, h2), ncclSuccess);
  if (one) {
    cuMemFree_v2((uintptr_t)one);
  } else {
    cuMemFree_v2((uintptr_t)in);
    cuMemFree_v2((uintptr_t)out);
  }
}

static void run_stale(ncclComm_t comm, int rank, fc_handle st) {
  char* in = (char*)(uintptr_t)dalloc(IN_BYTES);
  char* out = (char*)(uintptr_t)dalloc(OUT_BYTES);
  void *hi = NULL, *ho = NULL;
  CHECK_EQ_INT(ncclCommRegister(comm, in, IN_BYTES, &hi), ncclSuccess);
  CHECK_EQ_INT(ncclCommRegister(comm, out, OUT_BYTES, &ho), ncclSuccess);
  long long zc = call(comm, rank, st, in, out, 0, 1); /* exchanged and mapped */
  CHECK_MSG(zc < (long long)IN_BYTES, "rank %d: the first call copied %lld bytes", rank, zc);
  if (rank == 1) CHECK_EQ_INT(fakecuda_replace(out), 0); /* freed, allocated again at that address */
  for (int ag = 0; ag < 2; ag++) call(comm, rank, st, in, out, ag, 2 + ag);
  CHECK_EQ_INT(ncclCommDeregister(comm, hi), ncclSuccess);
  CHECK_EQ_INT(ncclCommDeregister(comm, ho), ncclSuccess);
  cuMemFree_v2((uintptr_t)in);
  cuMemFree_v2((uintptr_t)out);
}

static void run_partial(ncclComm_t comm, int rank, fc_handle st) {
  char* in = (char*)(uintptr_t)dalloc(IN_BYTES);
  char* out = (char*)(uintptr_t)dalloc(OUT_BYTES);
  void *hi = NULL, *ho = NULL;
  CHECK_EQ_INT(ncclCommRegister(comm, in, IN_BYTES, &hi), ncclSuccess);
  if (rank != 0) CHECK_EQ_INT(ncclCommRegister(comm, out, OUT_BYTES, &ho), ncclSuccess);
  for (int ag = 0; ag < 2; ag++) {
    long long moved = call(comm, rank, st, in, out, ag, 11 + ag);
    CHECK_MSG(moved >= (long long)IN_BYTES,
              "rank %d: %s with one rank's output unregistered copied %lld bytes", rank,
              ag ? "allgather" : "allreduce", moved);
  }
  CHECK_EQ_INT(ncclCommDeregister(comm, hi), ncclSuccess);
  if (ho) CHECK_EQ_INT(ncclCommDeregister(comm, ho), ncclSuccess);
  cuMemFree_v2((uintptr_t)in);
  cuMemFree_v2((uintptr_t)out);
}

static void run_offset(ncclComm_t comm, int rank, fc_handle st) {
  size_t slack = 65536 * (size_t)nranks;
  char* in = (char*)(uintptr_t)dalloc(IN_BYTES + slack);
  char* out = (char*)(uintptr_t)dalloc(OUT_BYTES + slack);
  void *hi = NULL, *ho = NULL;
  CHECK_EQ_INT(ncclCommRegister(comm, in, IN_BYTES + slack, &hi), ncclSuccess);
  CHECK_EQ_INT(ncclCommRegister(comm, out, OUT_BYTES + slack, &ho), ncclSuccess);
  for (int ag = 0; ag < 2; ag++) {
    long long moved =
        call(comm, rank, st, in + 4096 * (size_t)rank, out + 65536 * (size_t)(nranks - 1 - rank), ag, 5 + ag);
    CHECK_MSG(moved < (long long)IN_BYTES, "rank %d: %s at an offset copied %lld bytes", rank,
              ag ? "allgather" : "allreduce", moved);
  }
  CHECK_EQ_INT(ncclCommDeregister(comm, hi), ncclSuccess);
  CHECK_EQ_INT(ncclCommDeregister(comm, ho), ncclSuccess);
  cuMemFree_v2((uintptr_t)in);
  cuMemFree_v2((uintptr_t)out);
}

/* Two allocations of `bytes` side by side in the address space: the lower one's address, or 0. */
static char* adjacent_pair(size_t bytes, unsigned long long* a, unsigned long long* b) {
  for (int tries = 0; tries < 16; tries++) {
    *a = dalloc(bytes);
    *b = dalloc(bytes);
    if (*b + bytes == *a) return (char*)(uintptr_t)*b;
    if (*a + bytes == *b) return (char*)(uintptr_t)*a;
    cuMemFree_v2(*a);
    cuMemFree_v2(*b);
  }
  return NULL;
}

static void run_span(ncclComm_t comm, int rank, fc_handle st) {
  size_t half = OUT_BYTES;
  unsigned long long a = 0, b = 0;
  char* lo = adjacent_pair(half, &a, &b);
  CHECK_MSG(lo != NULL, "rank %d: no two adjacent allocations from the stand-in", rank);
  if (!lo) return;
  char* in = (char*)(uintptr_t)dalloc(IN_BYTES);
  void *hi = NULL, *ho = NULL;
  CHECK_EQ_INT(ncclCommRegister(comm, in, IN_BYTES, &hi), ncclSuccess);
  /* Rank 1's output starts a quarter before the end of the first allocation; the others' lie
   * inside the first. */
  CHECK_EQ_INT(ncclCommRegister(comm, lo, 2 * half, &ho), ncclSuccess);
  char* out = rank == 1 ? lo + half - IN_BYTES / 4 : lo;
  for (int ag = 0; ag < 2; ag++) {
    long long moved = call(comm, rank, st, in, out, ag, 8 + ag);
    CHECK_MSG(moved >= (long long)IN_BYTES,
              "rank %d: a call on a range across two allocations copied %lld bytes", rank, moved);
  }
  CHECK_EQ_INT(ncclCommDeregister(comm, hi), ncclSuccess);
  CHECK_EQ_INT(ncclCommDeregister(comm, ho), ncclSuccess);
  cuMemFree_v2((uintptr_t)in);
  cuMemFree_v2(a);
  cuMemFree_v2(b);
}

static int rank_main(int rank, const ncclUniqueId* ids) {
  fc_handle ctx = NULL;
  CHECK_EQ_INT(cuInit(0), 0);
  CHECK_EQ_INT(cuDevicePrimaryCtxRetain(&ctx, 0), 0);
  CHECK_EQ_INT(cuCtxSetCurrent(ctx), 0);
  ncclComm_t comm = NULL;
  CHECK_EQ_INT(ncclCommInitRank(&comm, nranks, ids[0], rank), ncclSuccess);
  if (!comm) CHECK_DONE();
  int on = -2;
  CHECK_EQ_INT(shuntGpuExecutor(comm, &on), 0);
  CHECK_MSG(on == 1, "rank %d: the GPU executor is %d", rank, on);
  fc_handle st = NULL;
  CHECK_EQ_INT(cuStreamCreate(&st, 1), 0);
  if (!strcmp(scenario, "layout"))
    run_layout(comm, rank, st);
  else if (!strcmp(scenario, "stale"))
    run_stale(comm, rank, st);
  else if (!strcmp(scenario, "offset"))
    run_offset(comm, rank, st);
  else if (!strcmp(scenario, "partial"))
    run_partial(comm, rank, st);
  else if (!strcmp(scenario, "span"))
    run_span(comm, rank, st);
  else
    CHECK_MSG(0, "unknown scenario %s", scenario);
  CHECK_EQ_INT(ncclCommDestroy(comm), ncclSuccess);
  cuStreamDestroy_v2(st);
  CHECK_DONE();
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: test_gpu_zc_agree SCENARIO NRANKS\n");
    return 2;
  }
  scenario = argv[1];
  nranks = atoi(argv[2]);
  if (nranks < 2 || nranks > 16) return 2;
  return fork_ranks(nranks, 1, 1, rank_main);
}
