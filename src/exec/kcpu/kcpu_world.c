/* The CPU build's world: regions and FIFO in host memory, the proxy thread, launches. */
#include "exec/kcpu/kcpu_world.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/gpu/gpu_abi.h"
#include "exec/gpu/gpu_region.h"
#include "exec/gpu/gpu_report.h"
#include "exec/gpu/gpu_steps.h"
#include "exec/kcpu/kcpu_kernel.h"
#include "transport/backoff.h"
#include "transport/mem.h"
#include "transport/peers.h"
#include "util/status.h"

#if defined(__SANITIZE_THREAD__)
void __tsan_release(void* addr);
#endif

struct shunt_kcpu_world {
  uint32_t rank, nranks;
  struct shunt_world_exchange bs;
  struct shunt_gpu_layout lay;
  char* region;
  char** peer;
  struct shunt_peers reach; /* every rank a thread of this process: plain pointers */
  struct shunt_gpu_fifo* fifo;
  uint64_t timeout_ns;
  uint64_t* sent;                /* [nranks * ORDINALS]: flags the proxy sent per (peer, port ordinal) */
  struct shunt_kcpu_device* dev; /* this rank's device threads, kept between launches */
  pthread_t thread;
  bool thread_started;
  atomic_bool stop;
};

/* ---- Proxy: the CUDA proxy's protocol (gpu_world.c), with host copies ---- */

/* Packets travel through the proxy too: whole 8-byte words, each read and written at once, as
 * a copy engine writes whole aligned units. */
static void copy_words(char* dst, const char* src, uint64_t n) {
  if ((((uintptr_t)dst | (uintptr_t)src | n) & 7) == 0) {
    for (uint64_t i = 0; i < n; i += 8)
      __atomic_store_n((uint64_t*)(dst + i), __atomic_load_n((const uint64_t*)(src + i), __ATOMIC_RELAXED),
                       __ATOMIC_RELAXED);
  } else {
    memcpy(dst, src, n);
  }
}

static void handle(struct shunt_kcpu_world* w, const struct shunt_gpu_slot* s, uint64_t pos) {
  const struct shunt_trigger* t = &s->t;
  if ((t->type & SHUNT_TRIG_DATA) && t->size)
    copy_words((char*)(uintptr_t)s->dst_addr, (const char*)(uintptr_t)s->src_addr, t->size);
  if ((t->type & SHUNT_TRIG_FLAG) && t->peer < w->nranks && t->ordinal < SHUNT_GPU_ORDINALS) {
    uint64_t v = ++w->sent[(size_t)t->peer * SHUNT_GPU_ORDINALS + t->ordinal];
    uint64_t* dst = (uint64_t*)(w->peer[t->peer] + w->lay.inbound) +
                    shunt_gpu_sem_index(w->nranks, SHUNT_CHAN_PORT, w->rank, t->ordinal);
    __atomic_store_n(dst, v, __ATOMIC_RELEASE);
  }
  if (t->type & SHUNT_TRIG_SYNC) __atomic_store_n(&w->fifo->done, pos + 1, __ATOMIC_RELEASE);
  /* Data, a flag or the done count: each may end a device thread's wait. */
  shunt_kcpu_progress();
}

static void* proxy_main(void* arg) {
  struct shunt_kcpu_world* w = arg;
  uint64_t pos = 0;
  struct shunt_backoff bo = {0};
  struct shunt_gpu_slot s;
  while (true) {
    if (!shunt_gpu_fifo_take(w->fifo, pos, &s)) {
      if (atomic_load_explicit(&w->stop, memory_order_acquire)) break;
      shunt_backoff(&bo, 0);
      continue;
    }
    bo = (struct shunt_backoff){0};
    handle(w, &s, pos);
    pos++;
  }
  return NULL;
}

/* ---- Creation ---- */

static void stop_proxy(void* ctx) {
  struct shunt_kcpu_world* w = ctx;
  if (w->thread_started) {
    atomic_store_explicit(&w->stop, true, memory_order_release);
    pthread_join(w->thread, NULL);
  }
  w->thread_started = false;
}

static void release(struct shunt_kcpu_world* w) {
  if (!w) return;
  stop_proxy(w);
  shunt_peers_free(&w->reach, false);
  shunt_kcpu_device_destroy(w->dev);
  free(w->region);
  free(w->fifo);
  free(w->peer);
  free(w->sent);
  free(w);
}

/* Every peer reached: the kernel's peer table, the proxy started. */
static int kcpu_ready(void* ctx, const struct shunt_peers* p, char* err, size_t len) {
  struct shunt_kcpu_world* w = ctx;
  uint64_t* table = (uint64_t*)(w->region + w->lay.peers);
  for (uint32_t r = 0; r < w->nranks; r++) {
    w->peer[r] = p->base[r];
    table[r] = (uint64_t)(uintptr_t)w->peer[r];
  }
  int e = pthread_create(&w->thread, NULL, proxy_main, w);
  if (e != 0) SHUNT_FAIL(shunt_errno_status(e), "cannot start the proxy thread: %s", strerror(e));
  w->thread_started = true;
  return 0;
}

/* This rank's own part: its region, FIFO and device threads; 0 or an error code. */
static int local_part(struct shunt_kcpu_world* w, const struct shunt_kcpu_world_config* cfg, char* err,
                      size_t len) {
  atomic_init(&w->stop, false);
  w->timeout_ns = cfg->timeout_ms * 1000000ull;
  shunt_gpu_region_layout(&w->lay, w->nranks, cfg->scratch_bytes, cfg->input_bytes, cfg->output_bytes);
  w->peer = calloc(w->nranks, sizeof(*w->peer));
  w->sent = calloc((size_t)w->nranks * SHUNT_GPU_ORDINALS, sizeof(*w->sent));
  w->region = aligned_alloc(SHUNT_GPU_ALIGN, w->lay.total);
  w->fifo = aligned_alloc(64, (sizeof(struct shunt_gpu_fifo) + 63) / 64 * 64);
  if (shunt_kcpu_device_create(&w->dev, err, len) != 0) return SHUNT_E_NOMEM;
  if (!w->peer || !w->sent || !w->region || !w->fifo) {
    shunt_setf(err, len, "out of memory for a region of %" PRIu64 " bytes", w->lay.total);
    return SHUNT_E_NOMEM;
  }
  memset(w->region, 0, w->lay.total);
  memset(w->fifo, 0, sizeof(*w->fifo));
  return SHUNT_OK;
}

int shunt_kcpu_world_create(uint32_t rank, uint32_t nranks, const struct shunt_kcpu_world_config* cfg,
                            const struct shunt_world_exchange* bs, struct shunt_kcpu_world** out, char* err,
                            size_t len) {
  if (err && len) err[0] = 0;
  *out = NULL;
  if (nranks == 0 || rank >= nranks || nranks > 65535 || !cfg || !bs) {
    shunt_setf(err, len, "rank %u of %u is not valid", rank, nranks);
    return SHUNT_E_INVALID;
  }
  struct shunt_kcpu_world* w = calloc(1, sizeof(*w));
  if (!w) {
    shunt_setf(err, len, "out of memory");
    return SHUNT_E_NOMEM;
  }
  w->rank = rank;
  w->nranks = nranks;
  w->bs = *bs;
  int rc = local_part(w, cfg, err, len);
  uint64_t sizes[3] = {cfg->scratch_bytes, cfg->input_bytes, cfg->output_bytes};
  struct shunt_peers_config pc = {.rank = rank,
                                  .nranks = nranks,
                                  .bs = &w->bs,
                                  .what = "region",
                                  .sizes = sizes,
                                  .sizes_bytes = sizeof(sizes),
                                  .mem = &shunt_mem_plain,
                                  .region = w->region,
                                  .bytes = w->lay.total,
                                  .ctx = w,
                                  .ready = kcpu_ready,
                                  .unready = stop_proxy};
  /* Whatever failed, this rank takes part so that no peer waits for it. */
  int prc = shunt_peers_setup(&pc, rc == 0, &w->reach, err, len);
  if (rc == 0) rc = prc;
  if (rc != 0) {
    release(w);
    return rc;
  }
  *out = w;
  return SHUNT_OK;
}

void shunt_kcpu_world_destroy(struct shunt_kcpu_world* w) {
  if (!w) return;
  /* No peer may still touch this region (its kernels or its proxy) once it is freed. */
  w->bs.oob.barrier(w->bs.oob.ctx);
  release(w);
}

static bool broken(const struct shunt_kcpu_world* w) {
  return __atomic_load_n(&w->fifo->error.code, __ATOMIC_ACQUIRE) != 0;
}

int shunt_kcpu_world_check(struct shunt_kcpu_world* w, const struct shunt_program* p, char* err, size_t len) {
  if (err && len) err[0] = 0;
  if (!w) return SHUNT_E_INVALID;
  struct shunt_gpu_error e;
  if (shunt_gpu_error_read(&w->fifo->error, &e) == 0) return SHUNT_OK;
  shunt_gpu_error_format(&e, w->rank, p, err, len);
  return SHUNT_E_TIMEOUT;
}

void shunt_kcpu_world_abort(struct shunt_kcpu_world* w) {
  if (!w) return;
  for (uint32_t r = 0; r < w->nranks; r++)
    __atomic_store_n((uint32_t*)(w->peer[r] + shunt_gpu_abort_offset(&w->lay)), 1u, __ATOMIC_RELEASE);
  shunt_kcpu_progress();
}

/* ---- Programs and launches ---- */

int shunt_kcpu_prog_create(struct shunt_kcpu_world* w, const struct shunt_program* p, uint32_t threads,
                           struct shunt_kcpu_prog** out, char* err, size_t len) {
  if (err && len) err[0] = 0;
  *out = NULL;
  if (!w) {
    shunt_setf(err, len, "no world");
    return SHUNT_E_INVALID;
  }
  if (!shunt_gpu_prog_fits(p, w->rank, w->nranks, &w->lay, err, len)) return SHUNT_E_INVALID;
  uint32_t t = p->nthreads ? p->nthreads : SHUNT_GPU_MAX_THREADS;
  if (threads && t > threads) t = threads;
  if (t > SHUNT_GPU_MAX_THREADS) t = SHUNT_GPU_MAX_THREADS;
  struct shunt_kcpu_prog* kp = calloc(1, sizeof(*kp));
  long long* sems = calloc(p->nsems ? p->nsems : 1, sizeof(long long));
  if (!kp || !sems) {
    free(kp);
    free(sems);
    shunt_setf(err, len, "out of memory");
    return SHUNT_E_NOMEM;
  }
  const int64_t* init = shunt_prog_sem_init(p);
  for (uint32_t i = 0; i < p->nsems; i++) sems[i] = (long long)init[i];
  kp->host = p;
  kp->sems = sems;
  kp->threads = t;
  kp->port_used = shunt_gpu_uses_port(p);
  kp->smem = shunt_gpu_prog_smem(p);
  *out = kp;
  return SHUNT_OK;
}

void shunt_kcpu_prog_destroy(struct shunt_kcpu_prog* kp) {
  if (!kp) return;
  free(kp->sems);
  free(kp);
}

/* The scaling kernels' grid: small and odd, so their grid-stride loops are exercised. */
static const struct shunt_kcpu_grid elem_grid = {2, 3, 0, 0};

int shunt_kcpu_launch(struct shunt_kcpu_world* w, const struct shunt_kcpu_run* run, char* err, size_t len) {
  if (err && len) err[0] = 0;
  if (!w || !run || !run->prog || !run->prog->host) {
    shunt_setf(err, len, "no world or no program");
    return SHUNT_E_INVALID;
  }
  const struct shunt_program* p = run->prog->host;
  if (!shunt_gpu_prog_fits(p, w->rank, w->nranks, &w->lay, err, len)) return SHUNT_E_INVALID;
  if (broken(w)) {
    shunt_setf(err, len, "an earlier run on this world failed");
    return SHUNT_E_INVALID;
  }
  struct shunt_steps st;
  struct shunt_steps_bufs bufs = {run->in,
                                  run->out,
                                  run->premul_scalar,
                                  false,
                                  w->region + w->lay.input,
                                  w->region + w->lay.output,
                                  w->lay.input_bytes,
                                  w->lay.output_bytes,
                                  false,
                                  false};
  const char* why = shunt_steps_plan(p, w->nranks, &bufs, &st);
  if (why) {
    shunt_setf(err, len, "%s", why);
    return SHUNT_E_INVALID;
  }
  if (st.seed_bytes) memcpy(st.seed_dst, st.seed_src, st.seed_bytes);
  if (st.pre_n && shunt_kcpu_pre(w->dev, st.pre_dst, st.pre_src, st.pre_n, st.pre_red, st.pre_scalar,
                                 &elem_grid, err, len))
    return SHUNT_E_INVALID;
  if (st.copy_in_bytes) memcpy(st.copy_in_dst, st.copy_in_src, st.copy_in_bytes);
  struct shunt_gpu_kargs k;
  memset(&k, 0, sizeof(k));
  shunt_gpu_kargs_world(&k, w->region, &w->lay, w->fifo, w->timeout_ns, w->rank, w->nranks);
  shunt_gpu_kargs_run(&k, p, run->prog->sems, &st, run->prog->port_used, run->prog->smem);
  struct shunt_kcpu_grid g = {p->nblocks ? p->nblocks : 1, run->prog->threads, run->skew_us, run->prog->smem};
#if defined(__SANITIZE_THREAD__)
  /* The kernel boundary (kcpu_shim.h xg_launch_acquire): the staging writes above are visible to
   * peers that saw this kernel run. */
  __tsan_release(w->region);
#endif
  if (shunt_kcpu_exec(w->dev, &k, &g, err, len)) return SHUNT_E_INVALID;
  if (broken(w)) return shunt_kcpu_world_check(w, p, err, len);
  if (st.post_n && shunt_kcpu_post(w->dev, st.out, st.post_n, st.post_red, &elem_grid, err, len))
    return SHUNT_E_INVALID;
  if (st.back_bytes) memcpy(st.back_dst, st.back_src, st.back_bytes);
  return SHUNT_OK;
}
