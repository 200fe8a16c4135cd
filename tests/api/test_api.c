/* The NCCL API end to end on the host backend: N ranks as processes, host buffers.
 *
 * Usage: test_api SCENARIO NRANKS
 *   plans      allreduce and allgather at sizes plans serve, in-place and out-of-place: exact
 *              results, and shuntLastPlan names a plan
 *   split      split into halves (and one rank with NCCL_SPLIT_NOCOLOR), collectives on each
 *   group      several collectives inside one group, several communicators from one thread
 *   noplan     a call no plan serves (the plan folder has no allreduce plan): with NCCL behind
 *              (the double) the result is right and the call went to NCCL; standalone, the
 *              call fails with a message
 *   mismatch   rank 1 loads another plan folder: plans are disabled on every rank, results
 *              still right through NCCL
 *   force      SHUNT_FORCE_FALLBACK=all sends everything to NCCL
 *   abort      rank 1 exits; the others abort promptly
 *   initall    one process, one thread: ncclCommInitAll for NRANKS ranks, then collectives on
 *              every communicator inside one group, as nccl-tests drives several GPUs
 *   shrink     ranks 1 and 3 exit; the others shrink them away (the list given unsorted) and
 *              run collectives on plans in the child
 *   nonblocking  config.blocking = 0: init, split and shrink return ncclInProgress, the
 *              communicator refuses work until ncclCommGetAsyncError says ncclSuccess, the
 *              children's handles appear once ready, collectives on plans in each
 *   abortpending  a nonblocking init whose last rank never comes: aborted promptly
 *   watchdog   rank 1 exits; on rank 0 a second thread polls ncclCommGetAsyncError and then
 *              aborts while the main thread is blocked inside a collective: both return
 *              promptly, the collective with an error
 *   scalable   ncclCommInitRankScalable with two ids (made by ranks 0 and 2, as PyTorch
 *              makes one per 128 ranks): plans serve the communicator
 *   devptr     buffers the CUDA driver (a stand-in, TEST_FAKE_CUDA) calls device memory go
 *              to NCCL, never to the host backend; host buffers still run on plans
 *   config     ncclAllReduceConfig / ncclAllGatherConfig: served by plans as the plain calls
 *              are, in and out of groups; algSelection, shunt's vendor options (plan by name,
 *              no plans) and a shorter (older) struct honoured; NCCL gets the caller's config
 *              untouched; launchCompletionEvent recorded (CUDA driver stand-in)
 *   suspend    ncclCommSuspend: shunt's plans take no work (a clear error) until ncclCommResume,
 *              then serve again, exactly
 *   grow       ncclCommGrow and ncclCommGetUniqueId reach NCCL untouched; alone, a clear error
 *   badinput   count 0, counts whose byte size overflows, buffers not aligned to their dtype,
 *              an op nobody created: NCCL's answer or an exact result, never a crash
 * SHUNT_FALLBACK=0 in the environment runs any of them with shunt's communicators alone.
 * The parent makes the id, forks the ranks and collects their verdicts. */
#include <dlfcn.h>
#include <nccl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/check.h"
#include "common/coll_config.h"
#include "common/fork_ranks.h"
#include "fakenccl/fake_nccl.h"
#include "fallback/nccl_compat.h"
#include "shunt/shunt.h"

static const char* scenario;
static int nranks;

static const char* last_plan(ncclComm_t comm) {
  const char* name = NULL;
  if (shuntLastPlan(comm, &name) != 0) return "?";
  return name ? name : "nccl";
}

/* Values whose sums are exact in float and int32 for any rank count used here. */
static float fval(int rank, size_t i) {
  return (float)((rank + 1) * 3 + (int)(i % 13));
}

static int check_allreduce(ncclComm_t comm, int rank, int n, size_t count, int inplace, int want_plan) {
  float* send = calloc(count, sizeof(float));
  float* recv = inplace ? send : malloc(count * sizeof(float));
  for (size_t i = 0; i < count; i++) send[i] = fval(rank, i);
  int fails = check_failures;
  CHECK_EQ_INT(ncclAllReduce(send, recv, count, ncclFloat, ncclSum, comm, NULL), ncclSuccess);
  size_t bad = 0;
  for (size_t i = 0; i < count; i++) {
    float want = 0;
    for (int r = 0; r < n; r++) want += fval(r, i);
    bad += recv[i] != want;
  }
  CHECK_MSG(bad == 0, "rank %d allreduce %zu floats %s: %zu wrong (served by %s)", rank, count,
            inplace ? "in-place" : "out-of-place", bad, last_plan(comm));
  const char* served = last_plan(comm);
  if (want_plan == 1) CHECK_MSG(strcmp(served, "nccl") != 0, "allreduce of %zu floats went to NCCL", count);
  if (want_plan == 0)
    CHECK_MSG(strcmp(served, "nccl") == 0, "allreduce of %zu floats used plan %s", count, served);
  if (!inplace) free(recv);
  free(send);
  return check_failures == fails;
}

static int check_allgather(ncclComm_t comm, int rank, int n, size_t count, int inplace) {
  int32_t* recv = calloc((size_t)n * count, sizeof(int32_t));
  int32_t* send = inplace ? recv + (size_t)rank * count : malloc(count * sizeof(int32_t));
  for (size_t i = 0; i < count; i++) send[i] = rank * 100000 + (int32_t)i;
  int fails = check_failures;
  CHECK_EQ_INT(ncclAllGather(send, recv, count, ncclInt32, comm, NULL), ncclSuccess);
  size_t bad = 0;
  for (int r = 0; r < n; r++)
    for (size_t i = 0; i < count; i++) bad += recv[(size_t)r * count + i] != r * 100000 + (int32_t)i;
  CHECK_MSG(bad == 0, "rank %d allgather %zu ints %s: %zu wrong (served by %s)", rank, count,
            inplace ? "in-place" : "out-of-place", bad, last_plan(comm));
  if (!inplace) free(send);
  free(recv);
  return check_failures == fails;
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Polls ncclCommGetAsyncError until it is not ncclInProgress; returns the final state. */
static ncclResult_t wait_ready(ncclComm_t comm) {
  ncclResult_t st = ncclInProgress;
  double end = now_s() + 60;
  while (now_s() < end) {
    if (ncclCommGetAsyncError(comm, &st) != ncclSuccess) return ncclInternalError;
    if (st != ncclInProgress) return st;
    usleep(1000);
  }
  return st;
}

/* As PyTorch does for a nonblocking split: spin until NCCL writes the child's handle. */
static ncclComm_t wait_handle(ncclComm_t* slot) {
  double end = now_s() + 60;
  ncclComm_t h;
  while (!(h = __atomic_load_n(slot, __ATOMIC_ACQUIRE)) && now_s() < end) usleep(1000);
  return h;
}

static void check_child(ncclComm_t child, int want_n, int want_rank) {
  int n = 0, me = -1;
  CHECK_EQ_INT(ncclCommCount(child, &n), ncclSuccess);
  CHECK_EQ_INT(ncclCommUserRank(child, &me), ncclSuccess);
  CHECK_EQ_INT(n, want_n);
  CHECK_EQ_INT(me, want_rank);
  if (n != want_n || me != want_rank) return;
  check_allreduce(child, me, n, 1024, 0, 1);
  check_allgather(child, me, n, 256, 1);
}

static int run_shrink(ncclComm_t comm, int rank) {
  check_allreduce(comm, rank, nranks, 1024, 0, -1);
  if (rank == 1 || rank == 3) _exit(0); /* gone without a word */
  int excl[] = {3, 1};
  ncclComm_t small = NULL;
  CHECK_EQ_INT(ncclCommShrink(comm, excl, 2, &small, NULL, NCCL_SHRINK_DEFAULT), ncclSuccess);
  CHECK(excl[0] == 1 && excl[1] == 3); /* sorted in place, as NCCL does */
  CHECK(small != NULL);
  if (small) {
    check_child(small, nranks - 2, rank == 0 ? 0 : 1);
    CHECK_EQ_INT(ncclCommDestroy(small), ncclSuccess);
  }
  CHECK_EQ_INT(ncclCommAbort(comm), ncclSuccess);
  CHECK_DONE();
}

static int run_nonblocking(int rank, ncclUniqueId id) {
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t comm = NULL;
  /* Rank 0 comes late, so the others are surely still waiting when they check. */
  if (rank == 0) usleep(500000);
  /* Odd ranks init inside a group: the rendezvous starts at ncclGroupEnd, which reports it. */
  if (rank % 2) CHECK_EQ_INT(ncclGroupStart(), ncclSuccess);
  ncclResult_t rc = ncclCommInitRankConfig(&comm, nranks, id, rank, &cfg);
  CHECK_MSG(rc == ncclInProgress || rc == ncclSuccess, "nonblocking init returned %d", (int)rc);
  if (rank % 2) CHECK_EQ_INT(ncclGroupEnd(), ncclInProgress);
  CHECK(comm != NULL);
  if (!comm) CHECK_DONE();
  if (rank != 0) {
    ncclResult_t st = ncclSuccess;
    CHECK_EQ_INT(ncclCommGetAsyncError(comm, &st), ncclSuccess);
    CHECK_EQ_INT(st, ncclInProgress);
    float x = 1;
    CHECK_EQ_INT(ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, comm, NULL), ncclInvalidArgument);
  }
  CHECK_EQ_INT(wait_ready(comm), ncclSuccess);
  check_allreduce(comm, rank, nranks, 1024, 0, 1);
  check_allgather(comm, rank, nranks, 512, 0);

  ncclComm_t half = NULL;
  rc = ncclCommSplit(comm, rank % 2, rank, &half, NULL);
  CHECK_MSG(rc == ncclInProgress || rc == ncclSuccess, "nonblocking split returned %d", (int)rc);
  CHECK_EQ_INT(wait_ready(comm), ncclSuccess);
  half = wait_handle(&half);
  CHECK(half != NULL);
  if (half) {
    CHECK_EQ_INT(wait_ready(half), ncclSuccess);
    check_child(half, nranks / 2, rank / 2);
    CHECK_EQ_INT(ncclCommDestroy(half), ncclSuccess);
  }

  /* Ranks 1 and 3 are shrunk away; they wait for the others before leaving. */
  if (rank != 1 && rank != 3) {
    int excl[] = {1, 3};
    ncclComm_t small = NULL;
    rc = ncclCommShrink(comm, excl, 2, &small, NULL, NCCL_SHRINK_DEFAULT);
    CHECK_MSG(rc == ncclInProgress || rc == ncclSuccess, "nonblocking shrink returned %d", (int)rc);
    CHECK_EQ_INT(wait_ready(comm), ncclSuccess);
    small = wait_handle(&small);
    CHECK(small != NULL);
    if (small) {
      CHECK_EQ_INT(wait_ready(small), ncclSuccess);
      check_child(small, nranks - 2, rank / 2);
      CHECK_EQ_INT(ncclCommDestroy(small), ncclSuccess);
    }
  }
  CHECK_EQ_INT(ncclCommFinalize(comm), ncclSuccess);
  CHECK_EQ_INT(wait_ready(comm), ncclSuccess);
  CHECK_EQ_INT(ncclCommDestroy(comm), ncclSuccess);
  CHECK_DONE();
}

/* Every rank inits as one of nranks + 1: the last never comes, and abort must not wait. */
static int run_abort_pending(int rank, ncclUniqueId id) {
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t comm = NULL;
  ncclResult_t rc = ncclCommInitRankConfig(&comm, nranks + 1, id, rank, &cfg);
  CHECK_MSG(rc == ncclInProgress, "init returned %d", (int)rc);
  if (!comm) CHECK_DONE();
  usleep(300000);
  ncclResult_t st = ncclSuccess;
  CHECK_EQ_INT(ncclCommGetAsyncError(comm, &st), ncclSuccess);
  CHECK_EQ_INT(st, ncclInProgress);
  double t0 = now_s();
  CHECK_EQ_INT(ncclCommAbort(comm), ncclSuccess);
  CHECK_MSG(now_s() - t0 < 5.0, "abort took %.1f s", now_s() - t0);
  CHECK_DONE();
}

/* The driver stand-in claims `buf` as device memory; shunt must not run a plan on it. */
static void run_devptr(ncclComm_t comm, int rank) {
  void* h = dlopen(getenv("TEST_FAKE_CUDA"), RTLD_NOW | RTLD_GLOBAL);
  CHECK_MSG(h != NULL, "cannot load the CUDA stand-in: %s", dlerror());
  if (!h) return;
  int (*add_device)(const void*, size_t) = (int (*)(const void*, size_t))dlsym(h, "fakecuda_add_device");
  int (*cu_init)(unsigned) = (int (*)(unsigned))dlsym(h, "cuInit");
  CHECK(cu_init && cu_init(0) == 0); /* the driver answers nothing before cuInit */
  size_t count = 1024;
  float* buf = malloc(count * sizeof(float));
  for (size_t i = 0; i < count; i++) buf[i] = fval(rank, i);
  CHECK(add_device && add_device(buf, count * sizeof(float)) == 0);
  CHECK_EQ_INT(ncclAllReduce(buf, buf, count, ncclFloat, ncclSum, comm, NULL), ncclSuccess);
  CHECK_MSG(strcmp(last_plan(comm), "nccl") == 0, "a plan (%s) ran on device memory", last_plan(comm));
  size_t bad = 0;
  for (size_t i = 0; i < count; i++) {
    float want = 0;
    for (int r = 0; r < nranks; r++) want += fval(r, i);
    bad += buf[i] != want;
  }
  CHECK_MSG(bad == 0, "%zu wrong through NCCL", bad);
  check_allreduce(comm, rank, nranks, 1024, 0, 1); /* host memory: a plan */
  free(buf); /* only now: the allocator would hand the same "device" range out again */
}

struct watchdog {
  ncclComm_t comm;
  double aborted_at, abort_took;
  ncclResult_t rc;
};

static void* watchdog_main(void* arg) {
  struct watchdog* w = arg;
  double end = now_s() + 0.5;
  while (now_s() < end) {
    ncclResult_t st;
    int n;
    ncclCommGetAsyncError(w->comm, &st);
    ncclCommCount(w->comm, &n);
    usleep(1000);
  }
  w->aborted_at = now_s();
  w->rc = ncclCommAbort(w->comm);
  w->abort_took = now_s() - w->aborted_at;
  return NULL;
}

static int run_watchdog(ncclComm_t comm, int rank) {
  size_t count = 1024;
  check_allreduce(comm, rank, nranks, count, 1, 1);
  /* A rank's collective can return before its peer's has: the last bytes it sent may still be
   * in flight, and a process that dies with unread bytes in a socket resets the connection,
   * which drops them at the peer. Rank 1 dies a little later, while rank 0 waits in the next
   * call, which is the case this scenario is about. */
  if (rank == 1) {
    usleep(200000);
    _exit(0);
  }
  float* buf = calloc(count, sizeof(float));
  struct watchdog w = {comm, 0, 0, ncclInternalError};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, watchdog_main, &w) == 0);
  ncclResult_t rc = ncclAllReduce(buf, buf, count, ncclFloat, ncclSum, comm, NULL); /* rank 1 never comes */
  double returned = now_s();
  pthread_join(t, NULL);
  CHECK_MSG(rc != ncclSuccess, "the collective succeeded with its peer gone");
  CHECK_EQ_INT(w.rc, ncclSuccess);
  /* TEST_ABORT_LIMIT_S tightens the bound where a test knows its transport (5 s by default). */
  const char* lim = getenv("TEST_ABORT_LIMIT_S");
  double limit = lim ? atof(lim) : 5.0;
  CHECK_MSG(w.aborted_at > 0 && returned - w.aborted_at < limit,
            "the collective returned %.2f s after the abort", returned - w.aborted_at);
  CHECK_MSG(w.abort_took < limit, "abort took %.2f s", w.abort_took);
  printf("rank %d: abort returned in %.3f s, the collective %.3f s after it\n", rank, w.abort_took,
         returned - w.aborted_at);
  fflush(stdout);
  free(buf);
  CHECK_DONE();
}

/* The second id comes from the parent too (as from another rank); every rank holds both. */
static ncclUniqueId second_id;

static int run_scalable(int rank, ncclUniqueId id) {
  ncclUniqueId ids[2] = {id, second_id};
  ncclComm_t comm = NULL;
  CHECK_EQ_INT(ncclCommInitRankScalable(&comm, nranks, rank, 2, ids, NULL), ncclSuccess);
  if (!comm) CHECK_DONE();
  int n = 0;
  CHECK_EQ_INT(ncclCommCount(comm, &n), ncclSuccess);
  CHECK_EQ_INT(n, nranks);
  check_allreduce(comm, rank, nranks, 1024, 0, 1);
  check_allgather(comm, rank, nranks, 256, 1);
  CHECK_EQ_INT(ncclCommDestroy(comm), ncclSuccess);
  CHECK_DONE();
}

/* The NCCL double's record of its last call, or NULL when shunt stands alone. */
static const struct fake_call* fake_last(void) {
  void* h = dlopen(getenv("SHUNT_NCCL_LIB"), RTLD_NOW | RTLD_NOLOAD);
  fake_last_call_fn f = h ? (fake_last_call_fn)dlsym(h, "fake_last_call") : NULL;
  return f ? f() : NULL;
}

static int fallback_on(void) {
  const char* fb = getenv("SHUNT_FALLBACK");
  return !fb || strcmp(fb, "0") != 0;
}

static void coll_config_init(ncclCollConfig_t* cfg) {
  *cfg = api_coll_config();
  cfg->forceAlgSelection = 1;
}

/* One ncclAllReduceConfig of `count` floats; want_plan: 1 a plan serves it, 0 NCCL does (the
 * double records it without computing; alone, the call fails with a message). */
static void config_allreduce(ncclComm_t comm, int rank, size_t count, const ncclCollConfig_t* cfg,
                             int want_plan, const char* why) {
  float* buf = malloc(count * sizeof(float));
  for (size_t i = 0; i < count; i++) buf[i] = fval(rank, i);
  ncclResult_t rc = ncclAllReduceConfig(buf, buf, count, ncclFloat, ncclSum, comm, NULL, cfg);
  if (want_plan) {
    CHECK_MSG(rc == ncclSuccess, "%s: ncclAllReduceConfig failed: %s", why, ncclGetLastError(comm));
    CHECK_MSG(strcmp(last_plan(comm), "nccl") != 0, "%s: went to NCCL", why);
    size_t bad = 0;
    for (size_t i = 0; i < count; i++) {
      float want = 0;
      for (int r = 0; r < nranks; r++) want += fval(r, i);
      bad += buf[i] != want;
    }
    CHECK_MSG(bad == 0, "%s: %zu wrong", why, bad);
  } else if (fallback_on()) {
    CHECK_MSG(rc == ncclSuccess, "%s: %s", why, ncclGetLastError(comm));
    CHECK_MSG(strcmp(last_plan(comm), "nccl") == 0, "%s: served by plan %s", why, last_plan(comm));
    const struct fake_call* c = fake_last();
    CHECK_MSG(c && !strcmp(c->name, "ncclAllReduceConfig"), "%s: NCCL got %s", why, c ? c->name : "nothing");
    /* The config reached NCCL as the caller's pointer, its bytes untouched. */
    if (c) CHECK(c->nargs == 8 && !memcmp(c->arg[7], &cfg, sizeof(cfg)));
  } else {
    CHECK_MSG(rc == ncclInvalidUsage, "%s: alone, expected ncclInvalidUsage, got %d", why, rc);
    CHECK_STR_CONTAINS(ncclGetLastError(comm), why);
  }
  free(buf);
}

static int run_config(ncclComm_t comm, int rank) {
  size_t count = 1024; /* 4 KiB: the LL plans' range */
  ncclCollConfig_t cfg;
  config_allreduce(comm, rank, count, NULL, 1, "no config");
  coll_config_init(&cfg);
  config_allreduce(comm, rank, count, &cfg, 1, "a default config");
  const char* plan = last_plan(comm);
  char plan_name[128];
  snprintf(plan_name, sizeof(plan_name), "%s", plan);

  cfg.algSelection = "ring,tree";
  config_allreduce(comm, rank, count, &cfg, 0, "algSelection names only NCCL algorithms");
  cfg.algSelection = "ring, SHUNT";
  config_allreduce(comm, rank, count, &cfg, 1, "algSelection names shunt");
  cfg.algSelection = "^nvls";
  config_allreduce(comm, rank, count, &cfg, 1, "algSelection excludes only NCCL algorithms");
  cfg.algSelection = "^ring,shunt";
  config_allreduce(comm, rank, count, &cfg, 0, "algSelection excludes shunt");
  /* A struct from headers that end before algSelection: the field is not read. */
  cfg.algSelection = "ring";
  cfg.size = offsetof(ncclCollConfig_t, algSelection);
  config_allreduce(comm, rank, count, &cfg, 1, "a shorter struct");
  coll_config_init(&cfg);

  ncclConfigExt_t other = {NULL, {12345, SHUNT_CONFIG_NO_PLANS}, {.i = 1}}; /* another vendor's */
  ncclConfigExt_t ext = {&other, {SHUNT_CONFIG_VENDOR_ID, SHUNT_CONFIG_PLAN}, {.s = plan_name}};
  cfg.ext = &ext;
  config_allreduce(comm, rank, count, &cfg, 1, "the plan named");
  CHECK_MSG(strcmp(last_plan(comm), plan_name) == 0, "named %s, served by %s", plan_name, last_plan(comm));
  ext.val.s = "allreduce_no_such_plan";
  config_allreduce(comm, rank, count, &cfg, 0, "the plan the call names is not one for this collective");
  ext.key.optionId = SHUNT_CONFIG_NO_PLANS;
  ext.val.i = 1;
  config_allreduce(comm, rank, count, &cfg, 0, "the call's config forbids plans");
  ext.key.optionId = 99;
  float x = 1;
  CHECK_EQ_INT(ncclAllReduceConfig(&x, &x, 1, ncclFloat, ncclSum, comm, NULL, &cfg), ncclInvalidArgument);
  CHECK_STR_CONTAINS(ncclGetLastError(comm), "unknown shunt option 99");
  coll_config_init(&cfg);
  cfg.magic = 0;
  CHECK_EQ_INT(ncclAllReduceConfig(&x, &x, 1, ncclFloat, ncclSum, comm, NULL, &cfg), ncclInvalidArgument);
  CHECK_STR_CONTAINS(ncclGetLastError(comm), "not initialised");

  /* launchCompletionEvent, with the CUDA driver stand-in in the process; a plan served in a
   * group records it once the group has run it. */
  void* cuda = dlopen(getenv("TEST_FAKE_CUDA"), RTLD_NOW | RTLD_GLOBAL);
  long (*records)(void**, void**) =
      cuda ? (long (*)(void**, void**))dlsym(cuda, "fakecuda_event_records") : NULL;
  CHECK_MSG(records != NULL, "cannot load the CUDA driver stand-in: %s", dlerror());
  /* A real event and stream of the stand-in (it refuses handles it did not make). */
  int (*cu_init)(unsigned) = cuda ? (int (*)(unsigned))dlsym(cuda, "cuInit") : NULL;
  int (*retain)(void**, int) = cuda ? (int (*)(void**, int))dlsym(cuda, "cuDevicePrimaryCtxRetain") : NULL;
  int (*release)(int) = cuda ? (int (*)(int))dlsym(cuda, "cuDevicePrimaryCtxRelease_v2") : NULL;
  int (*set_ctx)(void*) = cuda ? (int (*)(void*))dlsym(cuda, "cuCtxSetCurrent") : NULL;
  int (*event_create)(void**, unsigned) =
      cuda ? (int (*)(void**, unsigned))dlsym(cuda, "cuEventCreate") : NULL;
  int (*event_destroy)(void*) = cuda ? (int (*)(void*))dlsym(cuda, "cuEventDestroy_v2") : NULL;
  int (*stream_create)(void**, unsigned) =
      cuda ? (int (*)(void**, unsigned))dlsym(cuda, "cuStreamCreate") : NULL;
  int (*stream_destroy)(void*) = cuda ? (int (*)(void*))dlsym(cuda, "cuStreamDestroy_v2") : NULL;
  void *ctx = NULL, *event_h = NULL, *stream_h = NULL;
  if (records && cu_init && retain && release && set_ctx && event_create && event_destroy && stream_create &&
      stream_destroy) {
    CHECK_EQ_INT(cu_init(0), 0);
    CHECK_EQ_INT(retain(&ctx, 0), 0);
    CHECK_EQ_INT(set_ctx(ctx), 0);
    CHECK_EQ_INT(event_create(&event_h, 2), 0);
    CHECK_EQ_INT(stream_create(&stream_h, 1), 0);
  } else {
    CHECK_MSG(0, "the driver stand-in lacks its context, event or stream calls");
    records = NULL;
  }
  if (records) {
    void *ev = NULL, *st = NULL;
    long before = records(&ev, &st);
    coll_config_init(&cfg);
    cfg.launchCompletionEvent = (cudaEvent_t)event_h;
    float* a = malloc(count * sizeof(float));
    int32_t* g = calloc((size_t)nranks * 256, sizeof(int32_t));
    for (size_t i = 0; i < count; i++) a[i] = fval(rank, i);
    for (int i = 0; i < 256; i++) g[rank * 256 + i] = rank * 7 + i;
    CHECK_EQ_INT(ncclGroupStart(), ncclSuccess);
    CHECK_EQ_INT(ncclAllReduceConfig(a, a, count, ncclFloat, ncclSum, comm, (cudaStream_t)stream_h, &cfg),
                 ncclSuccess);
    CHECK_MSG(records(&ev, &st) == before, "the event was recorded before the group ran the plan");
    CHECK_EQ_INT(ncclAllGatherConfig(g + rank * 256, g, 256, ncclInt32, comm, NULL, NULL), ncclSuccess);
    CHECK_EQ_INT(ncclGroupEnd(), ncclSuccess);
    CHECK_EQ_INT(records(&ev, &st), before + 1);
    CHECK(ev == event_h && st == stream_h);
    CHECK_MSG(strcmp(last_plan(comm), "nccl") != 0, "the group's allgather went to NCCL");
    size_t bad = 0;
    for (size_t i = 0; i < count; i++) {
      float want = 0;
      for (int r = 0; r < nranks; r++) want += fval(r, i);
      bad += a[i] != want;
    }
    for (int r = 0; r < nranks; r++)
      for (int i = 0; i < 256; i++) bad += g[r * 256 + i] != r * 7 + i;
    CHECK_MSG(bad == 0, "rank %d: %zu wrong after the Config group", rank, bad);
    /* Allgather with plans forbidden goes to NCCL too. */
    coll_config_init(&cfg);
    ncclConfigExt_t none = {NULL, {SHUNT_CONFIG_VENDOR_ID, SHUNT_CONFIG_NO_PLANS}, {.i = 1}};
    cfg.ext = &none;
    ncclResult_t rc = ncclAllGatherConfig(g + rank * 256, g, 256, ncclInt32, comm, NULL, &cfg);
    CHECK_EQ_INT(rc, fallback_on() ? ncclSuccess : ncclInvalidUsage);
    CHECK_MSG(strcmp(last_plan(comm), "nccl") == 0, "allgather with plans forbidden used %s",
              last_plan(comm));
    free(a);
    free(g);
    event_destroy(event_h);
    stream_destroy(stream_h);
    set_ctx(NULL);
    release(0);
  }
  return 0;
}

static int run_suspend(ncclComm_t comm, int rank) {
  check_allreduce(comm, rank, nranks, 1024, 0, 1);
  CHECK_EQ_INT(ncclCommSuspend(comm, NCCL_SUSPEND_MEM), ncclSuccess);
  if (fallback_on()) {
    const struct fake_call* c = fake_last();
    CHECK_MSG(c && !strcmp(c->name, "ncclCommSuspend"), "NCCL's half was not suspended");
  }
  float x[4] = {1, 2, 3, 4};
  CHECK_EQ_INT(ncclAllReduce(x, x, 4, ncclFloat, ncclSum, comm, NULL), ncclInvalidUsage);
  CHECK_STR_CONTAINS(ncclGetLastError(comm), "suspended");
  CHECK_EQ_INT(ncclCommResume(comm), ncclSuccess);
  check_allreduce(comm, rank, nranks, 1024, 0, 1);
  check_allgather(comm, rank, nranks, 256, 1);
  return 0;
}

static int run_grow(ncclComm_t comm, int rank) {
  ncclComm_t grown = NULL;
  ncclUniqueId gid;
  memset(&gid, 7, sizeof(gid));
  if (fallback_on()) {
    CHECK_EQ_INT(ncclCommGetUniqueId(comm, &gid), ncclSuccess);
    const struct fake_call* c = fake_last();
    CHECK(c && !strcmp(c->name, "ncclCommGetUniqueId"));
    CHECK_EQ_INT(ncclCommGrow(comm, nranks + 1, &gid, -1, &grown, NULL), ncclSuccess);
    c = fake_last();
    CHECK_MSG(c && !strcmp(c->name, "ncclCommGrow"), "ncclCommGrow did not reach NCCL");
    if (c) {
      CHECK(c->nargs == 6 && !memcmp(c->arg[0], &comm, sizeof(comm)));
      int n1 = nranks + 1;
      CHECK(!memcmp(c->arg[1], &n1, sizeof(n1)));
    }
  } else {
    CHECK_EQ_INT(ncclCommGrow(comm, nranks + 1, &gid, -1, &grown, NULL), ncclInvalidUsage);
    CHECK_STR_CONTAINS(ncclGetLastError(comm), "no NCCL communicator");
    CHECK_EQ_INT(ncclCommGetUniqueId(comm, &gid), ncclInvalidUsage);
  }
  /* The parent still runs its plans. */
  check_allreduce(comm, rank, nranks, 1024, 0, 1);
  return 0;
}

static int run_badinput(ncclComm_t comm, int rank) {
  float x[4] = {0};
  CHECK_EQ_INT(ncclAllReduce(x, x, 0, ncclFloat, ncclSum, comm, NULL), ncclSuccess);
  CHECK_EQ_INT(ncclAllGather(x, x, 0, ncclFloat, comm, NULL), ncclSuccess);
  /* Byte sizes that wrap: refused before anything is read. */
  CHECK_EQ_INT(ncclAllReduce(x, x, SIZE_MAX / 2, ncclFloat, ncclSum, comm, NULL), ncclInvalidArgument);
  CHECK_STR_CONTAINS(ncclGetLastError(comm), "more bytes than any buffer holds");
  CHECK_EQ_INT(ncclAllGather(x, x, SIZE_MAX / 4 / (size_t)nranks + 1, ncclFloat, comm, NULL),
               ncclInvalidArgument);
  CHECK_STR_CONTAINS(ncclGetLastError(comm), "more bytes than any buffer holds");
  /* Buffers one byte past an aligned address: still exact, in and out of place. */
  size_t count = 1024;
  char* raw = malloc(count * sizeof(float) * 2 + 64);
  for (int inplace = 0; inplace < 2; inplace++) {
    char* send = raw + 1;
    char* recv = inplace ? send : raw + 1 + count * sizeof(float) + 16;
    for (size_t i = 0; i < count; i++) {
      float v = fval(rank, i);
      memcpy(send + i * sizeof(float), &v, sizeof(v));
    }
    CHECK_EQ_INT(ncclAllReduce(send, recv, count, ncclFloat, ncclSum, comm, NULL), ncclSuccess);
    size_t bad = 0;
    for (size_t i = 0; i < count; i++) {
      float want = 0, got;
      for (int r = 0; r < nranks; r++) want += fval(r, i);
      memcpy(&got, recv + i * sizeof(float), sizeof(got));
      bad += got != want;
    }
    CHECK_MSG(bad == 0, "rank %d: unaligned %s allreduce: %zu wrong (served by %s)", rank,
              inplace ? "in-place" : "out-of-place", bad, last_plan(comm));
  }
  free(raw);
  /* An op that no ncclRedOpCreatePreMulSum made: alone, NCCL's answer. */
  if (!fallback_on()) {
    CHECK_EQ_INT(ncclAllReduce(x, x, 4, ncclFloat, (ncclRedOp_t)77, comm, NULL), ncclInvalidArgument);
    CHECK_STR_CONTAINS(ncclGetLastError(comm), "invalid reduction operation 77");
  }
  return 0;
}

/* Two communicators of the same ranks; a transport fault meets the first one's first call
 * (FAKEIBV_FAULT_ONCE: only the first endpoint of each process to get there sees it). The
 * second must not be disturbed: exact, and no error of its own. */
static int run_isolate(ncclComm_t a, int rank) {
  ncclComm_t b = NULL;
  size_t count = 4096;
  float* buf = calloc(count, sizeof(float));
  CHECK(buf != NULL);
  if (!buf) CHECK_DONE();
  ncclResult_t rc = ncclAllReduce(buf, buf, count, ncclFloat, ncclSum, a, NULL);
  CHECK_MSG(rc != ncclSuccess, "the call through the faulty endpoint succeeded");
  ncclResult_t st = ncclSuccess;
  CHECK_EQ_INT(ncclCommGetAsyncError(a, &st), ncclSuccess);
  CHECK_EQ_INT(st, ncclSystemError);
  CHECK_EQ_INT(ncclCommSplit(a, 0, rank, &b, NULL), ncclSuccess);
  if (b) {
    for (int inplace = 0; inplace < 2; inplace++) check_allreduce(b, rank, nranks, count, inplace, 1);
    check_allgather(b, rank, nranks, 1024, 0);
    CHECK_EQ_INT(ncclCommGetAsyncError(b, &st), ncclSuccess);
    CHECK_EQ_INT(st, ncclSuccess);
    CHECK_EQ_INT(ncclCommDestroy(b), ncclSuccess);
  }
  CHECK_EQ_INT(ncclCommAbort(a), ncclSuccess);
  free(buf);
  CHECK_DONE();
}

static int run_rank(int rank, ncclUniqueId id) {
  /* Every rank a host of its own: port channels between them over the network transport. */
  char host[32];
  snprintf(host, sizeof(host), "host%d", rank);
  if (getenv("TEST_RANK_HOSTS")) setenv("SHUNT_HOSTID", host, 1);
  if (!strcmp(scenario, "scalable")) return run_scalable(rank, id);
  if (!strcmp(scenario, "nonblocking")) return run_nonblocking(rank, id);
  if (!strcmp(scenario, "abortpending")) return run_abort_pending(rank, id);
  if (!strcmp(scenario, "mismatch") && rank == 1) setenv("SHUNT_PLAN_DIR", getenv("TEST_OTHER_PLAN_DIR"), 1);
  if (!strcmp(scenario, "noplan")) setenv("SHUNT_PLAN_DIR", getenv("TEST_OTHER_PLAN_DIR"), 1);
  if (!strcmp(scenario, "force")) setenv("SHUNT_FORCE_FALLBACK", "all", 1);
  ncclComm_t comm = NULL;
  CHECK_EQ_INT(ncclCommInitRank(&comm, nranks, id, rank), ncclSuccess);
  if (!comm) CHECK_DONE();
  int n = 0, me = -1;
  CHECK_EQ_INT(ncclCommCount(comm, &n), ncclSuccess);
  CHECK_EQ_INT(ncclCommUserRank(comm, &me), ncclSuccess);
  CHECK_EQ_INT(n, nranks);
  CHECK_EQ_INT(me, rank);

  if (!strcmp(scenario, "shrink")) return run_shrink(comm, rank);
  if (!strcmp(scenario, "isolate")) return run_isolate(comm, rank);
  if (!strcmp(scenario, "watchdog")) return run_watchdog(comm, rank);
  if (!strcmp(scenario, "devptr")) run_devptr(comm, rank);
  if (!strcmp(scenario, "config")) run_config(comm, rank);
  if (!strcmp(scenario, "suspend")) run_suspend(comm, rank);
  if (!strcmp(scenario, "grow")) run_grow(comm, rank);
  if (!strcmp(scenario, "badinput")) run_badinput(comm, rank);
  if (!strcmp(scenario, "plans")) {
    /* 4 KiB lies in the LL plans' range, 2 MiB in the Simple plans'. */
    size_t counts[] = {1024, 512 * 1024};
    for (int k = 0; k < 2; k++)
      for (int inplace = 0; inplace < 2; inplace++) {
        check_allreduce(comm, rank, n, counts[k], inplace, 1);
        check_allgather(comm, rank, n, counts[k] / (size_t)n, inplace);
      }
  } else if (!strcmp(scenario, "split")) {
    ncclComm_t half = NULL;
    int color = (rank == nranks - 1 && nranks > 2) ? NCCL_SPLIT_NOCOLOR : rank % 2;
    CHECK_EQ_INT(ncclCommSplit(comm, color, rank, &half, NULL), ncclSuccess);
    if (color == NCCL_SPLIT_NOCOLOR) {
      CHECK(half == NULL);
    } else {
      int hn = 0, hr = -1;
      CHECK_EQ_INT(ncclCommCount(half, &hn), ncclSuccess);
      CHECK_EQ_INT(ncclCommUserRank(half, &hr), ncclSuccess);
      int expect = 0;
      for (int r = 0; r < nranks; r++) expect += ((r == nranks - 1 && nranks > 2) ? -1 : r % 2) == color;
      CHECK_EQ_INT(hn, expect);
      check_allreduce(half, hr, hn, 1024, 0, -1);
      check_allgather(half, hr, hn, 256, 1);
      CHECK_EQ_INT(ncclCommDestroy(half), ncclSuccess);
    }
    check_allreduce(comm, rank, n, 1024, 1, -1);
  } else if (!strcmp(scenario, "group")) {
    size_t count = 1024;
    float* a = malloc(count * sizeof(float));
    int32_t* g = malloc((size_t)n * 256 * sizeof(int32_t));
    for (size_t i = 0; i < count; i++) a[i] = fval(rank, i);
    for (int i = 0; i < 256; i++) g[rank * 256 + i] = rank * 7 + i;
    CHECK_EQ_INT(ncclGroupStart(), ncclSuccess);
    CHECK_EQ_INT(ncclGroupStart(), ncclSuccess); /* nesting */
    CHECK_EQ_INT(ncclAllReduce(a, a, count, ncclFloat, ncclSum, comm, NULL), ncclSuccess);
    CHECK_EQ_INT(ncclGroupEnd(), ncclSuccess);
    CHECK_EQ_INT(ncclAllGather(g + rank * 256, g, 256, ncclInt32, comm, NULL), ncclSuccess);
    CHECK_EQ_INT(ncclAllReduce(a, a, count, ncclFloat, ncclSum, comm, NULL), ncclSuccess);
    CHECK_EQ_INT(ncclGroupEnd(), ncclSuccess);
    size_t bad = 0;
    for (size_t i = 0; i < count; i++) {
      float s = 0;
      for (int r = 0; r < n; r++) s += fval(r, i);
      bad += a[i] != s * (float)n;
    }
    for (int r = 0; r < n; r++)
      for (int i = 0; i < 256; i++) bad += g[r * 256 + i] != r * 7 + i;
    CHECK_MSG(bad == 0, "rank %d: %zu wrong after the group", rank, bad);
    free(a);
    free(g);
  } else if (!strcmp(scenario, "noplan")) {
    check_allreduce(comm, rank, n, 3, 0, 0);
  } else if (!strcmp(scenario, "mismatch") || !strcmp(scenario, "force")) {
    check_allreduce(comm, rank, n, 1024, 0, 0);
    check_allgather(comm, rank, n, 256, 0);
  } else if (!strcmp(scenario, "abort")) {
    check_allreduce(comm, rank, n, 1024, 0, -1);
    if (rank == 1) _exit(0); /* a peer gone without a word */
    sleep(1);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK_EQ_INT(ncclCommAbort(comm), ncclSuccess);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    CHECK_MSG(s < 5.0, "abort took %.1f s", s);
    CHECK_DONE();
  }
  CHECK_EQ_INT(ncclCommFinalize(comm), ncclSuccess);
  CHECK_EQ_INT(ncclCommDestroy(comm), ncclSuccess);
  CHECK_DONE();
}

/* One thread holds every rank: nothing may block on a peer before ncclGroupEnd. */
static int run_initall(void) {
  ncclComm_t comms[16];
  int n = nranks;
  CHECK_EQ_INT(ncclCommInitAll(comms, n, NULL), ncclSuccess);
  size_t count = 1024;
  float* bufs[16];
  int32_t* gath[16];
  for (int r = 0; r < n; r++) {
    int me = -1;
    CHECK_EQ_INT(ncclCommUserRank(comms[r], &me), ncclSuccess);
    CHECK_EQ_INT(me, r);
    bufs[r] = calloc(count, sizeof(float));
    gath[r] = calloc((size_t)n * 64, sizeof(int32_t));
    for (size_t i = 0; i < count; i++) bufs[r][i] = fval(r, i);
    for (int i = 0; i < 64; i++) gath[r][r * 64 + i] = r * 1000 + i;
  }
  CHECK_EQ_INT(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < n; r++) {
    CHECK_EQ_INT(ncclAllReduce(bufs[r], bufs[r], count, ncclFloat, ncclSum, comms[r], NULL), ncclSuccess);
    CHECK_EQ_INT(ncclAllGather(gath[r] + r * 64, gath[r], 64, ncclInt32, comms[r], NULL), ncclSuccess);
  }
  CHECK_EQ_INT(ncclGroupEnd(), ncclSuccess);
  size_t bad = 0;
  for (int r = 0; r < n; r++) {
    for (size_t i = 0; i < count; i++) {
      float want = 0;
      for (int q = 0; q < n; q++) want += fval(q, i);
      bad += bufs[r][i] != want;
    }
    for (int q = 0; q < n; q++)
      for (int i = 0; i < 64; i++) bad += gath[r][q * 64 + i] != q * 1000 + i;
    CHECK_MSG(strcmp(last_plan(comms[r]), "nccl") != 0, "rank %d: the group's calls went to NCCL", r);
    CHECK_EQ_INT(ncclCommDestroy(comms[r]), ncclSuccess);
    free(bufs[r]);
    free(gath[r]);
  }
  CHECK_MSG(bad == 0, "%zu wrong elements after the group", bad);
  CHECK_DONE();
}

/* A forked rank: the first id makes its communicator, the second one is kept for scalable. */
static int rank_main(int rank, const ncclUniqueId* ids) {
  second_id = ids[1];
  return run_rank(rank, ids[0]);
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: test_api SCENARIO NRANKS\n");
    return 2;
  }
  scenario = argv[1];
  nranks = atoi(argv[2]);
  if (nranks < 1 || nranks > 16) return 2;
  if (!strcmp(scenario, "initall")) return run_initall();
  return fork_ranks(nranks, 2, 0, rank_main);
}
