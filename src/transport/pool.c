#include "transport/pool.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

struct worker {
  struct shunt_pool* pool;
  uint32_t index;
};

struct shunt_pool {
  pthread_mutex_t mu;
  pthread_cond_t go, done;
  uint64_t gen;     /* runs started */
  uint32_t njobs;   /* jobs of the current run */
  uint32_t pending; /* jobs of the current run not yet returned */
  void (*fn)(void*, uint32_t);
  void* arg;
  bool stop;
  uint32_t nthreads, cap;
  pthread_t* threads;
  struct worker** workers;
};

static void* worker_main(void* a) {
  struct worker* me = a;
  struct shunt_pool* p = me->pool;
  pthread_mutex_lock(&p->mu);
  /* A worker started for run `gen` takes part in that run; later ones it waits for. */
  uint64_t seen = p->gen - 1;
  for (;;) {
    while (!p->stop && (p->gen == seen || me->index >= p->njobs)) {
      if (p->gen != seen) seen = p->gen; /* a run without a job for this worker */
      pthread_cond_wait(&p->go, &p->mu);
    }
    if (p->stop) break;
    seen = p->gen;
    void (*fn)(void*, uint32_t) = p->fn;
    void* arg = p->arg;
    pthread_mutex_unlock(&p->mu);
    fn(arg, me->index);
    pthread_mutex_lock(&p->mu);
    if (--p->pending == 0) pthread_cond_signal(&p->done);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

struct shunt_pool* shunt_pool_create(void) {
  struct shunt_pool* p = calloc(1, sizeof(*p));
  if (!p) return NULL;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->go, NULL);
  pthread_cond_init(&p->done, NULL);
  return p;
}

/* Grows the pool to n threads; called with the lock held. Each worker's record is an
 * allocation of its own (the worker keeps a pointer to it), so the arrays may move. */
static int grow(struct shunt_pool* p, uint32_t n) {
  if (n <= p->nthreads) return 0;
  if (n > p->cap) {
    uint32_t cap = p->cap ? p->cap : 16;
    while (cap < n) cap *= 2;
    struct worker** w = realloc(p->workers, cap * sizeof(*w));
    if (!w) return -1;
    p->workers = w;
    pthread_t* t = realloc(p->threads, cap * sizeof(*t));
    if (!t) return -1;
    p->threads = t;
    p->cap = cap;
  }
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 256 * 1024);
  int rc = 0;
  while (p->nthreads < n) {
    struct worker* w = malloc(sizeof(*w));
    if (!w) {
      rc = -1;
      break;
    }
    w->pool = p;
    w->index = p->nthreads;
    if (pthread_create(&p->threads[p->nthreads], &attr, worker_main, w) != 0) {
      free(w);
      rc = -1;
      break;
    }
    p->workers[p->nthreads++] = w;
  }
  pthread_attr_destroy(&attr);
  return rc;
}

int shunt_pool_run(struct shunt_pool* p, uint32_t n, void (*fn)(void* arg, uint32_t i), void* arg) {
  if (!p || n == 0) return 0;
  pthread_mutex_lock(&p->mu);
  if (grow(p, n) != 0) {
    pthread_mutex_unlock(&p->mu);
    return -1;
  }
  p->fn = fn;
  p->arg = arg;
  p->njobs = n;
  p->pending = n;
  p->gen++;
  pthread_cond_broadcast(&p->go);
  while (p->pending) pthread_cond_wait(&p->done, &p->mu);
  p->njobs = 0;
  pthread_mutex_unlock(&p->mu);
  return 0;
}

void shunt_pool_free(struct shunt_pool* p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  p->stop = true;
  pthread_cond_broadcast(&p->go);
  pthread_mutex_unlock(&p->mu);
  for (uint32_t i = 0; i < p->nthreads; i++) {
    pthread_join(p->threads[i], NULL);
    free(p->workers[i]);
  }
  pthread_cond_destroy(&p->go);
  pthread_cond_destroy(&p->done);
  pthread_mutex_destroy(&p->mu);
  free(p->threads);
  free(p->workers);
  free(p);
}
