/* Waiting for another thread or process on the host: spin briefly, then yield, then sleep
 * with a growing interval, so hundreds of waiting threads leave a few cores to the ones
 * that make progress. Deadlines are CLOCK_MONOTONIC nanoseconds. */
#ifndef SHUNT_TRANSPORT_BACKOFF_H
#define SHUNT_TRANSPORT_BACKOFF_H

#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>
#if defined(__SANITIZE_THREAD__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

struct shunt_backoff {
  uint32_t n;
  uint32_t sleep_ns;
};

static inline uint64_t shunt_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Sleeps ns nanoseconds. Under ThreadSanitizer the sleep bypasses its interceptor: after each
 * intercepted sleep it walks every thread and fiber context of the process (for its "as if
 * synchronised by sleep" hints), which with the CPU-built kernel's thousands of device threads
 * cost more than the sleeps; a sleep here synchronises nothing. */
static inline void shunt_sleep_ns(uint32_t ns) {
  struct timespec ts = {0, (long)ns};
#if defined(__SANITIZE_THREAD__)
  syscall(SYS_nanosleep, &ts, NULL);
#else
  nanosleep(&ts, NULL);
#endif
}

/* One pause; returns false once `deadline` (0: none) has passed. The clock is read only
 * in the sleeping phase, so the deadline is checked at most every few microseconds. */
static inline bool shunt_backoff(struct shunt_backoff* b, uint64_t deadline) {
  b->n++;
  if (b->n < 32) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
    return true;
  }
  if (b->n < 48) {
    sched_yield();
    return true;
  }
  if (deadline && shunt_now_ns() > deadline) return false;
  if (b->sleep_ns < 1000) b->sleep_ns = 1000;
  shunt_sleep_ns(b->sleep_ns);
  if (b->sleep_ns < 200000) b->sleep_ns += b->sleep_ns / 2;
  return true;
}

#endif
