/* The kernels' CPU build and its grid runner: host threads as device threads, blocks with
 * barriers that, as on sm_70 and later, stop counting threads that exited. */
#include "exec/kcpu/kcpu_shim.h"
/* The shim comes first: the kernel source below is the GPU's, unchanged. */
#include "exec/gpu/gpu_kernel.cuh"
#include "exec/kcpu/kcpu_kernel.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

namespace {

struct block_state {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  unsigned live;    /* threads of the block that have not returned */
  unsigned arrived; /* at the current barrier */
  unsigned gen;
  int acc, result; /* __syncthreads_or */
};

enum kernel_kind { KERNEL_EXEC, KERNEL_PRE, KERNEL_POST };

struct launch {
  kernel_kind kind;
  const struct shunt_gpu_kargs* k;
  char* dst;
  const char* src;
  uint64_t n;
  struct shunt_red red;
  unsigned blocks, threads, skew_us, smem;
  block_state* bs;
  char* smem_base; /* blocks x smem bytes, 16-aligned */
};

thread_local block_state* tl_block;
thread_local unsigned tl_skew_us;

void skew_wait(void) {
  if (tl_skew_us && threadIdx.x) usleep((useconds_t)tl_skew_us * threadIdx.x);
}

/* Releases the barrier: every live thread has arrived. Called with the lock held. */
void release(block_state* b) {
  b->result = b->acc;
  b->acc = 0;
  b->arrived = 0;
  b->gen++;
  pthread_cond_broadcast(&b->cv);
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
  }
  /* An exited thread no longer holds up its block's barriers. */
  pthread_mutex_lock(&b->mu);
  b->live--;
  if (b->arrived && b->arrived == b->live) release(b);
  pthread_mutex_unlock(&b->mu);
}

}  // namespace

struct shunt_kcpu_device {
  pthread_mutex_t mu;
  pthread_cond_t work, done;
  pthread_t* th;
  unsigned nth, cap;
  uint64_t seq; /* launches published */
  const launch* cur;
  unsigned remaining; /* threads of the current launch still running */
  bool stop;
};

namespace {

struct worker_arg {
  shunt_kcpu_device* d;
  unsigned index;
  uint64_t seen;
};

void* worker_main(void* arg) {
  worker_arg* a = (worker_arg*)arg;
  shunt_kcpu_device* d = a->d;
  unsigned me = a->index;
  uint64_t seen = a->seen;
  free(a);
  pthread_mutex_lock(&d->mu);
  while (true) {
    while (!d->stop && d->seq == seen) pthread_cond_wait(&d->work, &d->mu);
    if (d->stop) break;
    seen = d->seq;
    /* A thread the launch does not use may wake after it has ended (cur is NULL then). */
    const launch* L = d->cur;
    if (!L || me >= L->blocks * L->threads) continue;
    pthread_mutex_unlock(&d->mu);
    run_one(L, me);
    pthread_mutex_lock(&d->mu);
    if (--d->remaining == 0) pthread_cond_signal(&d->done);
  }
  pthread_mutex_unlock(&d->mu);
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
      *a = {d, d->nth, d->seq};
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
  if (!d || L->blocks == 0 || L->threads == 0 || L->threads > SHUNT_GPU_MAX_THREADS || L->blocks > 65535) {
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
    pthread_mutex_init(&bs[b].mu, NULL);
    pthread_cond_init(&bs[b].cv, NULL);
    bs[b].live = L->threads;
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
    d->cur = L;
    d->remaining = n;
    d->seq++;
    pthread_cond_broadcast(&d->work);
    while (d->remaining) pthread_cond_wait(&d->done, &d->mu);
    d->cur = NULL;
  }
  pthread_mutex_unlock(&d->mu);
  for (unsigned b = 0; b < L->blocks; b++) {
    pthread_mutex_destroy(&bs[b].mu);
    pthread_cond_destroy(&bs[b].cv);
  }
  free(bs);
  free(L->smem_base);
  return rc;
}

}  // namespace

int shunt_kcpu_sync(int pred) {
  block_state* b = tl_block;
  pthread_mutex_lock(&b->mu);
  if (pred) b->acc = 1;
  unsigned g = b->gen;
  if (++b->arrived == b->live) {
    release(b);
  } else {
    while (g == b->gen) pthread_cond_wait(&b->cv, &b->mu);
  }
  int r = b->result;
  pthread_mutex_unlock(&b->mu);
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
  pthread_cond_init(&d->work, NULL);
  pthread_cond_init(&d->done, NULL);
  *out = d;
  return 0;
}

extern "C" void shunt_kcpu_device_destroy(struct shunt_kcpu_device* d) {
  if (!d) return;
  pthread_mutex_lock(&d->mu);
  d->stop = true;
  pthread_cond_broadcast(&d->work);
  pthread_mutex_unlock(&d->mu);
  for (unsigned i = 0; i < d->nth; i++) pthread_join(d->th[i], NULL);
  pthread_cond_destroy(&d->done);
  pthread_cond_destroy(&d->work);
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
