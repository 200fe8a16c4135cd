/* The kernels' CPU build and its grid runner: device threads as fibers of the launching host
 * thread, blocks with barriers that, as on sm_70 and later, stop counting threads that exited. */
#include "exec/kcpu/kcpu_shim.h"
/* The shim comes first: the kernel source below is the GPU's, unchanged. */
#include "exec/gpu/gpu_kernel.cuh"
#include "exec/kcpu/kcpu_kernel.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "transport/fiber.h"
}

/* Device threads are fibers: a barrier or a poll hands the host thread to the next device
 * thread in user space, where host threads of their own made each a trip through the kernel's
 * scheduler (thousands of them on two cores). Under ThreadSanitizer a fiber's yield orders
 * nothing (shunt_fibers_unordered), so device threads that skip a barrier race as threads
 * would; the runner's own per-thread records are atomics or outside its view (enter). */
#if defined(__SANITIZE_THREAD__)
#define KCPU_UNWATCHED __attribute__((no_sanitize("thread")))
#else
#define KCPU_UNWATCHED
#endif

/* Device threads of one launch at the most: each is a fiber with a stack of its own, and the
 * largest grid the limits above allow would want terabytes of them. */
#define KCPU_MAX_THREADS 0xfffffu

namespace {

/* A block's barrier: arrivals and exits change one word (live threads, arrived threads); the
 * thread that completes the barrier publishes the __syncthreads_or result and bumps gen, which
 * the runner watches before it resumes the threads parked there. */
struct block_state {
  uint32_t counts; /* live << 16 | arrived; blocks have at most 1024 threads */
  uint32_t gen;    /* releases so far */
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
  const void* scalar;          /* KERNEL_PRE: a device-resident scalar, or NULL */
  uint64_t per;                /* KERNEL_CHECK's arguments */
  uint32_t nranks, check_kind; /* the self-check's kind (gpu_selfcheck_values.h) */
  unsigned long long* first;
  unsigned blocks, threads, skew_us, smem;
  block_state* bs;
  char* smem_base; /* blocks x smem bytes, 16-aligned */
  /* Device threads that returned: each adds with release, and the runner's acquire of the
   * total orders all they did before what it does next (as joining threads would). */
  mutable unsigned finished;
};

/* Per device thread of the running launch, written by the device thread and read by the
 * runner (atomics): the barrier it waits at and the release it waits for, or the time before
 * which a skewed thread is not resumed (us). */
struct parked {
  block_state* bar;
  uint32_t gen;
  uint64_t not_before;
};

/* The running launch on this host thread: its device thread, fibers and records. */
thread_local block_state* tl_block;
thread_local unsigned tl_skew_us;
thread_local struct shunt_fibers* tl_fibers;
thread_local parked* tl_parked;
thread_local unsigned tl_index;
/* Whether some device thread moved since the runner last looked (arrived at a barrier, began
 * a wait, returned): an atomic, as device threads and the runner both write it. */
thread_local bool tl_moved;

void moved(void) {
  __atomic_store_n(&tl_moved, true, __ATOMIC_RELAXED);
}

uint64_t now_us(void) {
  return xg_now_ns() / 1000u;
}

/* Thread t of a skewed launch is late by t x skew_us: it is set aside that long, the others
 * running meanwhile, as sleeping threads would let them. */
void skew_wait(void) {
  if (!tl_skew_us || !threadIdx.x) return;
  __atomic_store_n(&tl_parked[tl_index].not_before, now_us() + (uint64_t)tl_skew_us * threadIdx.x,
                   __ATOMIC_RELAXED);
  shunt_fibers_yield(tl_fibers);
}

/* Releases the barrier: every live thread has arrived, and the caller has reset the count. */
void release(block_state* b) {
  b->result = __atomic_exchange_n(&b->acc, 0, __ATOMIC_ACQ_REL);
  __atomic_fetch_add(&b->gen, 1, __ATOMIC_RELEASE);
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

/* The calling host thread becomes device thread `index` of L. Outside ThreadSanitizer's
 * view: these per-thread words take a new value at every switch, which unordered yields would
 * show as races of the runner with the device threads that read them. */
KCPU_UNWATCHED void enter(const launch* L, unsigned index) {
  unsigned bx = index / L->threads, tx = index % L->threads;
  blockIdx = {bx, 0, 0};
  threadIdx = {tx, 0, 0};
  blockDim = {L->threads, 1, 1};
  gridDim = {L->blocks, 1, 1};
  tl_block = &L->bs[bx];
  tl_skew_us = L->skew_us;
  tl_index = index;
  shunt_kcpu_smem = L->smem ? (int4*)(L->smem_base + (size_t)bx * L->smem) : NULL;
}

/* The launch this host thread runs (or, at its end, the one it ran before): outside
 * ThreadSanitizer's view for the same reason. */
KCPU_UNWATCHED void bind(struct shunt_fibers* f, parked* p) {
  tl_fibers = f;
  tl_parked = p;
}

void run_one(const launch* L, unsigned index) {
  block_state* b = &L->bs[index / L->threads];
  skew_wait();
  switch (L->kind) {
    case KERNEL_EXEC:
      shunt_gpu_exec_kernel(*L->k);
      break;
    case KERNEL_PRE:
      shunt_gpu_pre_kernel(L->dst, L->src, L->n, L->red, L->scalar);
      break;
    case KERNEL_POST:
      shunt_gpu_post_kernel(L->dst, L->n, L->red);
      break;
    case KERNEL_CHECK:
      shunt_gpu_check_kernel((const float*)L->src, L->n, L->per, L->nranks, L->check_kind, L->first);
      break;
  }
  /* An exited thread no longer holds up its block's barriers. */
  count(b, [](uint32_t& live, uint32_t&) { live--; });
}

void fiber_main(void* arg, uint32_t index) {
  const launch* L = (const launch*)arg;
  run_one(L, index);
  __atomic_fetch_add(&L->finished, 1u, __ATOMIC_RELEASE);
}

}  // namespace

/* A device keeps its fibers' stacks between launches, as a GPU keeps its SMs; mu serialises
 * launches (callers serialise too, as a stream does). */
struct shunt_kcpu_device {
  pthread_mutex_t mu;
  struct shunt_fibers* fibers;
  parked* park;
  unsigned char* done;
  unsigned cap;
};

namespace {

/* Runs the n device threads of L as fibers of the calling host thread; the lock is held. A
 * pass resumes every device thread that can move (one parked at a barrier only once that
 * barrier released, a skewed one once its time came); a pass in which none moved means every
 * one waits on another rank or the proxy, and the host thread idles until a write is
 * announced (kcpu_kernel.h). */
int launch_grid(shunt_kcpu_device* d, const launch* L, unsigned n, char* err, size_t len) {
  if (n > d->cap) {
    parked* p = (parked*)realloc(d->park, n * sizeof(parked));
    if (p) d->park = p;
    unsigned char* dn = p ? (unsigned char*)realloc(d->done, n) : NULL;
    if (dn) d->done = dn;
    if (!p || !dn) {
      if (err && len) snprintf(err, len, "out of memory for %u device threads", n);
      return -1;
    }
    d->cap = n;
  }
  if (!d->fibers || shunt_fibers_start(d->fibers, n, fiber_main, (void*)L) != 0) {
    if (err && len) snprintf(err, len, "no memory for the stacks of %u device threads", n);
    return -1;
  }
  memset((void*)d->park, 0, n * sizeof(parked));
  memset(d->done, 0, n);
  struct shunt_fibers* outer = tl_fibers;
  parked* outer_park = tl_parked;
  bind(d->fibers, d->park);
  struct shunt_kcpu_idle idle = {};
  for (unsigned live = n; live;) {
    __atomic_store_n(&tl_moved, false, __ATOMIC_RELAXED);
    uint64_t now = L->skew_us ? now_us() : 0;
    for (unsigned i = 0; i < n; i++) {
      if (d->done[i]) continue;
      parked* pk = &d->park[i];
      block_state* bar = __atomic_load_n(&pk->bar, __ATOMIC_RELAXED);
      if (bar && __atomic_load_n(&bar->gen, __ATOMIC_ACQUIRE) == __atomic_load_n(&pk->gen, __ATOMIC_RELAXED))
        continue;
      if (__atomic_load_n(&pk->not_before, __ATOMIC_RELAXED) > now) continue;
      __atomic_store_n(&pk->bar, (block_state*)NULL, __ATOMIC_RELAXED);
      __atomic_store_n(&pk->not_before, (uint64_t)0, __ATOMIC_RELAXED);
      enter(L, i);
      if (shunt_fibers_resume(d->fibers, i)) {
        d->done[i] = 1;
        live--;
        moved();
      }
    }
    if (__atomic_load_n(&tl_moved, __ATOMIC_RELAXED))
      idle = {};
    else
      shunt_kcpu_idle(&idle);
  }
  (void)__atomic_load_n(&L->finished, __ATOMIC_ACQUIRE);
  bind(outer, outer_park);
  return 0;
}

/* Runs L (its kernel and arguments set) on the grid g. */
int run_grid(shunt_kcpu_device* d, launch* L, const struct shunt_kcpu_grid* g, char* err, size_t len) {
  if (err && len) err[0] = 0;
  L->blocks = g->blocks;
  L->threads = g->threads;
  L->skew_us = g->skew_us;
  L->smem = g->smem_bytes;
  if (!d || L->blocks == 0 || L->threads == 0 || L->threads > SHUNT_GPU_MAX_THREADS || L->blocks > 65535 ||
      (uint64_t)L->blocks * L->threads > KCPU_MAX_THREADS) {
    if (err && len) snprintf(err, len, "grid of %u blocks of %u threads", L->blocks, L->threads);
    return -1;
  }
  unsigned n = L->blocks * L->threads;
  block_state* bs = (block_state*)calloc(L->blocks, sizeof(block_state));
  if (!bs) {
    if (err && len) snprintf(err, len, "out of memory for a grid of %u threads", n);
    return -1;
  }
  for (unsigned b = 0; b < L->blocks; b++) bs[b].counts = L->threads << 16;
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
  moved();
  if (__atomic_load_n(&b->gen, __ATOMIC_ACQUIRE) == g) {
    /* Parked: the runner resumes this device thread once the barrier released. */
    parked* pk = &tl_parked[tl_index];
    __atomic_store_n(&pk->gen, g, __ATOMIC_RELAXED);
    __atomic_store_n(&pk->bar, b, __ATOMIC_RELAXED);
    shunt_fibers_yield(tl_fibers);
    /* The runner saw the release (acquire); this thread reads what the releaser wrote. */
    (void)__atomic_load_n(&b->gen, __ATOMIC_ACQUIRE);
  }
  int r = b->result;
  skew_wait();
  return r;
}

extern "C" void shunt_kcpu_relax(uint32_t polls) {
  /* A first poll: this device thread reached a new wait since it last ran. */
  if (polls == 0) moved();
  shunt_fibers_yield(tl_fibers);
}

/* Devices given back, kept for the next one made in this process: a device's fibers (their
 * stacks touched, and under ThreadSanitizer a fiber context each, whose first use faults in
 * its shadow) cost more to make than most launches, and a process that verifies plan after
 * plan or a stand-in context after context makes one per rank each time. Guarded by its lock;
 * what it holds lives until the process ends (reachable, so not a leak). */
static pthread_mutex_t kept_mu = PTHREAD_MUTEX_INITIALIZER;
static shunt_kcpu_device* kept[64];
static unsigned nkept;

extern "C" int shunt_kcpu_device_create(struct shunt_kcpu_device** out, char* err, size_t len) {
  pthread_mutex_lock(&kept_mu);
  shunt_kcpu_device* k = nkept ? kept[--nkept] : NULL;
  pthread_mutex_unlock(&kept_mu);
  if (k) {
    *out = k;
    return 0;
  }
  shunt_kcpu_device* d = (shunt_kcpu_device*)calloc(1, sizeof(*d));
  if (!d || !(d->fibers = shunt_fibers_create())) {
    free(d);
    if (err && len) snprintf(err, len, "out of memory");
    return -1;
  }
#if defined(__SANITIZE_THREAD__)
  shunt_fibers_unordered(d->fibers);
#endif
  pthread_mutex_init(&d->mu, NULL);
  *out = d;
  return 0;
}

extern "C" void shunt_kcpu_device_destroy(struct shunt_kcpu_device* d) {
  if (!d) return;
  pthread_mutex_lock(&kept_mu);
  bool keep = nkept < sizeof(kept) / sizeof(kept[0]);
  if (keep) kept[nkept++] = d;
  pthread_mutex_unlock(&kept_mu);
  if (keep) return;
  pthread_mutex_destroy(&d->mu);
  shunt_fibers_free(d->fibers);
  free(d->park);
  free(d->done);
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
                              struct shunt_red red, const void* scalar, const struct shunt_kcpu_grid* g,
                              char* err, size_t len) {
  launch L{};
  L.kind = KERNEL_PRE;
  L.dst = dst;
  L.src = src;
  L.n = n;
  L.red = red;
  L.scalar = scalar;
  return run_grid(d, &L, g, err, len);
}

extern "C" struct shunt_red shunt_kcpu_prog_red(const struct shunt_program* p) {
  return shunt_gpu_prog_red(p);
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
                                uint32_t nranks, uint32_t kind, unsigned long long* first,
                                const struct shunt_kcpu_grid* g, char* err, size_t len) {
  launch L{};
  L.kind = KERNEL_CHECK;
  L.src = (const char*)out;
  L.n = n;
  L.per = per;
  L.nranks = nranks;
  L.check_kind = kind;
  L.first = first;
  return run_grid(d, &L, g, err, len);
}
