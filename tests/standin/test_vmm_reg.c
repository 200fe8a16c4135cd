/* Registered buffers of every memory kind PyTorch and NCCL hand out, over the CUDA driver
 * stand-in (where cuIpcGetMemHandle refuses VMM and pool memory, as CUDA does):
 *   - ncclMemAlloc gives what NCCL gives: VMM memory, shareable by file descriptor, not legacy
 *     IPC memory, granularity-aligned; registered, peers reach it zero-copy;
 *   - VMM memory the caller made with a file-descriptor handle type (as PyTorch's expandable
 *     segments): zero-copy;
 *   - VMM memory without a shareable handle type, and stream-ordered pool memory
 *     (cudaMallocAsync's cuMemAllocAsync): staged, exactly, never an error.
 * Two ranks as processes; every result exact, every call served by a plan. */
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
#define GRAN ((size_t)2 << 20)

/* Driver calls beyond fake_cuda_api.h, as cuda.h declares them (plain types). */
int cuPointerGetAttribute(void* data, int attribute, unsigned long long ptr);

static const char* last_plan(ncclComm_t comm) {
  const char* name = NULL;
  if (shuntLastPlan(comm, &name) != 0) return "?";
  return name ? name : "nccl";
}

/* VMM memory as PyTorch's expandable segments map it: handle types 1 (file descriptor) or 0. */
static unsigned long long vmm_alloc(size_t bytes, int handle_types) {
  struct prop p = {1, handle_types, 1, 0, NULL, {0}};
  unsigned long long h = 0, ptr = 0;
  struct access_desc d = {1, 0, 3};
  CHECK_EQ_INT(cuMemCreate(&h, bytes, &p, 0), 0);
  CHECK_EQ_INT(cuMemAddressReserve(&ptr, bytes, 0, 0, 0), 0);
  CHECK_EQ_INT(cuMemMap(ptr, bytes, 0, h, 0), 0);
  CHECK_EQ_INT(cuMemRelease(h), 0);
  CHECK_EQ_INT(cuMemSetAccess(ptr, bytes, &d, 1), 0);
  return ptr;
}
static void vmm_free(unsigned long long ptr, size_t bytes) {
  CHECK_EQ_INT(cuMemUnmap(ptr, bytes), 0);
  CHECK_EQ_INT(cuMemAddressFree(ptr, bytes), 0);
}

/* One out-of-place float allreduce of count elements: the bytes the stand-in copied for it. */
static long long call(ncclComm_t comm, int rank, fc_handle st, unsigned long long send,
                      unsigned long long recv, size_t count, int salt, const char* what) {
  float* h = malloc(count * sizeof(float));
  salted_fill(h, count, rank, salt);
  CHECK_EQ_INT(cuMemcpyHtoD_v2(send, h, count * sizeof(float)), 0);
  long long before = fakecuda_copied_bytes();
  CHECK_EQ_INT(
      ncclAllReduce((void*)(uintptr_t)send, (void*)(uintptr_t)recv, count, ncclFloat, ncclSum, comm, st),
      ncclSuccess);
  CHECK_EQ_INT(cuStreamSynchronize(st), 0);
  long long moved = fakecuda_copied_bytes() - before;
  CHECK_MSG(strcmp(last_plan(comm), "nccl") != 0, "rank %d: %s: the call went to NCCL", rank, what);
  CHECK_EQ_INT(cuMemcpyDtoH_v2(h, recv, count * sizeof(float)), 0);
  size_t bad = salted_sum_wrong(h, count, NRANKS, salt);
  CHECK_MSG(bad == 0, "rank %d: %s: %zu of %zu wrong", rank, what, bad, count);
  free(h);
  return moved;
}

/* Registers both, runs, deregisters: the bytes copied. */
static long long registered_call(ncclComm_t comm, int rank, fc_handle st, unsigned long long send,
                                 unsigned long long recv, size_t bytes, size_t count, int salt,
                                 const char* what) {
  void *hs = NULL, *hr = NULL;
  CHECK_EQ_INT(ncclCommRegister(comm, (void*)(uintptr_t)send, bytes, &hs), ncclSuccess);
  CHECK_EQ_INT(ncclCommRegister(comm, (void*)(uintptr_t)recv, bytes, &hr), ncclSuccess);
  long long moved = call(comm, rank, st, send, recv, count, salt, what);
  CHECK_EQ_INT(ncclCommDeregister(comm, hs), ncclSuccess);
  CHECK_EQ_INT(ncclCommDeregister(comm, hr), ncclSuccess);
  return moved;
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
  /* Sizes the Simple plans serve: they read peers' buffers in place when registered. */
  size_t count = (size_t)9 << 18, bytes = (count * sizeof(float) + GRAN - 1) / GRAN * GRAN;
  long long full = (long long)(count * sizeof(float));

  /* ncclMemAlloc: VMM memory shareable by file descriptor, as NCCL's. */
  void *ns = NULL, *nr = NULL;
  CHECK_EQ_INT(ncclMemAlloc(&ns, bytes), ncclSuccess);
  CHECK_EQ_INT(ncclMemAlloc(&nr, bytes), ncclSuccess);
  unsigned long long types = 0;
  int legacy = -1;
  CHECK_MSG(cuPointerGetAttribute(&types, 14, (uintptr_t)ns) == 0 && (types & 1),
            "ncclMemAlloc memory is not VMM memory shareable by file descriptor (handle types %llx)", types);
  CHECK_MSG(cuPointerGetAttribute(&legacy, 10, (uintptr_t)ns) == 0 && legacy == 0,
            "ncclMemAlloc memory is legacy IPC memory (%d), not VMM", legacy);
  CHECK_MSG((uintptr_t)ns % GRAN == 0, "ncclMemAlloc memory %p is not granularity-aligned", ns);
  long long staged =
      call(comm, rank, st, (uintptr_t)ns, (uintptr_t)nr, count, 0, "ncclMemAlloc, unregistered");
  CHECK_MSG(staged >= full, "rank %d: unregistered, only %lld bytes copied", rank, staged);
  long long zc =
      registered_call(comm, rank, st, (uintptr_t)ns, (uintptr_t)nr, bytes, count, 1, "ncclMemAlloc");
  CHECK_MSG(zc + full <= staged,
            "rank %d: ncclMemAlloc registered: %lld bytes copied (staged %lld): not zero-copy", rank, zc,
            staged);

  /* Expandable segments: VMM made shareable by file descriptor. */
  unsigned long long vs = vmm_alloc(bytes, 1), vr = vmm_alloc(bytes, 1);
  zc = registered_call(comm, rank, st, vs, vr, bytes, count, 2, "VMM with a file descriptor");
  CHECK_MSG(zc + full <= staged,
            "rank %d: VMM (fd) registered: %lld bytes copied (staged %lld): not zero-copy", rank, zc, staged);
  vmm_free(vs, bytes);
  vmm_free(vr, bytes);

  /* VMM without a shareable handle type, and pool memory: staged, exact, no error. */
  unsigned long long ws = vmm_alloc(bytes, 0), wr = vmm_alloc(bytes, 0);
  long long moved =
      registered_call(comm, rank, st, ws, wr, bytes, count, 3, "VMM without a shareable handle");
  CHECK_MSG(moved >= full, "rank %d: unshareable VMM: only %lld bytes copied", rank, moved);
  vmm_free(ws, bytes);
  vmm_free(wr, bytes);
  unsigned long long ps = 0, pr = 0;
  CHECK_EQ_INT(cuMemAllocAsync(&ps, bytes, st), 0);
  CHECK_EQ_INT(cuMemAllocAsync(&pr, bytes, st), 0);
  moved = registered_call(comm, rank, st, ps, pr, bytes, count, 4, "cuMemAllocAsync pool memory");
  CHECK_MSG(moved >= full, "rank %d: pool memory: only %lld bytes copied", rank, moved);
  CHECK_EQ_INT(cuMemFreeAsync(ps, st), 0);
  CHECK_EQ_INT(cuMemFreeAsync(pr, st), 0);
  CHECK_EQ_INT(cuStreamSynchronize(st), 0);

  CHECK_EQ_INT(ncclCommDestroy(comm), ncclSuccess);
  CHECK_EQ_INT(ncclMemFree(ns), ncclSuccess);
  CHECK_EQ_INT(ncclMemFree(nr), ncclSuccess);
  cuStreamDestroy_v2(st);
  CHECK_DONE();
}

int main(void) {
  return fork_ranks(NRANKS, 1, 1, run_rank);
}
