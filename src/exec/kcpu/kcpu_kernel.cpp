/* The kernels' CPU build and its grid runner: host threads as device threads, blocks with
 * barriers that, as on sm_70 and later, stop counting threads that exited. */
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

void skew_wait(void) {
  if (tl_skew_us && threadIdx.x) usleep((useconds_t)tl_skew_us * threadIdx.x);
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

void run_one(const launch* L, unsigned index) {
  unsigned bx = index / L->threads, tx = index % L->threads;
  block_state* b = &L->bs[bx];
  blockIdx = {bx, 0, 0};
  threadIdx = {tx, 0, 0};
  blockDim = {L->threads, 1, 1};
  gridDim = {L->blocks, 1, 1};
  tl_block = b;
  tl_skew_us = L->skew_us;
  shunt_kcpu_smem = L->smem ? (int4*)(L->smem_base + (size_t)bx * L->smem) : NULL;
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
};

namespace {

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
  int rc = grow(d, n, err, len);
  if (rc == 0) {
    uint32_t next = __atomic_load_n(&d->seq, __ATOMIC_RELAXED) + 1;
    __atomic_store_n(&d->remaining, n, __ATOMIC_RELAXED);
    __atomic_store_n(&d->cur, L, __ATOMIC_RELAXED);
    __atomic_store_n(&d->claim, (uint64_t)(next & 0xffffffu) << 40 | (uint64_t)n << 20, __ATOMIC_RELEASE);
    __atomic_store_n(&d->seq, next, __ATOMIC_RELEASE);
    futex(&d->seq, FUTEX_WAKE_PRIVATE, INT_MAX);
    uint32_t r;
    while ((r = __atomic_load_n(&d->remaining, __ATOMIC_ACQUIRE)) != 0)
      futex(&d->remaining, FUTEX_WAIT_PRIVATE, r);
  }
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
  for (unsigned n = 0; __atomic_load_n(&b->gen, __ATOMIC_ACQUIRE) == g; n++) {
    if (n < 4)
      sched_yield();
    else
      futex(&b->gen, FUTEX_WAIT_PRIVATE, g);
  }
  int r = b->result;
  skew_wait();
  return r;
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
