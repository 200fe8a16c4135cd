/* Rank bells: how a rank whose blocks all wait sleeps until someone writes what it may wait
 * for, across the threads and processes of one host.
 *
 * Promises:
 * - Bells live in shared memory (a world places one per rank, and a sleeper count per host)
 *   and work across processes: a shared futex word per rank.
 * - A sleeper arms its bell (shunt_rank_bell_arm, which returns the word), takes a last look
 *   at what it waits for, sleeps (shunt_rank_bell_wait) only if that look found nothing, and
 *   disarms. A writer publishes first, then rings the bell of the rank it wrote to: either the
 *   sleeper's last look sees the write, or the ring sees the sleeper armed, changes the word and
 *   wakes it.
 * - Ringing while no rank of the host sleeps costs a fence and one load (of the host's count).
 * - A sleep is bounded by its timeout, so a write that rings nothing (a path without a ring) is
 *   seen late, never missed. */
#ifndef SHUNT_TRANSPORT_HOST_BELL_H
#define SHUNT_TRANSPORT_HOST_BELL_H

#include <limits.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

struct shunt_rank_bell {
  _Atomic uint32_t word; /* the futex word: advanced by a ring while the rank sleeps */
  _Atomic uint32_t armed;
};

/* How many ranks of the host sleep now: a ring with none asleep stops at this load. */
struct shunt_host_sleepers {
  _Atomic uint32_t n;
};

static inline uint32_t shunt_rank_bell_arm(struct shunt_host_sleepers* h, struct shunt_rank_bell* b) {
  atomic_fetch_add_explicit(&h->n, 1, memory_order_seq_cst);
  atomic_fetch_add_explicit(&b->armed, 1, memory_order_seq_cst);
  atomic_thread_fence(memory_order_seq_cst);
  return atomic_load_explicit(&b->word, memory_order_seq_cst);
}

static inline void shunt_rank_bell_wait(struct shunt_rank_bell* b, uint32_t seen, long ns) {
  struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
  syscall(SYS_futex, (uint32_t*)&b->word, FUTEX_WAIT, seen, &ts, NULL, 0);
}

static inline void shunt_rank_bell_disarm(struct shunt_host_sleepers* h, struct shunt_rank_bell* b) {
  atomic_fetch_sub_explicit(&b->armed, 1, memory_order_relaxed);
  atomic_fetch_sub_explicit(&h->n, 1, memory_order_relaxed);
}

/* Whether any rank of the host may sleep: a writer asks this before finding whom to ring. */
static inline bool shunt_host_sleepers_any(struct shunt_host_sleepers* h) {
  atomic_thread_fence(memory_order_seq_cst);
  return h && atomic_load_explicit(&h->n, memory_order_relaxed) != 0;
}

/* After shunt_host_sleepers_any said yes. */
static inline void shunt_rank_bell_ring(struct shunt_rank_bell* b) {
  if (b && atomic_load_explicit(&b->armed, memory_order_seq_cst)) {
    atomic_fetch_add_explicit(&b->word, 1, memory_order_seq_cst);
    syscall(SYS_futex, (uint32_t*)&b->word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
  }
}

#endif
