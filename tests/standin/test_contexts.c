/* The GPU path's CUDA contexts, as the driver counts and checks them (the stand-in's rules).
 *
 * Usage: test_contexts SCENARIO
 *   retains     two ranks (threads on device 0) create a communicator, reduce, and destroy it:
 *               every primary-context retain the library made is released again
 *   reset       a communicator made, used and destroyed; the device reset (cudaDeviceReset: the
 *               primary context comes back as a new one, the modules loaded in the old one gone);
 *               a new communicator passes its self-check and its calls run on plans, exactly
 *   lanes       one thread drives two ranks on two devices in one group on the default stream,
 *               each call with a launch-completion event: the group's lanes run in threads of
 *               their own, which must have a context for their driver calls; exact, and both
 *               events recorded
 *   foreign     a rank whose stream belongs to a context of its own (not the primary context):
 *               its call is refused with a clear error, never launched there from another context
 *               (only that rank calls)
 */
#include <nccl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/coll_config.h"
#include "fakecuda/fake_cuda_api.h"
#include "fallback/nccl_compat.h"
#include "shunt/shunt.h"

#define NRANKS 2

int cuDevicePrimaryCtxRelease_v2(int dev);
int cuDevicePrimaryCtxReset_v2(int dev);
int cuCtxCreate_v2(fc_handle* ctx, unsigned flags, int dev);
int cuCtxDestroy_v2(fc_handle ctx);
int cuEventCreate(fc_handle* e, unsigned flags);
int cuEventDestroy_v2(fc_handle e);
int cuEventSynchronize(fc_handle e);
int cuMemcpyDtoHAsync_v2(void* dst, unsigned long long src, size_t n, fc_handle stream);
int fakecuda_primary_retains(int device);

static const char* scenario;
static pthread_barrier_t phase;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int failures;

static void fail(int rank, const char* what, long long v) {
  pthread_mutex_lock(&mu);
  fprintf(stderr, "rank %d: %s (%lld)\n", rank, what, v);
  failures++;
  pthread_mutex_unlock(&mu);
}

static fc_handle primary(int dev) {
  fc_handle ctx = NULL;
  CHECK_EQ_INT(cuDevicePrimaryCtxRetain(&ctx, dev), 0);
  CHECK_EQ_INT(cuCtxSetCurrent(ctx), 0);
  return ctx;
}

/* An in-place allreduce of `count` floats on `st` by rank `rank` of `nranks`: exact, and
 * served by a plan when `want_plan`. */
static void reduce(ncclComm_t comm, int rank, int nranks, fc_handle st, size_t count, int want_plan) {
  unsigned long long d = 0;
  float* h = malloc(count * sizeof(float));
  for (size_t i = 0; i < count; i++) h[i] = (float)(rank + 1 + (int)(i % 7));
  CHECK_EQ_INT(cuMemAlloc_v2(&d, count * sizeof(float)), 0);
  /* On the rank's stream: a synchronous copy would wait for the device's work, a peer rank's
   * kernel (waiting for this rank's) included, as on a GPU. */
  CHECK_EQ_INT(cuMemcpyHtoDAsync_v2(d, h, count * sizeof(float), st), 0);
  ncclResult_t rc =
      ncclAllReduce((void*)(uintptr_t)d, (void*)(uintptr_t)d, count, ncclFloat, ncclSum, comm, st);
  if (rc != ncclSuccess) fail(rank, "ncclAllReduce", rc);
  CHECK_EQ_INT(cuStreamSynchronize(st), 0);
  CHECK_EQ_INT(cuMemcpyDtoHAsync_v2(h, d, count * sizeof(float), st), 0);
  CHECK_EQ_INT(cuStreamSynchronize(st), 0);
  size_t bad = 0;
  for (size_t i = 0; i < count; i++) {
    float want = 0;
    for (int r = 0; r < nranks; r++) want += (float)(r + 1 + (int)(i % 7));
    bad += h[i] != want;
  }
  if (bad) fail(rank, "elements wrong", (long long)bad);
  const char* plan = NULL;
  if (want_plan && (shuntLastPlan(comm, &plan) != 0 || !plan || !strcmp(plan, "nccl")))
    fail(rank, "the call went to NCCL", 0);
  cuMemFree_v2(d);
  free(h);
}

struct rank_arg {
  int rank;
  ncclUniqueId id[2];
};

/* One communicator's life on device 0: created, on the GPU executor, a call, destroyed. */
static void one_comm(int rank, ncclUniqueId id, fc_handle st) {
  ncclComm_t comm = NULL;
  int on = -2;
  if (ncclCommInitRank(&comm, NRANKS, id, rank) != ncclSuccess || shuntGpuExecutor(comm, &on) != 0 ||
      on != 1) {
    fail(rank, "no communicator on the GPU executor", on);
    if (comm) ncclCommDestroy(comm);
    return;
  }
  reduce(comm, rank, NRANKS, st, 4096, 1);
  if (ncclCommDestroy(comm) != ncclSuccess) fail(rank, "ncclCommDestroy", 0);
}

static void* rank_main(void* p) {
  struct rank_arg* a = p;
  primary(0);
  fc_handle st = NULL;
  if (!strcmp(scenario, "foreign")) {
    ncclComm_t comm = NULL;
    int on = -2;
    if (ncclCommInitRank(&comm, NRANKS, a->id[0], a->rank) != ncclSuccess ||
        shuntGpuExecutor(comm, &on) != 0 || on != 1) {
      fail(a->rank, "no communicator on the GPU executor", on);
      return NULL;
    }
    /* Rank 0's stream and buffer in a context of its own on the same device. */
    fc_handle own = NULL;
    if (a->rank == 0) CHECK_EQ_INT(cuCtxCreate_v2(&own, 0, 0), 0);
    CHECK_EQ_INT(cuStreamCreate(&st, 1), 0);
    unsigned long long d = 0;
    CHECK_EQ_INT(cuMemAlloc_v2(&d, 4096 * sizeof(float)), 0);
    /* Only rank 0 calls: a peer's kernel left waiting for it is the abort scenario's matter. */
    ncclResult_t rc = a->rank == 0 ? ncclAllReduce((void*)(uintptr_t)d, (void*)(uintptr_t)d, 4096, ncclFloat,
                                                   ncclSum, comm, st)
                                   : ncclSuccess;
    if (a->rank == 0 && rc == ncclSuccess) {
      /* Launched from the primary context onto this context's stream, the launch fails; served
       * by NCCL it would be fine, and a refusal is fine. A success on a plan is not. */
      const char* plan = NULL;
      if (shuntLastPlan(comm, &plan) == 0 && plan && strcmp(plan, "nccl") != 0) {
        int e = cuStreamSynchronize(st);
        fail(0, "a call on another context's stream ran on a plan (stream status)", e);
      }
    }
    if (a->rank == 0 && rc != ncclSuccess) {
      const char* why = ncclGetLastError(comm);
      if (!why || !strstr(why, "primary context")) fail(0, "the refusal does not say why", rc);
    }
    /* Nothing was launched: both destroy. */
    pthread_barrier_wait(&phase);
    ncclCommDestroy(comm);
    cuMemFree_v2(d);
    cuStreamDestroy_v2(st);
    if (own) cuCtxDestroy_v2(own);
    return NULL;
  }
  CHECK_EQ_INT(cuStreamCreate(&st, 1), 0);
  one_comm(a->rank, a->id[0], st);
  if (!strcmp(scenario, "reset")) {
    CHECK_EQ_INT(cuStreamDestroy_v2(st), 0);
    pthread_barrier_wait(&phase); /* both communicators are gone */
    pthread_barrier_wait(&phase); /* the device was reset */
    primary(0);
    CHECK_EQ_INT(cuStreamCreate(&st, 1), 0);
    one_comm(a->rank, a->id[1], st);
  }
  cuStreamDestroy_v2(st);
  return NULL;
}

static int run_ranks(void) {
  primary(0);
  int before = fakecuda_primary_retains(0);
  struct rank_arg args[NRANKS];
  ncclUniqueId ids[2];
  CHECK_EQ_INT(ncclGetUniqueId(&ids[0]), ncclSuccess);
  CHECK_EQ_INT(ncclGetUniqueId(&ids[1]), ncclSuccess);
  pthread_barrier_init(&phase, NULL, !strcmp(scenario, "reset") ? NRANKS + 1 : NRANKS);
  pthread_t th[NRANKS];
  for (int r = 0; r < NRANKS; r++) {
    args[r] = (struct rank_arg){r, {ids[0], ids[1]}};
    pthread_create(&th[r], NULL, rank_main, &args[r]);
  }
  if (!strcmp(scenario, "reset")) {
    pthread_barrier_wait(&phase);
    CHECK_EQ_INT(cuDevicePrimaryCtxReset_v2(0), 0);
    pthread_barrier_wait(&phase);
  }
  for (int r = 0; r < NRANKS; r++) pthread_join(th[r], NULL);
  /* Every rank thread retained once (primary()), or twice across a reset; the library none. */
  int after = fakecuda_primary_retains(0);
  int mine = !strcmp(scenario, "reset") ? 2 * NRANKS : NRANKS;
  if (!strcmp(scenario, "retains"))
    CHECK_MSG(after == before + mine,
              "retains of device 0's primary context: %d before, %d after (the test's own: %d)", before,
              after, mine);
  CHECK_MSG(failures == 0, "%d failure(s) in the ranks", failures);
  CHECK_DONE();
}

/* One thread, two ranks on two devices, one group on the default stream. */
static int run_lanes(void) {
  primary(0);
  ncclComm_t comms[2] = {0};
  int devs[2] = {0, 1};
  CHECK_EQ_INT(ncclCommInitAll(comms, 2, devs), ncclSuccess);
  size_t count = 3000;
  unsigned long long d[2] = {0};
  fc_handle ev[2] = {0};
  float* h = malloc(count * sizeof(float));
  for (int r = 0; r < 2; r++) {
    int on = -2;
    CHECK_EQ_INT(shuntGpuExecutor(comms[r], &on), 0);
    CHECK_MSG(on == 1, "rank %d: the GPU executor is %d", r, on);
    primary(r);
    CHECK_EQ_INT(cuEventCreate(&ev[r], 2), 0);
    CHECK_EQ_INT(cuMemAlloc_v2(&d[r], count * sizeof(float)), 0);
    for (size_t i = 0; i < count; i++) h[i] = (float)(r + 1 + (int)(i % 7));
    CHECK_EQ_INT(cuMemcpyHtoD_v2(d[r], h, count * sizeof(float)), 0);
  }
  primary(0); /* the group is ended with device 0's context current, as a one-thread driver does */
  CHECK_EQ_INT(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < 2; r++) {
    ncclCollConfig_t cfg = api_coll_config();
    cfg.launchCompletionEvent = (cudaEvent_t)ev[r];
    CHECK_EQ_INT(ncclAllReduceConfig((void*)(uintptr_t)d[r], (void*)(uintptr_t)d[r], count, ncclFloat,
                                     ncclSum, comms[r], NULL, &cfg),
                 ncclSuccess);
  }
  CHECK_EQ_INT(ncclGroupEnd(), ncclSuccess);
  for (int r = 0; r < 2; r++) {
    primary(r);
    CHECK_EQ_INT(cuEventSynchronize(ev[r]), 0);
    CHECK_EQ_INT(cuStreamSynchronize(NULL), 0);
    CHECK_EQ_INT(cuMemcpyDtoH_v2(h, d[r], count * sizeof(float)), 0);
    size_t bad = 0;
    for (size_t i = 0; i < count; i++) bad += h[i] != (float)(1 + 2 + 2 * (int)(i % 7));
    CHECK_MSG(bad == 0, "rank %d: %zu elements wrong after the group", r, bad);
    const char* plan = NULL;
    CHECK_MSG(shuntLastPlan(comms[r], &plan) == 0 && plan && strcmp(plan, "nccl") != 0,
              "rank %d: the group went to NCCL", r);
  }
  for (int r = 0; r < 2; r++) {
    CHECK_EQ_INT(ncclCommDestroy(comms[r]), ncclSuccess);
    primary(r);
    cuMemFree_v2(d[r]);
    cuEventDestroy_v2(ev[r]);
  }
  free(h);
  CHECK_DONE();
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: test_contexts retains|reset|lanes|foreign\n");
    return 2;
  }
  scenario = argv[1];
  CHECK_EQ_INT(cuInit(0), 0);
  if (!strcmp(scenario, "lanes")) return run_lanes();
  return run_ranks();
}
