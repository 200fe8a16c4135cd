/* The kernel's waits without a timeout (the GPU backend's default), on its CPU build, ranks as
 * threads:
 *   - a rank that starts 1 s late does not break the world: its peer waits, both results are
 *     exact (allreduce of ones over 2 ranks gives 2 everywhere);
 *   - a wait that can never end (a plan missing a signal) ends when the world is aborted from
 *     another thread, and the waiting rank reports where it was: "aborted: rank 1 block 0
 *     thread 0 ops[7] (wait)".
 * Usage: test_kcpu_wait PLANS_DIR BROKEN_DIR */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exec/kcpu/kcpu_world.h"
#include "exec/lower.h"
#include "exec/split.h"
#include "plan/parse.h"
#include "transport/world.h"

#define SLOT 256
#define BYTES 65536u

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static unsigned arrived, gen;
static char slots[2][SLOT];

static int barrier2(void* ctx) {
  (void)ctx;
  pthread_mutex_lock(&mu);
  unsigned g = gen;
  if (++arrived == 2) {
    arrived = 0;
    gen++;
    pthread_cond_broadcast(&cv);
  } else {
    while (g == gen) pthread_cond_wait(&cv, &mu);
  }
  pthread_mutex_unlock(&mu);
  return 0;
}

static int allgather2(void* ctx, void* buf, size_t bytes) {
  unsigned r = *(unsigned*)ctx;
  if (bytes > SLOT) return -1;
  memcpy(slots[r], (char*)buf + r * bytes, bytes);
  barrier2(ctx);
  for (unsigned k = 0; k < 2; k++) memcpy((char*)buf + k * bytes, slots[k], bytes);
  return barrier2(ctx);
}

struct job {
  struct shunt_plan* plan;
  unsigned late_ms; /* rank 1 launches this late */
  struct shunt_kcpu_world* w[2];
  int rc[2];
  char err[2][512];
  int bad[2];        /* output elements that are not 2 */
  unsigned ranks_in; /* ranks whose world exists */
  bool aborting;     /* the main thread aborts the world: nobody destroys it before */
  bool abort_done;
  bool returned0; /* rank 0's launch has returned */
};

struct rank_arg {
  struct job* J;
  unsigned rank;
};

static void* rank_main(void* arg) {
  struct rank_arg* a = arg;
  struct job* J = a->J;
  unsigned rank = a->rank;
  struct shunt_world_exchange bs = {.oob = {&a->rank, allgather2, barrier2}};
  uint64_t in_bytes = J->plan->coll == SHUNT_COLL_ALLGATHER ? BYTES / 2 : BYTES;
  struct shunt_call_shape cs = {in_bytes, BYTES, SHUNT_DT_FLOAT32, SHUNT_REDOP_SUM, SHUNT_PKT_LL16, 0, false, false};
  struct shunt_split sp;
  char err[512] = "";
  struct shunt_program* p = NULL;
  if (!shunt_split_call(J->plan, &cs, &sp, err, sizeof(err)) || sp.rest ||
      !(p = shunt_lower(J->plan, rank, &sp.head_shape, err, sizeof(err)))) {
    fprintf(stderr, "rank %u: cannot lower: %s\n", rank, err);
    exit(1);
  }
  struct shunt_kcpu_world_config cfg = {sp.scratch, sp.in_need, sp.out_need, 0}; /* no timeout */
  if (shunt_kcpu_world_create(rank, 2, &cfg, &bs, &J->w[rank], err, sizeof(err)) != 0) {
    fprintf(stderr, "rank %u: world: %s\n", rank, err);
    exit(1);
  }
  pthread_mutex_lock(&mu);
  J->ranks_in++;
  pthread_mutex_unlock(&mu);
  struct shunt_kcpu_prog* kp = NULL;
  if (shunt_kcpu_prog_create(J->w[rank], p, 3, &kp, err, sizeof(err)) != 0) {
    fprintf(stderr, "rank %u: program: %s\n", rank, err);
    exit(1);
  }
  float* in = malloc(BYTES);
  float* out = malloc(BYTES);
  for (unsigned i = 0; i < BYTES / 4; i++) in[i] = 1.0f, out[i] = -1.0f;
  if (rank == 1 && J->late_ms) {
    struct timespec ts = {J->late_ms / 1000, (long)(J->late_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
  }
  struct shunt_kcpu_run r = {kp, in, out, NULL, 0};
  J->rc[rank] = shunt_kcpu_launch(J->w[rank], &r, J->err[rank], sizeof(J->err[rank]));
  if (rank == 0) {
    pthread_mutex_lock(&mu);
    J->returned0 = true;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
  }
  for (unsigned i = 0; i < BYTES / 4; i++) J->bad[rank] += out[i] != 2.0f;
  free(in);
  free(out);
  barrier2(&a->rank); /* neither kernel runs any more */
  /* The abort call reads the world: it must have returned before the world goes. */
  pthread_mutex_lock(&mu);
  while (J->aborting && !J->abort_done) pthread_cond_wait(&cv, &mu);
  pthread_mutex_unlock(&mu);
  shunt_kcpu_prog_destroy(kp);
  shunt_program_free(p);
  shunt_kcpu_world_destroy(J->w[rank]);
  return NULL;
}

static struct shunt_plan* load(const char* dir, const char* name) {
  char path[1024];
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  struct shunt_plan_errors errs = {0};
  struct shunt_plan* p = shunt_plan_load_file(path, &errs);
  shunt_plan_errors_free(&errs);
  if (!p) {
    fprintf(stderr, "%s: does not load\n", path);
    exit(1);
  }
  p->min_message_size = 0; /* this test's own copy: any size */
  p->max_message_size = UINT64_MAX;
  return p;
}

static void run(struct job* J, bool abort_it) {
  J->aborting = abort_it;
  pthread_t th[2];
  struct rank_arg a[2] = {{J, 0}, {J, 1}};
  for (unsigned r = 0; r < 2; r++) pthread_create(&th[r], NULL, rank_main, &a[r]);
  if (abort_it) {
    /* Abort once rank 1 is stuck, as ncclCommAbort would. Rank 0's last wait takes rank 1's
     * ops[6] signal, so when rank 0's launch returns rank 1 is past it and can only be at (or
     * entering) the wait at ops[7]: no sleep decides where the abort lands. */
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 120;
    pthread_mutex_lock(&mu);
    int rc = 0;
    while (!J->returned0 && rc == 0) rc = pthread_cond_timedwait(&cv, &mu, &until);
    bool ready = J->returned0 && J->ranks_in == 2;
    pthread_mutex_unlock(&mu);
    if (!ready) {
      fprintf(stderr, "FAIL: rank 0's launch did not return within 120 s\n");
      exit(1);
    }
    shunt_kcpu_world_abort(J->w[0]);
    pthread_mutex_lock(&mu);
    J->abort_done = true;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
  }
  for (unsigned r = 0; r < 2; r++) pthread_join(th[r], NULL);
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: test_kcpu_wait PLANS_DIR BROKEN_DIR\n");
    return 2;
  }
  int failed = 0;
  struct job late = {.plan = load(argv[1], "allreduce_2r_simple_outofplace.json"), .late_ms = 1000};
  run(&late, false);
  for (unsigned r = 0; r < 2; r++)
    if (late.rc[r] != SHUNT_OK || late.bad[r]) {
      printf("FAIL: late peer: rank %u: rc %d, %d wrong elements: %s\n", r, late.rc[r], late.bad[r],
             late.err[r]);
      failed = 1;
    }
  if (!failed) printf("ok: a peer 1 s late, no timeout: both results exact\n");
  shunt_plan_free(late.plan);

  struct job stuck = {.plan = load(argv[2], "broken_missing_signal.json")};
  run(&stuck, true);
  const char* want =
      "aborted: rank 1 block 0 thread 0 ops[7] (wait): waits on signal on memory channel #0 to rank 0";
  if (stuck.rc[1] != SHUNT_E_TIMEOUT || !strstr(stuck.err[1], want)) {
    printf("FAIL: abort: rank 1: rc %d: \"%s\", wanted \"%s\"\n", stuck.rc[1], stuck.err[1], want);
    failed = 1;
  } else {
    printf("ok: abort ends a wait that has no timeout: %s\n", stuck.err[1]);
  }
  shunt_plan_free(stuck.plan);
  return failed;
}
