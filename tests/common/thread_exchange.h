/* An in-process exchange for tests whose ranks are threads: a barrier of THREAD_EXCHANGE_RANKS
 * threads and an allgather of up to THREAD_EXCHANGE_SLOT bytes per rank, what a world's set-up
 * asks of its bootstrap (struct shunt_world_exchange). Define both before including. The test's
 * own allgather callback finds its rank in its context and calls thread_exchange_allgather. */
#ifndef SHUNT_TEST_THREAD_EXCHANGE_H
#define SHUNT_TEST_THREAD_EXCHANGE_H

#include <pthread.h>
#include <stdint.h>
#include <string.h>

#if !defined(THREAD_EXCHANGE_RANKS) || !defined(THREAD_EXCHANGE_SLOT)
#error "define THREAD_EXCHANGE_RANKS and THREAD_EXCHANGE_SLOT before including thread_exchange.h"
#endif

static pthread_mutex_t thread_exchange_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t thread_exchange_cv = PTHREAD_COND_INITIALIZER;
static unsigned thread_exchange_arrived, thread_exchange_generation;
static char thread_exchange_slots[THREAD_EXCHANGE_RANKS][THREAD_EXCHANGE_SLOT];

/* Returns once every rank has called it; the exchange's barrier (ctx unused). */
static int thread_exchange_barrier(void* ctx) {
  (void)ctx;
  pthread_mutex_lock(&thread_exchange_mu);
  unsigned g = thread_exchange_generation;
  if (++thread_exchange_arrived == THREAD_EXCHANGE_RANKS) {
    thread_exchange_arrived = 0;
    thread_exchange_generation++;
    pthread_cond_broadcast(&thread_exchange_cv);
  } else {
    while (g == thread_exchange_generation) pthread_cond_wait(&thread_exchange_cv, &thread_exchange_mu);
  }
  pthread_mutex_unlock(&thread_exchange_mu);
  return 0;
}

/* buf holds RANKS parts of `bytes`; rank's own part goes to every rank's buf. -1 when a part
 * does not fit a slot. */
static int thread_exchange_allgather(uint32_t rank, void* buf, size_t bytes) {
  if (bytes > THREAD_EXCHANGE_SLOT) return -1;
  memcpy(thread_exchange_slots[rank], (char*)buf + rank * bytes, bytes);
  thread_exchange_barrier(NULL);
  for (uint32_t r = 0; r < THREAD_EXCHANGE_RANKS; r++)
    memcpy((char*)buf + r * bytes, thread_exchange_slots[r], bytes);
  return thread_exchange_barrier(NULL);
}

#endif
