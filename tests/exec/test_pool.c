/* The host backend's worker pool: every job of a run runs at once (jobs that wait for each
 * other finish), runs grow and shrink the active set, threads are kept between runs. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "common/check.h"
#include "transport/pool.h"

struct run {
  atomic_uint arrived;
  uint32_t n;
  uint32_t done[64];
  int timed_out;
  pthread_t who[64];
};

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Each job arrives, then waits (bounded) for all of the run's jobs: only concurrency ends it. */
static void job(void* arg, uint32_t i) {
  struct run* r = arg;
  atomic_fetch_add(&r->arrived, 1);
  double end = now_s() + 10;
  while (atomic_load(&r->arrived) < r->n && now_s() < end) {
  }
  if (atomic_load(&r->arrived) < r->n) r->timed_out = 1;
  r->done[i]++;
  r->who[i] = pthread_self();
}

static void one_run(struct shunt_pool* p, uint32_t n, struct run* r) {
  atomic_init(&r->arrived, 0);
  r->n = n;
  r->timed_out = 0;
  for (uint32_t i = 0; i < 64; i++) r->done[i] = 0;
  CHECK_EQ_INT(shunt_pool_run(p, n, job, r), 0);
  CHECK_MSG(!r->timed_out, "the %u jobs of a run did not all run at once", n);
  for (uint32_t i = 0; i < 64; i++) CHECK_EQ_INT(r->done[i], i < n ? 1 : 0);
}

int main(void) {
  struct shunt_pool* p = shunt_pool_create();
  CHECK(p != NULL);
  if (!p) CHECK_DONE();
  static struct run r;
  one_run(p, 8, &r);
  pthread_t first = r.who[0];
  one_run(p, 3, &r);
  CHECK_MSG(pthread_equal(first, r.who[0]), "job 0 ran on another thread: threads were not kept");
  one_run(p, 40, &r); /* grows past the first allocation */
  one_run(p, 1, &r);
  CHECK_EQ_INT(shunt_pool_run(p, 0, job, &r), 0);
  shunt_pool_free(p);
  CHECK_DONE();
}
