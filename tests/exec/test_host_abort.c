/* An abort from another thread (a watchdog's ncclCommAbort) while the host backend replaces its
 * world with a larger one: two ranks as threads over an in-process exchange, the seed plan.
 *
 * 1. The abort reaches the world that replaced the one it saw: an abort that loaded the old
 *    world just before prepare swapped it out (here: an abort before the grow) must still make
 *    the next run give up at once, not wait on peers until its timeout.
 * 2. An abort's use of a world is ordered before prepare frees that world. The abort runs in a
 *    thread of its own, and this test orders it before the grow only through a relaxed flag,
 *    which gives ThreadSanitizer no happens-before: unless the backend itself orders the two,
 *    the sanitizer reports the abort's accesses racing with the free (label tsan). The other
 *    builds pass this case either way: here the abort is over before the free, and an abort
 *    still under way at the free (a use after free) is too rare an interleaving to force. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "exec/backend.h"
#include "plan/parse.h"
#include "util/status.h"

#define NR 2
#define THREAD_EXCHANGE_RANKS NR
#define THREAD_EXCHANGE_SLOT 4096
#include "common/thread_exchange.h"

struct rank_arg {
  uint32_t rank;
  const struct shunt_plan* plan;
  struct shunt_backend* b;
  int failures; /* this rank's: check.h's count is not for threads */
};

static int allgather(void* ctx, void* buf, size_t bytes) {
  return thread_exchange_allgather(((struct rank_arg*)ctx)->rank, buf, bytes);
}

/* A split that asks for a world of `bytes` everywhere (prepare reads only the needs). */
static struct shunt_split need(uint64_t bytes) {
  struct shunt_split s;
  memset(&s, 0, sizeof(s));
  s.scratch = s.in_need = s.out_need = bytes;
  return s;
}

static int grow(struct rank_arg* a, uint64_t bytes) {
  struct shunt_split s = need(bytes);
  char err[1024];
  int rc = shunt_backend_prepare(a->b, a->plan, &s, err, sizeof(err));
  if (rc != 0) fprintf(stderr, "rank %u: prepare: %s\n", a->rank, err);
  return rc;
}

static atomic_int watchdog_done;

static void* watchdog(void* arg) {
  shunt_backend_abort(arg);
  /* Relaxed on purpose: the test must not order the abort before the free itself. */
  atomic_store_explicit(&watchdog_done, 1, memory_order_relaxed);
  return NULL;
}

static void* rank_main(void* arg) {
  struct rank_arg* a = arg;
  if (grow(a, 4096) != 0) a->failures++;
  /* Case 2: rank 0's world is aborted from another thread, then replaced (freed). */
  pthread_t wd;
  if (a->rank == 0) {
    pthread_create(&wd, NULL, watchdog, a->b);
    while (!atomic_load_explicit(&watchdog_done, memory_order_relaxed)) sched_yield();
  }
  if (grow(a, 1 << 16) != 0) a->failures++;
  if (a->rank == 0) pthread_join(wd, NULL);
  /* Case 1: the world made after the abort is aborted too. Rank 1 never runs, so a run that
   * missed the abort waits for it until the timeout. */
  if (a->rank == 0) {
    const uint64_t in_bytes = 4096;
    struct shunt_call_shape call = {in_bytes, in_bytes * NR, SHUNT_DT_INT8, SHUNT_REDOP_SUM, SHUNT_PKT_LL16,
                                    0,        false,         false};
    struct shunt_split s;
    char err[4096];
    if (!shunt_split_call(a->plan, &call, &s, err, sizeof(err))) {
      fprintf(stderr, "split: %s\n", err);
      a->failures++;
      return NULL;
    }
    s.inplace = true;
    char* out = calloc(1, in_bytes * NR);
    struct shunt_backend_call bc = {.plan = a->plan, .split = &s, .in = out, .out = out, .timeout_ms = 2000};
    int rc = shunt_backend_run(a->b, &bc, err, sizeof(err));
    /* An abort, not a timeout: the code says so as well as the words. */
    if (rc != SHUNT_E_ABORTED || !strstr(err, "aborted")) {
      fprintf(stderr, "rank 0: a run after the abort: %s (%s)\n", rc ? err : "succeeded",
              shunt_status_name(rc));
      a->failures++;
    }
    free(out);
  }
  return NULL;
}

int main(void) {
  struct shunt_plan_errors errs = {0};
  struct shunt_plan* plan = shunt_plan_load_file(SEED_PLAN, &errs);
  CHECK(plan != NULL);
  shunt_plan_errors_free(&errs);
  if (!plan) CHECK_DONE();
  pthread_t th[NR];
  struct rank_arg args[NR];
  for (uint32_t r = 0; r < NR; r++) {
    args[r] = (struct rank_arg){r, plan, NULL, 0};
    struct shunt_world_exchange ex = {.oob = {&args[r], allgather, thread_exchange_barrier}};
    args[r].b = shunt_backend_new(SHUNT_BACKEND_HOST, r, NR, &ex, -1);
    CHECK(args[r].b != NULL);
  }
  for (uint32_t r = 0; r < NR; r++) pthread_create(&th[r], NULL, rank_main, &args[r]);
  for (uint32_t r = 0; r < NR; r++) {
    pthread_join(th[r], NULL);
    CHECK_EQ_INT(args[r].failures, 0);
  }
  /* Not collective: rank 0's run gave up, and teardown never waits on peers. */
  for (uint32_t r = 0; r < NR; r++) shunt_backend_release(args[r].b);
  shunt_plan_free(plan);
  CHECK_DONE();
}
