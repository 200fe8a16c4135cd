/* A thread's doorbell: how a thread that found nothing to do sleeps until another thread gives
 * it something, without a lock on either side.
 *
 * Promises, for threads of one process (a private futex):
 * - The sleeper arms the bell (shunt_doorbell_arm, which returns the bell's count), takes a last
 *   look at what it waits for, sleeps (shunt_doorbell_wait) only if that look found nothing, and
 *   disarms. A ringer publishes its work first (sequentially consistent), then rings: either the
 *   sleeper's last look sees the work, or the ring sees the sleeper armed and wakes it (a ring
 *   after the arm changes the count, so the wait returns at once).
 * - Ringing a thread that is not asleep costs one load.
 * - A wait is bounded by its timeout, so a missed ring could only delay, never stall. */
#ifndef SHUNT_TRANSPORT_DOORBELL_H
#define SHUNT_TRANSPORT_DOORBELL_H

#include <linux/futex.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

struct shunt_doorbell {
  _Atomic uint32_t count; /* the futex word: rings while armed */
  atomic_bool armed;
};

static inline void shunt_doorbell_init(struct shunt_doorbell* d) {
  atomic_init(&d->count, 0);
  atomic_init(&d->armed, false);
}

static inline uint32_t shunt_doorbell_arm(struct shunt_doorbell* d) {
  uint32_t seen = atomic_load_explicit(&d->count, memory_order_seq_cst);
  atomic_store_explicit(&d->armed, true, memory_order_seq_cst);
  return seen;
}

static inline void shunt_doorbell_wait(struct shunt_doorbell* d, uint32_t seen, long ns) {
  struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
  syscall(SYS_futex, (uint32_t*)&d->count, FUTEX_WAIT_PRIVATE, seen, &ts, NULL, 0);
}

static inline void shunt_doorbell_disarm(struct shunt_doorbell* d) {
  atomic_store_explicit(&d->armed, false, memory_order_relaxed);
}

static inline void shunt_doorbell_ring(struct shunt_doorbell* d) {
  if (atomic_load_explicit(&d->armed, memory_order_seq_cst)) {
    atomic_fetch_add_explicit(&d->count, 1, memory_order_seq_cst);
    syscall(SYS_futex, (uint32_t*)&d->count, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
  }
}

#endif
