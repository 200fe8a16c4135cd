/* Ranks that are threads of one process on different devices reach each other's registered
 * buffers in place only where the driver lets the peer's device touch them, over the CUDA
 * driver stand-in (where a device touching VMM memory that cuMemSetAccess did not grant it is a
 * device fault, as on a GPU: CUDA_ERROR_ILLEGAL_ADDRESS, the context lost).
 *
 * Usage: test_zc_devices run (two ranks as threads, rank r on device r, SHUNT_ZERO_COPY=1, a
 * tuning that gives 256 KiB allreduces to the Simple plans, which reach peers' buffers)
 *   - ncclMemAlloc memory, registered: granted to every device that can reach it as a peer (as
 *     NCCL's ncclMemAlloc grants it), so reached in place;
 *   - VMM memory its maker granted to its own device only, registered: staged, no fault;
 *   - cuMemAlloc memory, registered: reached in place (peer access covers it).
 * Every result exact. */
#include <nccl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "fakecuda/fake_cuda_api.h"
#include "shunt/shunt.h"
#include "standin/salted.h"

#define NRANKS 2
#define COUNT ((size_t)64 << 10) /* floats: 256 KiB, served by the Simple plans here */
#define GRAN ((size_t)2 << 20)

static pthread_barrier_t bar;
static ncclUniqueId id;
static long long moved; /* bytes the stand-in copied for the last call, both ranks together */

static const char* last_plan(ncclComm_t comm) {
  const char* name = NULL;
  if (shuntLastPlan(comm, &name) != 0) return "?";
  return name ? name : "nccl";
}

/* One in-place float allreduce of COUNT elements on buf by every rank at once, checked exactly;
 * on return `moved` holds the bytes copied for it. */
static void call(ncclComm_t comm, int rank, fc_handle st, unsigned long long buf, int salt) {
  static long long before;
  float* h = malloc(COUNT * sizeof(float));
  salted_fill(h, COUNT, rank, salt);
  CHECK_EQ_INT(cuMemcpyHtoD_v2(buf, h, COUNT * sizeof(float)), 0);
  pthread_barrier_wait(&bar);
  if (rank == 0) before = fakecuda_copied_bytes();
  pthread_barrier_wait(&bar);
  ncclResult_t rc =
      ncclAllReduce((void*)(uintptr_t)buf, (void*)(uintptr_t)buf, COUNT, ncclFloat, ncclSum, comm, st);
  CHECK_MSG(rc == ncclSuccess, "rank %d: call %d failed: %s", rank, salt, ncclGetLastError(comm));
  CHECK_EQ_INT(cuStreamSynchronize(st), 0);
  pthread_barrier_wait(&bar);
  if (rank == 0) moved = fakecuda_copied_bytes() - before;
  CHECK_MSG(strcmp(last_plan(comm), "nccl") != 0, "rank %d: call %d went to NCCL", rank, salt);
  CHECK_EQ_INT(cuMemcpyDtoH_v2(h, buf, COUNT * sizeof(float)), 0);
  size_t bad = salted_sum_wrong(h, COUNT, NRANKS, salt);
  CHECK_MSG(bad == 0, "rank %d: call %d: %zu of %zu wrong", rank, salt, bad, COUNT);
  free(h);
  pthread_barrier_wait(&bar);
}

/* Registers buf, runs one call, deregisters: whether it was reached in place. */
static bool registered_call(ncclComm_t comm, int rank, fc_handle st, unsigned long long buf, int salt) {
  void* h = NULL;
  CHECK_EQ_INT(ncclCommRegister(comm, (void*)(uintptr_t)buf, GRAN, &h), ncclSuccess);
  call(comm, rank, st, buf, salt);
  CHECK_EQ_INT(ncclCommDeregister(comm, h), ncclSuccess);
  return moved < (long long)(COUNT * sizeof(float));
}

/* VMM memory of `dev` that its maker granted to that device only. */
static unsigned long long vmm_own_device(int dev) {
  struct prop p = {1, 1, 1, dev, NULL, {0}};
  unsigned long long h = 0, ptr = 0;
  struct access_desc d = {1, dev, 3};
  CHECK_EQ_INT(cuMemCreate(&h, GRAN, &p, 0), 0);
  CHECK_EQ_INT(cuMemAddressReserve(&ptr, GRAN, 0, 0, 0), 0);
  CHECK_EQ_INT(cuMemMap(ptr, GRAN, 0, h, 0), 0);
  CHECK_EQ_INT(cuMemRelease(h), 0);
  CHECK_EQ_INT(cuMemSetAccess(ptr, GRAN, &d, 1), 0);
  return ptr;
}

static void* rank_main(void* p) {
  int rank = (int)(intptr_t)p;
  fc_handle ctx = NULL, st = NULL;
  CHECK_EQ_INT(cuDevicePrimaryCtxRetain(&ctx, rank), 0);
  CHECK_EQ_INT(cuCtxSetCurrent(ctx), 0);
  ncclComm_t comm = NULL;
  CHECK_EQ_INT(ncclCommInitRank(&comm, NRANKS, id, rank), ncclSuccess);
  int on = -2;
  if (comm) CHECK_EQ_INT(shuntGpuExecutor(comm, &on), 0);
  CHECK_MSG(on == 1, "rank %d: the GPU executor is %d", rank, on);
  if (on != 1) return NULL; /* the other rank's barriers then wait: the ctest timeout ends it */
  CHECK_EQ_INT(cuStreamCreate(&st, 1), 0);

  void* nm = NULL;
  CHECK_EQ_INT(ncclMemAlloc(&nm, GRAN), ncclSuccess);
  bool zc = registered_call(comm, rank, st, (uintptr_t)nm, 1);
  CHECK_MSG(zc, "rank %d: ncclMemAlloc memory: %lld bytes copied: staged, not reached in place", rank, moved);
  CHECK_EQ_INT(ncclMemFree(nm), ncclSuccess);

  unsigned long long own = vmm_own_device(rank);
  zc = registered_call(comm, rank, st, own, 2);
  CHECK_MSG(!zc,
            "rank %d: VMM memory granted to its own device only was reached in place (%lld bytes copied)",
            rank, moved);
  CHECK_EQ_INT(cuMemUnmap(own, GRAN), 0);
  CHECK_EQ_INT(cuMemAddressFree(own, GRAN), 0);

  unsigned long long d = 0;
  CHECK_EQ_INT(cuMemAlloc_v2(&d, GRAN), 0);
  zc = registered_call(comm, rank, st, d, 3);
  CHECK_MSG(zc, "rank %d: cuMemAlloc memory: %lld bytes copied: staged, not reached in place", rank, moved);
  CHECK_EQ_INT(cuMemFree_v2(d), 0);

  CHECK_EQ_INT(ncclCommDestroy(comm), ncclSuccess);
  cuStreamDestroy_v2(st);
  return NULL;
}

int main(int argc, char** argv) {
  (void)argc;
  (void)argv;
  CHECK_EQ_INT(cuInit(0), 0);
  CHECK_EQ_INT(ncclGetUniqueId(&id), ncclSuccess);
  pthread_barrier_init(&bar, NULL, NRANKS);
  pthread_t th[NRANKS];
  for (int r = 0; r < NRANKS; r++) pthread_create(&th[r], NULL, rank_main, (void*)(intptr_t)r);
  for (int r = 0; r < NRANKS; r++) pthread_join(th[r], NULL);
  CHECK_DONE();
}
