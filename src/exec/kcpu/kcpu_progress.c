/* Idling in the kernels' CPU build (kcpu_kernel.h): a host thread whose device threads all
 * wait sleeps on one word of the process, which every announced write advances. */
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "exec/kcpu/kcpu_kernel.h"

/* Idle rounds spent yielding before the thread sleeps: the rank being waited for is usually
 * about to run on the core this one gives away. */
#define IDLE_YIELDS 4
/* A sleep also ends by itself, for writes nobody announces (another process's, as the CUDA
 * stand-in's peers make): the interval doubles from the first to the last. */
#define IDLE_FIRST_NS 20000L
#define IDLE_LAST_NS 500000L

/* One word for the process, as the memory system is one for every SM: a global for that
 * reason, touched only atomically. */
static struct {
  _Atomic uint32_t epoch;    /* announced writes: the futex word */
  _Atomic uint32_t sleepers; /* threads inside or about to enter the futex wait */
} g_progress;

void shunt_kcpu_progress(void) {
  atomic_fetch_add(&g_progress.epoch, 1);
  /* A sleeper counted before this load either sees the new epoch or is woken here (both are
   * sequentially consistent, and the futex compares under its own lock). */
  if (atomic_load(&g_progress.sleepers))
    syscall(SYS_futex, &g_progress.epoch, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

void shunt_kcpu_idle(struct shunt_kcpu_idle* st) {
  if (st->rounds < IDLE_YIELDS) {
    sched_yield();
  } else {
    uint32_t k = st->rounds - IDLE_YIELDS;
    long ns = IDLE_FIRST_NS;
    while (k-- && ns < IDLE_LAST_NS) ns *= 2;
    if (ns > IDLE_LAST_NS) ns = IDLE_LAST_NS;
    struct timespec ts = {0, ns};
    atomic_fetch_add(&g_progress.sleepers, 1);
    /* Returns at once when a write was announced since the caller last looked. */
    syscall(SYS_futex, &g_progress.epoch, FUTEX_WAIT_PRIVATE, st->seen, &ts, NULL, 0);
    atomic_fetch_sub(&g_progress.sleepers, 1);
  }
  st->rounds++;
  /* Read before the caller looks at memory again: a write announced after that look changes
   * the epoch, and the next sleep does not begin. */
  st->seen = atomic_load(&g_progress.epoch);
}

/* A count for tests and measurements, and the time each read costs (0 unless a driver
 * stand-in models PCIe), touched only atomically. */
static _Atomic long long g_pcie_reads;
static _Atomic long long g_pcie_ns;

void shunt_kcpu_pcie_read(void) {
  atomic_fetch_add_explicit(&g_pcie_reads, 1, memory_order_relaxed);
  long long ns = atomic_load_explicit(&g_pcie_ns, memory_order_relaxed);
  if (ns <= 0) return;
  /* The round trip a GPU's read of host memory takes: spun, as the device thread would stall. */
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  do clock_gettime(CLOCK_MONOTONIC, &t);
  while ((t.tv_sec - t0.tv_sec) * 1000000000LL + (t.tv_nsec - t0.tv_nsec) < ns);
}

void shunt_kcpu_set_pcie_ns(long long ns) {
  atomic_store_explicit(&g_pcie_ns, ns, memory_order_relaxed);
}

long long shunt_kcpu_pcie_reads(void) {
  return atomic_load_explicit(&g_pcie_reads, memory_order_relaxed);
}
