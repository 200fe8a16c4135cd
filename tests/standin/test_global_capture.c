/* Another thread's communicator keeps working while a thread captures a CUDA graph in global
 * mode (torch.cuda.graph's default), and does not invalidate that capture.
 *
 * The main thread begins a global-mode capture on a blocking stream of device 0 and holds it
 * open while two ranks (threads, each on its own stream) make allreduces that create and grow
 * their GPU worlds, register buffers and reduce on them zero-copy, deregister, and destroy their
 * communicators, then make (self-check included), use and destroy another one. Every result
 * must be exact, and the capture must end valid and replay. The ranks check their results in
 * relaxed mode (their own synchronizations would otherwise be the unsafe calls); everything the
 * library does in their threads runs in their global mode. */
#include <nccl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "fakecuda/fake_cuda_api.h"
#include "shunt/shunt.h"

#define NRANKS 2

int cuThreadExchangeStreamCaptureMode(int* mode);
int cuMemsetD8Async(unsigned long long dst, unsigned char v, size_t n, fc_handle stream);
int cuMemcpyDtoHAsync_v2(void* dst, unsigned long long src, size_t n, fc_handle stream);

static pthread_barrier_t ready, done;
static pthread_mutex_t check_mu = PTHREAD_MUTEX_INITIALIZER;
static int rank_failures;

struct rank_arg {
  int rank;
  ncclUniqueId id, id2;
};

static void set_device(void) {
  fc_handle ctx = NULL;
  CHECK_EQ_INT(cuInit(0), 0);
  CHECK_EQ_INT(cuDevicePrimaryCtxRetain(&ctx, 0), 0);
  CHECK_EQ_INT(cuCtxSetCurrent(ctx), 0);
}

static void fail(int rank, const char* what, long long got) {
  pthread_mutex_lock(&check_mu);
  fprintf(stderr, "rank %d: %s (%lld)\n", rank, what, got);
  rank_failures++;
  pthread_mutex_unlock(&check_mu);
}

/* Rank `rank`'s allreduce of `count` floats at `buf` in place; its result checked in relaxed
 * mode (the test's own synchronization and copy back). */
static void reduce(ncclComm_t comm, int rank, fc_handle st, unsigned long long buf, size_t count, int salt) {
  float* h = malloc(count * sizeof(float));
  for (size_t i = 0; i < count; i++) h[i] = (float)((rank + 1) * salt + (int)(i % 13));
  int mode = 2; /* relaxed */
  cuThreadExchangeStreamCaptureMode(&mode);
  int e = cuMemcpyHtoDAsync_v2(buf, h, count * sizeof(float), st);
  if (e == 0) e = cuStreamSynchronize(st);
  cuThreadExchangeStreamCaptureMode(&mode);
  if (e != 0) fail(rank, "input upload", e);
  ncclResult_t rc =
      ncclAllReduce((void*)(uintptr_t)buf, (void*)(uintptr_t)buf, count, ncclFloat, ncclSum, comm, st);
  if (rc != ncclSuccess) fail(rank, "ncclAllReduce", rc);
  cuThreadExchangeStreamCaptureMode(&mode);
  /* On the rank's stream: the legacy stream would join the blocking stream's capture. */
  e = cuMemcpyDtoHAsync_v2(h, buf, count * sizeof(float), st);
  if (e == 0) e = cuStreamSynchronize(st);
  cuThreadExchangeStreamCaptureMode(&mode);
  if (e != 0) fail(rank, "result download", e);
  size_t bad = 0;
  for (size_t i = 0; i < count && e == 0; i++) {
    float want = 0;
    for (int r = 0; r < NRANKS; r++) want += (float)((r + 1) * salt + (int)(i % 13));
    bad += h[i] != want;
  }
  if (bad) fail(rank, "elements wrong", (long long)bad);
  const char* plan = NULL;
  if (shuntLastPlan(comm, &plan) != 0 || !plan || !strcmp(plan, "nccl"))
    fail(rank, "call not served by a plan", 0);
  free(h);
}

static void* rank_main(void* p) {
  struct rank_arg* a = p;
  set_device();
  ncclComm_t comm = NULL;
  int on = -2;
  fc_handle st = NULL;
  unsigned long long small = 0, big = 0, reg = 0;
  size_t big_count = (size_t)1 << 18, reg_count = (size_t)9 << 16;
  if (ncclCommInitRank(&comm, NRANKS, a->id, a->rank) != ncclSuccess || shuntGpuExecutor(comm, &on) != 0 ||
      on != 1)
    fail(a->rank, "no communicator on the GPU executor", on);
  /* The user's memory and stream, made before the capture (allocation is the user's unsafe call). */
  CHECK_EQ_INT(cuStreamCreate(&st, 1), 0);
  CHECK_EQ_INT(cuMemAlloc_v2(&small, 4096 * sizeof(float)), 0);
  CHECK_EQ_INT(cuMemAlloc_v2(&big, big_count * sizeof(float)), 0);
  CHECK_EQ_INT(cuMemAlloc_v2(&reg, reg_count * sizeof(float)), 0);
  pthread_barrier_wait(&ready); /* the capture begins */
  pthread_barrier_wait(&ready); /* ... and is under way */
  if (comm && on == 1) {
    reduce(comm, a->rank, st, small, 4096, 1);    /* the first world */
    reduce(comm, a->rank, st, big, big_count, 2); /* a larger one: the first retired */
    void* h = NULL;
    ncclResult_t rc = ncclCommRegister(comm, (void*)(uintptr_t)reg, reg_count * sizeof(float), &h);
    if (rc != ncclSuccess) fail(a->rank, "ncclCommRegister", rc);
    reduce(comm, a->rank, st, reg, reg_count, 3); /* the registration exchanged, zero-copy */
    reduce(comm, a->rank, st, reg, reg_count, 4);
    if (h && (rc = ncclCommDeregister(comm, h)) != ncclSuccess) fail(a->rank, "ncclCommDeregister", rc);
    reduce(comm, a->rank, st, reg, reg_count, 5); /* staged again */
    if ((rc = ncclCommDestroy(comm)) != ncclSuccess) fail(a->rank, "ncclCommDestroy", rc);
    /* A communicator made while the capture is open: its self-check allocates, launches and
     * waits in this thread. */
    ncclComm_t late = NULL;
    int late_on = -2;
    if (ncclCommInitRank(&late, NRANKS, a->id2, a->rank) != ncclSuccess ||
        shuntGpuExecutor(late, &late_on) != 0 || late_on != 1)
      fail(a->rank, "a communicator made during the capture is not on the GPU executor", late_on);
    if (late) {
      reduce(late, a->rank, st, small, 4096, 6);
      if ((rc = ncclCommDestroy(late)) != ncclSuccess) fail(a->rank, "ncclCommDestroy", rc);
    }
  }
  pthread_barrier_wait(&done);
  pthread_barrier_wait(&done); /* the capture has ended: the test's own frees are safe */
  cuMemFree_v2(small);
  cuMemFree_v2(big);
  cuMemFree_v2(reg);
  cuStreamDestroy_v2(st);
  return NULL;
}

int main(void) {
  set_device();
  ncclUniqueId id, id2;
  CHECK_EQ_INT(ncclGetUniqueId(&id), ncclSuccess);
  CHECK_EQ_INT(ncclGetUniqueId(&id2), ncclSuccess);
  pthread_barrier_init(&ready, NULL, NRANKS + 1);
  pthread_barrier_init(&done, NULL, NRANKS + 1);
  pthread_t th[NRANKS];
  struct rank_arg args[NRANKS];
  for (int r = 0; r < NRANKS; r++) {
    args[r] = (struct rank_arg){r, id, id2};
    pthread_create(&th[r], NULL, rank_main, &args[r]);
  }
  /* A blocking stream (flags 0): the legacy stream would join its capture implicitly. */
  fc_handle cs = NULL, graph = NULL, exec = NULL;
  unsigned long long x = 0;
  unsigned char host[256];
  CHECK_EQ_INT(cuStreamCreate(&cs, 0), 0);
  CHECK_EQ_INT(cuMemAlloc_v2(&x, sizeof(host)), 0);
  pthread_barrier_wait(&ready);
  CHECK_EQ_INT(cuStreamBeginCapture_v2(cs, 0 /* global */), 0);
  CHECK_EQ_INT(cuMemsetD8Async(x, 0x3c, sizeof(host), cs), 0);
  pthread_barrier_wait(&ready);
  pthread_barrier_wait(&done); /* the ranks' work, all of it while this capture is open */
  int e = cuStreamEndCapture(cs, &graph);
  pthread_barrier_wait(&done);
  CHECK_MSG(e == 0 && graph, "the capture ended with %d: another thread's communicator invalidated it", e);
  if (graph) {
    CHECK_EQ_INT(cuGraphInstantiateWithFlags(&exec, graph, 0), 0);
    CHECK_EQ_INT(cuGraphLaunch(exec, cs), 0);
    CHECK_EQ_INT(cuStreamSynchronize(cs), 0);
    CHECK_EQ_INT(cuMemcpyDtoH_v2(host, x, sizeof(host)), 0);
    size_t bad = 0;
    for (size_t i = 0; i < sizeof(host); i++) bad += host[i] != 0x3c;
    CHECK_MSG(bad == 0, "the replayed graph set %zu bytes wrong", bad);
    cuGraphExecDestroy(exec);
    cuGraphDestroy(graph);
  }
  for (int r = 0; r < NRANKS; r++) pthread_join(th[r], NULL);
  CHECK_MSG(rank_failures == 0, "%d failure(s) in the ranks' calls", rank_failures);
  cuMemFree_v2(x);
  cuStreamDestroy_v2(cs);
  CHECK_DONE();
}
