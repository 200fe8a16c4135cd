/* The kernels' CPU build and its grid runner: device threads as fibers of the launching host
 * thread (under ThreadSanitizer, host threads of their own), blocks with barriers that, as on
 * sm_70 and later, stop counting threads that exited. */
#include "exec/kcpu/kcpu_shim.h"
/* The shim comes first: the kernel source below is the GPU's, unchanged. */
#include "exec/gpu/gpu_kernel.cuh"
#include "exec/kcpu/kcpu_kernel.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

extern "C" {
#include "transport/fiber.h"
}

/* Device threads are fibers: a barrier or a poll hands the host thread to the next device
 * thread in user space, where host threads of their own made every one a trip through the
 * kernel's scheduler (thousands of them on two cores). ThreadSanitizer keeps host threads: a
 * switch between fibers orders everything before it, which would hide the races between a
 * block's threads that the sanitizer is there to find. */
#if defined(__SANITIZE_THREAD__)
#define KCPU_FIBERS 0
#else
#define KCPU_FIBERS 1
#endif

namespace {

/* A block's barrier without a lock: thousands of device threads share two cores, and a
 * mutex behind a condition variable made every release a convoy through the kernel. Arrivals
 * and exits change one word (live threads, arrived threads); the thread that completes the
 * barrier publishes the __syncthreads_or result and bumps gen, on which the others wait
 * (briefly yielding, then in the kernel). */
struct block_state {
  uint32_t counts; /* live << 16 | arrived; blocks have at most 1024 threads */
  uint32_t gen;    /* releases so far: the futex word */
  int acc;         /* __syncthreads_or of the current barrier */
  int result;      /* of the last release: read by its threads before any can start the next */
};

enum kernel_kind { KERNEL_EXEC, KERNEL_PRE, KERNEL_POST, KERNEL_CHECK };

struct launch {
  kernel_kind kind;
  const struct shunt_gpu_kargs* k;
  char* dst;
  const char* src;
  uint64_t n;
  struct shunt_red red;
  uint64_t per; /* KERNEL_CHECK's arguments */
  uint32_t nranks, allgather;
  unsigned long long* first;
  unsigned blocks, threads, skew_us, smem;
  block_state* bs;
  char* smem_base; /* blocks x smem bytes, 16-aligned */
};

thread_local block_state* tl_block;
thread_local unsigned tl_skew_us;

#if KCPU_FIBERS
uint64_t now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}
#endif

#if KCPU_FIBERS
/* The fibers this host thread is running (NULL outside a launch), and whether one of them
 * moved since the runner last looked (arrived at a barrier, began a wait, returned). */
thread_local struct shunt_fibers* tl_fibers;
thread_local bool tl_moved;
/* Per device thread of the running launch: the barrier it waits at and the release it waits
 * for, so that the runner resumes it only once that release came. */
struct parked {
  block_state* bar;
  uint32_t gen;
  uint64_t not_before; /* a skewed device thread: not resumed before then (us) */
};
thread_local parked* tl_parked;
thread_local unsigned tl_index;
#endif

/* Thread t of a skewed launch is late by t x skew_us: a fiber is set aside that long (the
 * others run meanwhile, as sleeping host threads would let them), a host thread sleeps. */
void skew_wait(void) {
  if (!tl_skew_us || !threadIdx.x) return;
#if KCPU_FIBERS
  if (tl_fibers) {
    tl_parked[tl_index].not_before = now_us() + (uint64_t)tl_skew_us * threadIdx.x;
    shunt_fibers_yield(tl_fibers);
    return;
  }
#endif
  usleep((useconds_t)tl_skew_us * threadIdx.x);
}


long futex(uint32_t* w, int op, uint32_t v) {
  return syscall(SYS_futex, w, op, v, NULL, NULL, 0);
}

/* Releases the barrier: every live thread has arrived, and the caller has reset the count. */
void release(block_state* b) {
  b->result = __atomic_exchange_n(&b->acc, 0, __ATOMIC_ACQ_REL);
  __atomic_fetch_add(&b->gen, 1, __ATOMIC_RELEASE);
  futex(&b->gen, FUTEX_WAKE_PRIVATE, INT_MAX);
}

/* Changes the counts by f(live, arrived); releases the barrier when every live thread has
 * arrived (and some has). */
template <typename F>
void count(block_state* b, F f) {
  uint32_t c = __atomic_load_n(&b->counts, __ATOMIC_RELAXED);
  for (;;) {
    uint32_t live = c >> 16, arrived = c & 0xffffu;
    f(live, arrived);
    bool done = arrived && arrived == live;
    uint32_t nc = live << 16 | (done ? 0 : arrived);
    if (__atomic_compare_exchange_n(&b->counts, &c, nc, false, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
      if (done) release(b);
      return;
    }
  }
}

/* The calling host thread becomes device thread `index` of L. */
void enter(const launch* L, unsigned index) {
  unsigned bx = index / L->threads, tx = index % L->threads;
  blockIdx = {bx, 0, 0};
  threadIdx = {tx, 0, 0};
  blockDim = {L->threads, 1, 1};
  gridDim = {L->blocks, 1, 1};
  tl_block = &L->bs[bx];
  tl_skew_us = L->skew_us;
  shunt_kcpu_smem = L->smem ? (int4*)(L->smem_base + (size_t)bx * L->smem) : NULL;
}

void run_one(const launch* L, unsigned index) {
  enter(L, index);
  block_state* b = tl_block;
  skew_wait();
  switch (L->kind) {
    case KERNEL_EXEC:
      shunt_gpu_exec_kernel(*L->k);
      break;
    case KERNEL_PRE:
      shunt_gpu_pre_kernel(L->dst, L->src, L->n, L->red);
      break;
    case KERNEL_POST:
      shunt_gpu_post_kernel(L->dst, L->n, L->red);
      break;
    case KERNEL_CHECK:
      shunt_gpu_check_kernel((const float*)L->src, L->n, L->per, L->nranks, L->allgather, L->first);
      break;
  }
  /* An exited thread no longer holds up its block's barriers. */
  count(b, [](uint32_t& live, uint32_t&) { live--; });
}

}  // namespace

/* Launches are serialised by mu (held through a launch, and while threads are added); the
 * device threads take no lock. They sleep on seq (a futex word) and, woken, each claims one
 * index of the launch from `claim`, which names the launch it belongs to: a thread late from
 * an earlier launch can then neither claim an index of a launch it did not see published nor
 * read a launch record that is gone, and no thread runs two indices of one launch (a launch's
 * threads must all run at once). */
#define CLAIM_SEQ(v) ((uint32_t)((v) >> 40))
#define CLAIM_N(v) ((uint32_t)((v) >> 20) & 0xfffffu)
#define CLAIM_NEXT(v) ((uint32_t)(v)&0xfffffu)
#define CLAIM_MAX_THREADS 0xfffffu

struct shunt_kcpu_device {
  pthread_mutex_t mu;
  pthread_t* th;
  unsigned nth, cap;
  uint32_t seq;       /* launches published (low 24 bits count), and one more at stop */
  uint64_t claim;     /* seq of the launch (24 bits) | threads (20) | indices claimed (20) */
  const launch* cur;  /* the launch being run; read only by a thread holding one of its indices */
  uint32_t remaining; /* threads of the current launch still running: the launcher's futex word */
  bool stop;
#if KCPU_FIBERS
  struct shunt_fibers* fibers; /* kept between launches, as the threads are */
  parked* park;
  unsigned char* done;
  unsigned park_cap;
#endif
};

namespace {

#if !KCPU_FIBERS
struct worker_arg {
  shunt_kcpu_device* d;
  uint32_t seen;
};

/* One index of launch s, or -1 when none is left or claim already belongs to a later launch. */
long claim_one(shunt_kcpu_device* d, uint32_t s) {
  uint64_t v = __atomic_load_n(&d->claim, __ATOMIC_ACQUIRE);
  while (CLAIM_SEQ(v) == (s & 0xffffffu) && CLAIM_NEXT(v) < CLAIM_N(v))
    if (__atomic_compare_exchange_n(&d->claim, &v, v + 1, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
      return (long)CLAIM_NEXT(v);
  return -1;
}

void* worker_main(void* arg) {
  worker_arg* a = (worker_arg*)arg;
  shunt_kcpu_device* d = a->d;
  uint32_t seen = a->seen;
  free(a);
  while (true) {
    uint32_t s;
    while ((s = __atomic_load_n(&d->seq, __ATOMIC_ACQUIRE)) == seen) futex(&d->seq, FUTEX_WAIT_PRIVATE, seen);
    seen = s;
    if (__atomic_load_n(&d->stop, __ATOMIC_ACQUIRE)) break;
    long index = claim_one(d, s);
    if (index < 0) continue;
    /* The launch cannot end before this index has run: its record is alive. */
    run_one(__atomic_load_n(&d->cur, __ATOMIC_ACQUIRE), (unsigned)index);
    if (__atomic_sub_fetch(&d->remaining, 1, __ATOMIC_ACQ_REL) == 0)
      futex(&d->remaining, FUTEX_WAKE_PRIVATE, 1);
  }
  return NULL;
}

/* Enough threads for n device threads; called with the lock held, between launches. */
int grow(shunt_kcpu_device* d, unsigned n, char* err, size_t len) {
  if (n <= d->nth) return 0;
  if (n > d->cap) {
    pthread_t* t = (pthread_t*)realloc(d->th, n * sizeof(pthread_t));
    if (!t) {
      if (err && len) snprintf(err, len, "out of memory for %u device threads", n);
      return -1;
    }
    d->th = t;
    d->cap = n;
  }
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  /* The kernel's frames are small; thousands of threads of the default 8 MiB would not be. */
  pthread_attr_setstacksize(&attr, 512u << 10);
  int rc = 0;
  while (d->nth < n) {
    worker_arg* a = (worker_arg*)malloc(sizeof(worker_arg));
    int e = a ? 0 : ENOMEM;
    if (a) {
      *a = {d, __atomic_load_n(&d->seq, __ATOMIC_RELAXED)};
      e = pthread_create(&d->th[d->nth], &attr, worker_main, a);
      if (e) free(a);
    }
    if (e) {
      if (err && len) snprintf(err, len, "cannot start device thread %u of %u: %s", d->nth, n, strerror(e));
      rc = -1;
      break;
    }
    d->nth++;
  }
  pthread_attr_destroy(&attr);
  return rc;
}

/* Runs the n device threads of L on the device's host threads; the lock is held. */
int launch_grid(shunt_kcpu_device* d, const launch* L, unsigned n, char* err, size_t len) {
  int rc = grow(d, n, err, len);
  if (rc != 0) return rc;
  uint32_t next = __atomic_load_n(&d->seq, __ATOMIC_RELAXED) + 1;
  __atomic_store_n(&d->remaining, n, __ATOMIC_RELAXED);
  __atomic_store_n(&d->cur, L, __ATOMIC_RELAXED);
  __atomic_store_n(&d->claim, (uint64_t)(next & 0xffffffu) << 40 | (uint64_t)n << 20, __ATOMIC_RELEASE);
  __atomic_store_n(&d->seq, next, __ATOMIC_RELEASE);
  futex(&d->seq, FUTEX_WAKE_PRIVATE, INT_MAX);
  uint32_t r;
  while ((r = __atomic_load_n(&d->remaining, __ATOMIC_ACQUIRE)) != 0) futex(&d->remaining, FUTEX_WAIT_PRIVATE, r);
  return 0;
}
#else
void fiber_main(void* arg, uint32_t index) {
  run_one((const launch*)arg, index);
}

/* Runs the n device threads of L as fibers of the calling host thread; the lock is held. A
 * pass resumes every device thread that can move (one parked at a barrier only once that
 * barrier released); a pass in which none moved means every one waits on another rank or the
 * proxy, and the host thread idles until a write is announced. */
int launch_grid(shunt_kcpu_device* d, const launch* L, unsigned n, char* err, size_t len) {
  if (n > d->park_cap) {
    parked* p = (parked*)realloc(d->park, n * sizeof(parked));
    if (p) d->park = p;
    unsigned char* dn = p ? (unsigned char*)realloc(d->done, n) : NULL;
    if (dn) d->done = dn;
    if (!p || !dn) {
      if (err && len) snprintf(err, len, "out of memory for %u device threads", n);
      return -1;
    }
    d->park_cap = n;
  }
  if (!d->fibers) d->fibers = shunt_fibers_create();
  if (!d->fibers || shunt_fibers_start(d->fibers, n, fiber_main, (void*)L) != 0) {
    if (err && len) snprintf(err, len, "no memory for the stacks of %u device threads", n);
    return -1;
  }
  memset(d->park, 0, n * sizeof(parked));
  memset(d->done, 0, n);
  struct shunt_fibers* outer = tl_fibers;
  parked* outer_park = tl_parked;
  tl_fibers = d->fibers;
  tl_parked = d->park;
  struct shunt_kcpu_idle idle = {};
  for (unsigned live = n; live;) {
    tl_moved = false;
    uint64_t now = L->skew_us ? now_us() : 0;
    for (unsigned i = 0; i < n; i++) {
      if (d->done[i]) continue;
      parked* pk = &d->park[i];
      if (pk->bar && __atomic_load_n(&pk->bar->gen, __ATOMIC_ACQUIRE) == pk->gen) continue;
      if (pk->not_before > now) continue;
      pk->bar = NULL;
      pk->not_before = 0;
      enter(L, i);
      tl_index = i;
      if (shunt_fibers_resume(d->fibers, i)) {
        d->done[i] = 1;
        live--;
        tl_moved = true;
      }
    }
    if (tl_moved)
      idle = {};
    else
      shunt_kcpu_idle(&idle);
  }
  tl_fibers = outer;
  tl_parked = outer_park;
  return 0;
}
#endif

/* Runs L (its kernel and arguments set) on the grid g. */
int run_grid(shunt_kcpu_device* d, launch* L, const struct shunt_kcpu_grid* g, char* err, size_t len) {
  if (err && len) err[0] = 0;
  L->blocks = g->blocks;
  L->threads = g->threads;
  L->skew_us = g->skew_us;
  L->smem = g->smem_bytes;
  if (!d || L->blocks == 0 || L->threads == 0 || L->threads > SHUNT_GPU_MAX_THREADS || L->blocks > 65535 ||
      (uint64_t)L->blocks * L->threads > CLAIM_MAX_THREADS) {
    if (err && len) snprintf(err, len, "grid of %u blocks of %u threads", L->blocks, L->threads);
    return -1;
  }
  unsigned n = L->blocks * L->threads;
  block_state* bs = (block_state*)calloc(L->blocks, sizeof(block_state));
  if (!bs) {
    if (err && len) snprintf(err, len, "out of memory for a grid of %u threads", n);
    return -1;
  }
  for (unsigned b = 0; b < L->blocks; b++) {
    bs[b].counts = L->threads << 16;
  }
  L->bs = bs;
  L->smem = (L->smem + 15u) / 16u * 16u;
  L->smem_base = NULL;
  if (L->smem && !(L->smem_base = (char*)aligned_alloc(16, (size_t)L->blocks * L->smem))) {
    if (err && len) snprintf(err, len, "out of memory for %u blocks' shared memory", L->blocks);
    free(bs);
    return -1;
  }
  pthread_mutex_lock(&d->mu);
  int rc = launch_grid(d, L, n, err, len);
  pthread_mutex_unlock(&d->mu);
  free(bs);
  free(L->smem_base);
  return rc;
}

}  // namespace

int shunt_kcpu_sync(int pred) {
  block_state* b = tl_block;
  if (pred) __atomic_store_n(&b->acc, 1, __ATOMIC_RELEASE);
  /* Read before arriving: the release this thread waits for cannot come before it arrives. */
  uint32_t g = __atomic_load_n(&b->gen, __ATOMIC_ACQUIRE);
  count(b, [](uint32_t&, uint32_t& arrived) { arrived++; });
#if KCPU_FIBERS
  tl_moved = true;
  if (__atomic_load_n(&b->gen, __ATOMIC_ACQUIRE) == g) {
    /* Parked: the runner resumes this device thread once the barrier released. */
    tl_parked[tl_index].bar = b;
    tl_parked[tl_index].gen = g;
    shunt_fibers_yield(tl_fibers);
  }
#else
  for (unsigned n = 0; __atomic_load_n(&b->gen, __ATOMIC_ACQUIRE) == g; n++) {
    if (n < 4)
      sched_yield();
    else
      futex(&b->gen, FUTEX_WAIT_PRIVATE, g);
  }
#endif
  int r = b->result;
  skew_wait();
  return r;
}

extern "C" void shunt_kcpu_relax(uint32_t polls) {
#if KCPU_FIBERS
  if (tl_fibers) {
    /* A first poll: this device thread reached a new wait since it last ran. */
    if (polls == 0) tl_moved = true;
    shunt_fibers_yield(tl_fibers);
    return;
  }
#endif
  /* A host thread of its own: give the core away, and now and then sleep, so that the thread
   * being waited for gets it. */
  if ((polls & 15u) == 15u) {
    struct timespec ts = {0, 50000};
    nanosleep(&ts, NULL);
  } else {
    sched_yield();
  }
}

extern "C" int shunt_kcpu_device_create(struct shunt_kcpu_device** out, char* err, size_t len) {
  shunt_kcpu_device* d = (shunt_kcpu_device*)calloc(1, sizeof(*d));
  if (!d) {
    if (err && len) snprintf(err, len, "out of memory");
    return -1;
  }
  pthread_mutex_init(&d->mu, NULL);
  *out = d;
  return 0;
}

extern "C" void shunt_kcpu_device_destroy(struct shunt_kcpu_device* d) {
  if (!d) return;
  pthread_mutex_lock(&d->mu);
  __atomic_store_n(&d->stop, true, __ATOMIC_RELEASE);
  __atomic_fetch_add(&d->seq, 1, __ATOMIC_RELEASE);
  futex(&d->seq, FUTEX_WAKE_PRIVATE, INT_MAX);
  pthread_mutex_unlock(&d->mu);
  for (unsigned i = 0; i < d->nth; i++) pthread_join(d->th[i], NULL);
  pthread_mutex_destroy(&d->mu);
  free(d->th);
#if KCPU_FIBERS
  shunt_fibers_free(d->fibers);
  free(d->park);
  free(d->done);
#endif
  free(d);
}

extern "C" int shunt_kcpu_exec(struct shunt_kcpu_device* d, const struct shunt_gpu_kargs* k,
                               const struct shunt_kcpu_grid* g, char* err, size_t len) {
  launch L{};
  L.kind = KERNEL_EXEC;
  L.k = k;
  return run_grid(d, &L, g, err, len);
}

extern "C" int shunt_kcpu_pre(struct shunt_kcpu_device* d, char* dst, const char* src, uint64_t n,
                              struct shunt_red red, const struct shunt_kcpu_grid* g, char* err, size_t len) {
  launch L{};
  L.kind = KERNEL_PRE;
  L.dst = dst;
  L.src = src;
  L.n = n;
  L.red = red;
  return run_grid(d, &L, g, err, len);
}

extern "C" int shunt_kcpu_post(struct shunt_kcpu_device* d, char* buf, uint64_t n, struct shunt_red red,
                               const struct shunt_kcpu_grid* g, char* err, size_t len) {
  launch L{};
  L.kind = KERNEL_POST;
  L.dst = buf;
  L.n = n;
  L.red = red;
  return run_grid(d, &L, g, err, len);
}

extern "C" int shunt_kcpu_check(struct shunt_kcpu_device* d, const float* out, uint64_t n, uint64_t per,
                                uint32_t nranks, uint32_t allgather, unsigned long long* first,
                                const struct shunt_kcpu_grid* g, char* err, size_t len) {
  launch L{};
  L.kind = KERNEL_CHECK;
  L.src = (const char*)out;
  L.n = n;
  L.per = per;
  L.nranks = nranks;
  L.allgather = allgather;
  L.first = first;
  return run_grid(d, &L, g, err, len);
}
