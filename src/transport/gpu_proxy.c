/* The GPU backend's proxy thread (gpu_proxy.h). */
#include "transport/gpu_proxy.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "transport/backoff.h"
#include "transport/doorbell.h"
#include "transport/net.h"
#include "util/log.h"

#define PROXY_SPIN_NS 200000ull
#define PROXY_NAP_NS 20000L
/* How long an idle proxy sleeps at most when it knows no execution is pending: a backstop
 * only, since every launch wakes it. */
#define PROXY_SLEEP_NS 100000000L
#define FLAG_RING 4096u
#define NET_PIECE (1u << 20) /* device data sent over TCP in pieces of this size */

#define DP(p) ((CUdeviceptr)(uintptr_t)(p))

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "a counter's bytes are written low to high");

struct shunt_gpu_proxy {
  struct shunt_gpu_proxy_config cfg;
  CUstream stream;
  uint64_t* sent;      /* [nranks * ordinals]: flags sent per (peer, port ordinal) */
  uint64_t* flag_ring; /* pinned: the values of the flag copies in flight (proxy thread only) */
  uint64_t ring_pos, ring_used;
  const struct shunt_net_ops* net; /* ranks of other hosts: the network table's row */
  void* ep;
  char* piece;       /* pinned: device data on their way out through host memory (proxy thread only) */
  CUstream rx;       /* the receiving thread's copies into this rank's region */
  uint64_t* rx_flag; /* pinned: the count the receiving thread writes */
  uint64_t* got;     /* [nranks * ordinals]: flags received per (peer, ordinal) */
  uint64_t region_bytes;
  pthread_t thread;
  bool started;
  /* Executions launched (told by shunt_gpu_proxy_expect), whether one was captured into a graph
   * (its replays are launched by no one), and the bell a launch rings. */
  _Atomic uint64_t launched;
  atomic_bool graphs;
  struct shunt_doorbell bell;
  /* For measurements (logged at the end): triggers served, and how often the thread woke from
   * a nap or a sleep. */
  uint64_t served, wakeups;
  bool pending; /* copies on the stream not yet waited for (proxy thread only) */
  atomic_bool stop;
  atomic_int failed;
  char msg[512];
};

/* Raises this rank's abort through the word in mapped host memory that its kernel looks at
 * with its own abort word; the kernel then raises every rank's. A plain store, no CUDA call: a
 * copy could wait behind another thread's module load or synchronizing call (the context
 * lock) or behind a kernel's stream in a shared hardware queue, while that kernel waits. */
static void raise_abort(struct shunt_gpu_proxy* p) {
  __atomic_store_n(&p->cfg.fifo->abort, 1u, __ATOMIC_RELEASE);
}

static void fail_msg(struct shunt_gpu_proxy* p, const char* msg) {
  if (atomic_exchange(&p->failed, 1)) return;
  snprintf(p->msg, sizeof(p->msg), "rank %u proxy: %s", p->cfg.rank, msg);
  SHUNT_WARN("%s", p->msg);
  /* Kernels waiting on this proxy give up at once rather than never. */
  raise_abort(p);
}

static void fail_cu(struct shunt_gpu_proxy* p, const char* what, CUresult e) {
  char msg[256];
  snprintf(msg, sizeof(msg), "%s: %s", what, shunt_cu_error(e));
  fail_msg(p, msg);
}

/* A port-channel counter raised from `old` to *src (pinned host memory, left as it is until the
 * stream has run the copies), on `stream`. A kernel takes any value >= k for its count k, and
 * CUDA promises no atomicity for a copy's bytes (an aligned word may land in pieces): 255 -> 256
 * seen half written as 0x1ff would pass waits up to 511 before their data arrived. So the value
 * is written in two copies ordered on the stream: first the bytes below the highest byte that
 * changes (whatever their order, that byte still holds its old, smaller value, so the counter
 * reads below the new count), then that byte alone, which lands whole. Mostly only the low
 * byte changes: one copy of one byte. Little-endian, as every CUDA host and device. */
static CUresult write_count(const struct shunt_cu* cu, char* dst, const uint64_t* src, uint64_t old,
                            CUstream stream) {
  uint64_t diff = old ^ *src;
  if (!diff) return CUDA_SUCCESS;
  size_t top = (size_t)(63 - __builtin_clzll(diff)) / 8;
  CUresult e = CUDA_SUCCESS;
  if (top) e = cu->MemcpyHtoDAsync(DP(dst), src, top, stream);
  if (e == CUDA_SUCCESS) e = cu->MemcpyHtoDAsync(DP(dst + top), (const char*)src + top, 1, stream);
  return e;
}

/* ---- the network endpoint's callbacks ---------------------------------------------------- */

static void net_failed(void* ctx, const char* msg) {
  fail_msg(ctx, msg);
}

static bool net_gives_up(void* ctx) {
  struct shunt_gpu_proxy* p = ctx;
  return atomic_load_explicit(&p->stop, memory_order_relaxed) || atomic_load(&p->failed) ||
         __atomic_load_n(&p->cfg.fifo->error.code, __ATOMIC_RELAXED) != 0;
}

/* The receiving thread: into this rank's region on the proxy's receiving stream, waited for,
 * since the bytes at `at` are reused as soon as this returns. */
static int net_landed(void* ctx, uint64_t off, const char* at, uint64_t bytes) {
  struct shunt_gpu_proxy* p = ctx;
  const struct shunt_cu* cu = p->cfg.cu;
  if (off > p->region_bytes || bytes > p->region_bytes - off) return -1;
  /* Relaxed: a synchronize in this thread's global mode would fail while another thread
   * captures (and invalidate that capture). */
  struct shunt_cu_guard g = shunt_cu_enter(cu, p->cfg.ctx, 1);
  CUresult e = cu->MemcpyHtoDAsync(DP(p->cfg.region + off), at, bytes, p->rx);
  if (e == CUDA_SUCCESS) e = cu->StreamSynchronize(p->rx);
  shunt_cu_leave(&g);
  if (e != CUDA_SUCCESS) fail_cu(p, "copy of received data into the region", e);
  return e == CUDA_SUCCESS ? 0 : -1;
}

/* Only `peer` raises this counter, and the receiving thread sees its flags in order: the count
 * it keeps is the counter's value, written after the data copies on the same stream. */
static void net_signal(void* ctx, uint32_t peer, uint16_t ordinal) {
  struct shunt_gpu_proxy* p = ctx;
  const struct shunt_cu* cu = p->cfg.cu;
  if (peer >= p->cfg.nranks || ordinal >= p->cfg.ordinals) return;
  size_t k = (size_t)peer * p->cfg.ordinals + ordinal;
  uint64_t old = p->got[k];
  *p->rx_flag = ++p->got[k];
  char* dst = p->cfg.region + p->cfg.port_off + k * sizeof(uint64_t);
  struct shunt_cu_guard g = shunt_cu_enter(cu, p->cfg.ctx, 1); /* relaxed, as net_landed */
  CUresult e = write_count(cu, dst, p->rx_flag, old, p->rx);
  if (e == CUDA_SUCCESS) e = cu->StreamSynchronize(p->rx);
  shunt_cu_leave(&g);
  if (e != CUDA_SUCCESS) fail_cu(p, "write of a received flag", e);
}

/* Device memory into host memory (a verbs bounce slot, a socket's piece) on the proxy's stream. */
static int net_copy(void* ctx, void* dst, const void* src, uint64_t bytes) {
  struct shunt_gpu_proxy* p = ctx;
  CUresult e = p->cfg.cu->MemcpyDtoHAsync(dst, DP(src), bytes, p->stream);
  if (e == CUDA_SUCCESS) e = p->cfg.cu->StreamSynchronize(p->stream);
  if (e != CUDA_SUCCESS) fail_cu(p, "copy of data to send", e);
  return e == CUDA_SUCCESS ? 0 : -1;
}

void shunt_gpu_proxy_net_callbacks(struct shunt_gpu_proxy* p, struct shunt_net_ep_config* c) {
  p->region_bytes = c->bytes;
  c->ctx = p;
  c->fail = net_failed;
  c->give_up = net_gives_up;
  c->landed = net_landed;
  c->signal = net_signal;
  c->copy = net_copy;
  c->stage = p->piece;
  c->stage_bytes = NET_PIECE;
}

void shunt_gpu_proxy_set_net(struct shunt_gpu_proxy* p, const struct shunt_net_ops* ops, void* ep) {
  p->net = ops;
  p->ep = ep;
}

/* ---- serving triggers -------------------------------------------------------------------- */

/* A trigger to a rank of another host: the data put at their offset in the peer's region, the
 * flag after them; flushed here, so that the source is free again and a later SYNC finds them
 * complete. */
static void handle_remote(struct shunt_gpu_proxy* p, const struct shunt_gpu_slot* s) {
  const struct shunt_trigger* t = &s->t;
  if ((t->type & SHUNT_TRIG_DATA) && t->size &&
      p->net->put(p->ep, t->peer, (const void*)(uintptr_t)s->src_addr, t->size,
                  s->dst_addr - (uint64_t)(uintptr_t)p->cfg.region, (t->type & SHUNT_TRIG_PACKETS) != 0) != 0)
    return;
  if ((t->type & SHUNT_TRIG_FLAG) && p->net->signal(p->ep, t->peer, t->ordinal) != 0) return;
  p->net->flush(p->ep, t->peer);
}

static void handle(struct shunt_gpu_proxy* p, const struct shunt_gpu_slot* s, uint64_t pos) {
  const struct shunt_trigger* t = &s->t;
  const struct shunt_cu* cu = p->cfg.cu;
  bool remote = t->peer < p->cfg.nranks && p->cfg.remote[t->peer];
  CUresult e;
  if (remote && p->net && !atomic_load(&p->failed)) {
    handle_remote(p, s);
  } else if (!remote && (t->type & SHUNT_TRIG_DATA) && t->size) {
    /* Packets too: copy engines write whole aligned 16-byte units, so a packet lands at once. */
    e = cu->MemcpyAsync((CUdeviceptr)s->dst_addr, (CUdeviceptr)s->src_addr, t->size, p->stream);
    if (e != CUDA_SUCCESS) fail_cu(p, "data copy", e);
    p->pending = true;
  }
  if ((t->type & SHUNT_TRIG_FLAG) && t->peer < p->cfg.nranks && !remote && t->ordinal < p->cfg.ordinals) {
    /* Only this proxy writes the peer's counter for (port, this rank, ordinal): it knows the
     * next value, and a copy ordered after the data on the same stream publishes it. The value
     * sits in a pinned ring, so the copy is truly asynchronous (a pageable source is staged
     * synchronously); an entry is reused only after the stream has drained past its copy: at
     * a SYNC, or here when the ring would wrap first. */
    if (p->ring_used == FLAG_RING) {
      e = cu->StreamSynchronize(p->stream);
      if (e != CUDA_SUCCESS) fail_cu(p, "stream synchronize", e);
      p->ring_used = 0;
    }
    uint64_t* v = &p->flag_ring[p->ring_pos++ % FLAG_RING];
    p->ring_used++;
    uint64_t* sent = &p->sent[(size_t)t->peer * p->cfg.ordinals + t->ordinal];
    uint64_t old = *sent;
    *v = ++*sent;
    char* dst = p->cfg.peer[t->peer] + p->cfg.port_off +
                ((uint64_t)p->cfg.rank * p->cfg.ordinals + t->ordinal) * sizeof(uint64_t);
    e = write_count(cu, dst, v, old, p->stream);
    if (e != CUDA_SUCCESS) fail_cu(p, "flag write", e);
    p->pending = true;
  }
  if (t->type & SHUNT_TRIG_SYNC) {
    /* The kernel moves data to the ranks of this host itself, and the paths to other hosts
     * wait for their own completions: the stream is synchronized only if copies were put on
     * it, so that a SYNC costs no CUDA call that could wait behind the kernel. */
    if (p->pending) {
      e = cu->StreamSynchronize(p->stream);
      if (e != CUDA_SUCCESS) fail_cu(p, "stream synchronize", e);
    }
    p->pending = false;
    p->ring_used = 0;
    __atomic_store_n(&p->cfg.fifo->done, pos + 1, __ATOMIC_RELEASE);
  }
}

/* No trigger can come: every execution launched has ended (or failed: a failed world runs
 * nothing more), and none was captured into a graph, whose replays no one announces. */
static bool nothing_pending(struct shunt_gpu_proxy* p) {
  if (atomic_load_explicit(&p->graphs, memory_order_seq_cst)) return false;
  uint64_t launched = atomic_load_explicit(&p->launched, memory_order_seq_cst);
  if (__atomic_load_n(&p->cfg.fifo->finished, __ATOMIC_ACQUIRE) >= launched) return true;
  return __atomic_load_n(&p->cfg.fifo->error.code, __ATOMIC_ACQUIRE) != 0;
}

/* Sleeps until a launch (or stop) rings the bell; false if it did not sleep. */
static bool sleep_until_launch(struct shunt_gpu_proxy* p, uint64_t pos) {
  uint32_t seen = shunt_doorbell_arm(&p->bell);
  bool slept = false;
  if (nothing_pending(p) && !atomic_load_explicit(&p->stop, memory_order_seq_cst) &&
      __atomic_load_n(&p->cfg.fifo->slots[pos % SHUNT_GPU_FIFO_SLOTS].seq, __ATOMIC_ACQUIRE) != pos + 1) {
    shunt_doorbell_wait(&p->bell, seen, PROXY_SLEEP_NS);
    slept = true;
  }
  shunt_doorbell_disarm(&p->bell);
  return slept;
}

void shunt_gpu_proxy_expect(struct shunt_gpu_proxy* p, bool graph) {
  if (!p) return;
  if (graph)
    atomic_store_explicit(&p->graphs, true, memory_order_seq_cst);
  else
    atomic_fetch_add_explicit(&p->launched, 1, memory_order_seq_cst);
  shunt_doorbell_ring(&p->bell);
}

void shunt_gpu_proxy_unexpect(struct shunt_gpu_proxy* p, bool graph) {
  if (p && !graph) atomic_fetch_sub_explicit(&p->launched, 1, memory_order_seq_cst);
}

static void* proxy_main(void* arg) {
  struct shunt_gpu_proxy* p = arg;
  p->cfg.cu->CtxSetCurrent(p->cfg.ctx);
  /* A thread capturing a graph in global mode must not make this thread's stream calls fail. */
  int mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  p->cfg.cu->ThreadExchangeStreamCaptureMode(&mode);
  uint64_t pos = 0;
  /* A kernel waits for its triggers: the proxy polls without sleeping for PROXY_SPIN_NS after
   * its last trigger (a plan's triggers come in bursts), then sleeps at most PROXY_NAP_NS at a
   * time, so the first trigger after a pause waits microseconds, not a growing backoff. When no
   * execution is pending it sleeps until the next launch wakes it: an idle communicator costs
   * no CPU. */
  uint64_t idle_since = 0;
  struct shunt_gpu_slot s;
  while (true) {
    if (!shunt_gpu_fifo_take(p->cfg.fifo, pos, &s)) {
      if (atomic_load_explicit(&p->stop, memory_order_acquire)) break;
      uint64_t now = shunt_now_ns();
      if (!idle_since) idle_since = now;
      if (now - idle_since < PROXY_SPIN_NS) {
        sched_yield();
      } else if (nothing_pending(p) && sleep_until_launch(p, pos)) {
        /* Woken by a launch: its triggers come in a burst, polled without sleeping again. */
        idle_since = 0;
        p->wakeups++;
      } else {
        struct timespec ts = {0, PROXY_NAP_NS};
        nanosleep(&ts, NULL);
        p->wakeups++;
      }
      continue;
    }
    idle_since = 0;
    p->served++;
    handle(p, &s, pos);
    pos++;
  }
  return NULL;
}

/* ---- life -------------------------------------------------------------------------------- */

int shunt_gpu_proxy_new(const struct shunt_gpu_proxy_config* cfg, struct shunt_gpu_proxy** out, char* err,
                        size_t len) {
  *out = NULL;
  struct shunt_gpu_proxy* p = calloc(1, sizeof(*p));
  if (!p || !(p->sent = calloc((size_t)cfg->nranks * cfg->ordinals, sizeof(*p->sent))) ||
      !(p->got = calloc((size_t)cfg->nranks * cfg->ordinals, sizeof(*p->got)))) {
    if (p) free(p->sent);
    free(p);
    snprintf(err, len, "out of memory");
    return -1;
  }
  p->cfg = *cfg;
  atomic_init(&p->stop, false);
  atomic_init(&p->launched, 0);
  atomic_init(&p->graphs, false);
  shunt_doorbell_init(&p->bell);
  atomic_init(&p->failed, 0);
  const struct shunt_cu* cu = cfg->cu;
  CUresult e = cu->StreamCreate(&p->stream, CU_STREAM_NON_BLOCKING);
  const char* what = "cuStreamCreate";
  if (e == CUDA_SUCCESS) e = cu->StreamCreate(&p->rx, CU_STREAM_NON_BLOCKING);
  if (e == CUDA_SUCCESS) {
    what = "cuMemHostAlloc";
    e = cu->MemHostAlloc((void**)&p->flag_ring, FLAG_RING * sizeof(uint64_t), CU_MEMHOSTALLOC_PORTABLE);
  }
  if (e == CUDA_SUCCESS)
    e = cu->MemHostAlloc((void**)&p->rx_flag, sizeof(uint64_t), CU_MEMHOSTALLOC_PORTABLE);
  if (e == CUDA_SUCCESS) e = cu->MemHostAlloc((void**)&p->piece, NET_PIECE, CU_MEMHOSTALLOC_PORTABLE);
  if (e != CUDA_SUCCESS) {
    snprintf(err, len, "rank %u proxy: %s: %s", cfg->rank, what, shunt_cu_error(e));
    shunt_gpu_proxy_free(p);
    return -1;
  }
  *out = p;
  return 0;
}

int shunt_gpu_proxy_start(struct shunt_gpu_proxy* p, char* err, size_t len) {
  if (pthread_create(&p->thread, NULL, proxy_main, p) != 0) {
    snprintf(err, len, "cannot start the proxy thread");
    return -1;
  }
  p->started = true;
  return 0;
}

bool shunt_gpu_proxy_failed(struct shunt_gpu_proxy* p) {
  return atomic_load(&p->failed) != 0;
}

const char* shunt_gpu_proxy_msg(const struct shunt_gpu_proxy* p) {
  return p->msg;
}

void shunt_gpu_proxy_stop(struct shunt_gpu_proxy* p) {
  if (!p || !p->started) return;
  atomic_store_explicit(&p->stop, true, memory_order_seq_cst);
  shunt_doorbell_ring(&p->bell);
  pthread_join(p->thread, NULL);
  p->started = false;
  SHUNT_INFO(SHUNT_NET, "rank %u proxy: %llu triggers served, %llu wake-ups", p->cfg.rank,
             (unsigned long long)p->served, (unsigned long long)p->wakeups);
}

void shunt_gpu_proxy_free(struct shunt_gpu_proxy* p) {
  if (!p) return;
  shunt_gpu_proxy_stop(p);
  const struct shunt_cu* cu = p->cfg.cu;
  if (p->stream) cu->StreamSynchronize(p->stream);
  if (p->rx) cu->StreamSynchronize(p->rx);
  if (p->flag_ring) cu->MemFreeHost(p->flag_ring);
  if (p->rx_flag) cu->MemFreeHost(p->rx_flag);
  if (p->piece) cu->MemFreeHost(p->piece);
  if (p->stream) cu->StreamDestroy(p->stream);
  if (p->rx) cu->StreamDestroy(p->rx);
  free(p->sent);
  free(p->got);
  free(p);
}
