/* Peers' mappings of registered buffers live no longer than the registration, over the CUDA
 * driver stand-in (where memory its owner frees while importers map it, or releases while a
 * descriptor of it is open, is kept and counted: fakecuda_pinned_bytes).
 *
 * Usage: test_zc_lifetime SCENARIO (two ranks as processes, SHUNT_ZERO_COPY=1, a tuning that
 * gives 256 KiB allreduces to the Simple plans, which reach peers' buffers in place)
 *   rounds  50 times: allocate a buffer (cuMemAlloc, ncclMemAlloc, or VMM memory shareable by
 *           file descriptor, as PyTorch's expandable segments, in turn), register it, one
 *           in-place allreduce reached zero-copy, deregister, free; then a zero-copy call on
 *           another buffer and a small call: nothing the ranks freed is still held (every
 *           peer closed its mappings, no descriptor stayed open)
 *   bound   40 buffers registered and kept, a zero-copy call on each: a rank maps at most 32
 *           of its peer's allocations at once (besides the peer's region)
 * Every result exact. */
#include <nccl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/fork_ranks.h"
#include "fakecuda/fake_cuda_api.h"
#include "shunt/shunt.h"
#include "standin/salted.h"

#define NRANKS 2
#define COUNT ((size_t)64 << 10) /* floats: 256 KiB, served by the Simple plans here */
#define GRAN ((size_t)2 << 20)
#define ROUNDS 50
#define KEPT 40
#define MAPPED_MAX 32

static const char* scenario;

static const char* last_plan(ncclComm_t comm) {
  const char* name = NULL;
  if (shuntLastPlan(comm, &name) != 0) return "?";
  return name ? name : "nccl";
}

/* One in-place float allreduce of n elements on buf, checked exactly; the bytes the stand-in
 * copied for it. */
static long long call(ncclComm_t comm, int rank, fc_handle st, unsigned long long buf, size_t n, int salt) {
  float* h = malloc(n * sizeof(float));
  salted_fill(h, n, rank, salt);
  CHECK_EQ_INT(cuMemcpyHtoD_v2(buf, h, n * sizeof(float)), 0);
  long long before = fakecuda_copied_bytes();
  ncclResult_t rc =
      ncclAllReduce((void*)(uintptr_t)buf, (void*)(uintptr_t)buf, n, ncclFloat, ncclSum, comm, st);
  CHECK_MSG(rc == ncclSuccess, "rank %d: call %d failed: %s", rank, salt, ncclGetLastError(comm));
  CHECK_EQ_INT(cuStreamSynchronize(st), 0);
  long long moved = fakecuda_copied_bytes() - before;
  CHECK_MSG(strcmp(last_plan(comm), "nccl") != 0, "rank %d: call %d went to NCCL", rank, salt);
  CHECK_EQ_INT(cuMemcpyDtoH_v2(h, buf, n * sizeof(float)), 0);
  size_t bad = salted_sum_wrong(h, n, NRANKS, salt);
  CHECK_MSG(bad == 0, "rank %d: call %d: %zu of %zu wrong", rank, salt, bad, n);
  free(h);
  return moved;
}

/* A registered call reached in place copies far less than the buffer. */
static void zero_copy_call(ncclComm_t comm, int rank, fc_handle st, unsigned long long buf, int salt,
                           const char* what) {
  long long moved = call(comm, rank, st, buf, COUNT, salt);
  CHECK_MSG(moved < (long long)(COUNT * sizeof(float)), "rank %d: %s (call %d) copied %lld bytes: staged",
            rank, what, salt, moved);
}

/* VMM memory as PyTorch's expandable segments map it, shareable by file descriptor. */
static unsigned long long vmm_alloc(void) {
  struct prop p = {1, 1, 1, 0, NULL, {0}};
  unsigned long long h = 0, ptr = 0;
  struct access_desc d = {1, 0, 3};
  CHECK_EQ_INT(cuMemCreate(&h, GRAN, &p, 0), 0);
  CHECK_EQ_INT(cuMemAddressReserve(&ptr, GRAN, 0, 0, 0), 0);
  CHECK_EQ_INT(cuMemMap(ptr, GRAN, 0, h, 0), 0);
  CHECK_EQ_INT(cuMemRelease(h), 0);
  CHECK_EQ_INT(cuMemSetAccess(ptr, GRAN, &d, 1), 0);
  return ptr;
}

static const char* kinds[] = {"cuMemAlloc", "ncclMemAlloc", "VMM memory"};

static unsigned long long alloc_kind(int kind) {
  unsigned long long d = 0;
  void* p = NULL;
  switch (kind) {
    case 0:
      CHECK_EQ_INT(cuMemAlloc_v2(&d, GRAN), 0);
      return d;
    case 1:
      CHECK_EQ_INT(ncclMemAlloc(&p, GRAN), ncclSuccess);
      return (uintptr_t)p;
    default:
      return vmm_alloc();
  }
}

static void free_kind(int kind, unsigned long long d) {
  switch (kind) {
    case 0:
      CHECK_EQ_INT(cuMemFree_v2(d), 0);
      break;
    case 1:
      CHECK_EQ_INT(ncclMemFree((void*)(uintptr_t)d), ncclSuccess);
      break;
    default:
      CHECK_EQ_INT(cuMemUnmap(d, GRAN), 0);
      CHECK_EQ_INT(cuMemAddressFree(d, GRAN), 0);
  }
}

static void run_rounds(ncclComm_t comm, int rank, fc_handle st) {
  for (int i = 0; i < ROUNDS && !check_failures; i++) {
    int kind = i % 3;
    unsigned long long d = alloc_kind(kind);
    void* h = NULL;
    CHECK_EQ_INT(ncclCommRegister(comm, (void*)(uintptr_t)d, GRAN, &h), ncclSuccess);
    zero_copy_call(comm, rank, st, d, i, kinds[kind]);
    CHECK_EQ_INT(ncclCommDeregister(comm, h), ncclSuccess);
    free_kind(kind, d);
  }
  /* One more call reached in place (the next round of the ranks' agreement, where the last
   * buffers' mappings close), then a small one: once it completes here, every rank has made
   * its binding of the call before. */
  unsigned long long last = 0, small = 0;
  void* h = NULL;
  CHECK_EQ_INT(cuMemAlloc_v2(&last, GRAN), 0);
  CHECK_EQ_INT(cuMemAlloc_v2(&small, 4096), 0);
  CHECK_EQ_INT(ncclCommRegister(comm, (void*)(uintptr_t)last, GRAN, &h), ncclSuccess);
  zero_copy_call(comm, rank, st, last, ROUNDS, "the last buffer");
  call(comm, rank, st, small, 16, ROUNDS + 1);
  CHECK_MSG(fakecuda_pinned_bytes() == 0,
            "rank %d: %lld bytes this rank freed are still held by its peer or by a descriptor", rank,
            fakecuda_pinned_bytes());
  CHECK_EQ_INT(ncclCommDeregister(comm, h), ncclSuccess);
  CHECK_EQ_INT(cuMemFree_v2(last), 0);
  CHECK_EQ_INT(cuMemFree_v2(small), 0);
}

static void run_bound(ncclComm_t comm, int rank, fc_handle st) {
  unsigned long long d[KEPT];
  void* h[KEPT];
  long most = 0, region = fakecuda_imports(); /* the peer's region, which the world maps */
  CHECK_EQ_INT(region, 1);
  for (int i = 0; i < KEPT; i++) {
    CHECK_EQ_INT(cuMemAlloc_v2(&d[i], GRAN), 0);
    CHECK_EQ_INT(ncclCommRegister(comm, (void*)(uintptr_t)d[i], GRAN, &h[i]), ncclSuccess);
    zero_copy_call(comm, rank, st, d[i], i, "a kept buffer");
    long now = fakecuda_imports() - region;
    if (now > most) most = now;
  }
  CHECK_MSG(most <= MAPPED_MAX, "rank %d: %ld of its peer's allocations mapped at once (at most %d)", rank,
            most, MAPPED_MAX);
  for (int i = 0; i < KEPT; i++) {
    CHECK_EQ_INT(ncclCommDeregister(comm, h[i]), ncclSuccess);
    CHECK_EQ_INT(cuMemFree_v2(d[i]), 0);
  }
}

static int run_rank(int rank, const ncclUniqueId* ids) {
  fc_handle ctx = NULL, st = NULL;
  CHECK_EQ_INT(cuInit(0), 0);
  CHECK_EQ_INT(cuDevicePrimaryCtxRetain(&ctx, 0), 0);
  CHECK_EQ_INT(cuCtxSetCurrent(ctx), 0);
  ncclComm_t comm = NULL;
  CHECK_EQ_INT(ncclCommInitRank(&comm, NRANKS, ids[0], rank), ncclSuccess);
  if (!comm) CHECK_DONE();
  int on = -2;
  CHECK_EQ_INT(shuntGpuExecutor(comm, &on), 0);
  CHECK_MSG(on == 1, "rank %d: the GPU executor is %d", rank, on);
  CHECK_EQ_INT(cuStreamCreate(&st, 1), 0);
  if (!strcmp(scenario, "rounds"))
    run_rounds(comm, rank, st);
  else if (!strcmp(scenario, "bound"))
    run_bound(comm, rank, st);
  else
    CHECK_MSG(0, "unknown scenario %s", scenario);
  CHECK_EQ_INT(ncclCommDestroy(comm), ncclSuccess);
  cuStreamDestroy_v2(st);
  CHECK_DONE();
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: test_zc_lifetime rounds|bound\n");
    return 2;
  }
  scenario = argv[1];
  return fork_ranks(NRANKS, 1, 1, run_rank);
}
