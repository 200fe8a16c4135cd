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
#include "exec/gpu/gpu_abi.h"
#include "transport/net.h"
#include "util/log.h"
#include "util/status.h"

#define PROXY_SPIN_NS 200000ull
#define PROXY_NAP_NS 20000L
/* How long an idle proxy sleeps at most when it knows no execution is pending: a backstop
 * only, since every launch wakes it. */
#define PROXY_SLEEP_NS 100000000L
#define FLAG_RING 4096u

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
  /* Mapped pinned host memory shared with the kernel (gpu_fifo.h): the outgoing staging
   * chunks, and where the row hands arrivals on, the channel words and records and the
   * mirror; each with its device view. */
  char* xout;
  CUdeviceptr xout_dev;
  struct shunt_gpu_xin_chan* xin;
  CUdeviceptr xin_dev;
  char* xin_data;
  CUdeviceptr xin_data_dev;
  struct shunt_gpu_xin_rec* pend; /* [nranks * ordinals]: extents landed since the last flag */
  uint64_t* got;                  /* [nranks * ordinals]: flags received per (peer, ordinal) */
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

/* The first failure wins: its code (util/status.h) in `failed`, its words in msg. */
static void fail_msg(struct shunt_gpu_proxy* p, int code, const char* msg) {
  int none = 0;
  if (!atomic_compare_exchange_strong(&p->failed, &none, code)) return;
  snprintf(p->msg, sizeof(p->msg), "rank %u proxy: %s", p->cfg.rank, msg);
  SHUNT_WARN("%s", p->msg);
  /* Kernels waiting on this proxy give up at once rather than never. */
  raise_abort(p);
}

static void fail_cu(struct shunt_gpu_proxy* p, const char* what, CUresult e) {
  char msg[256];
  snprintf(msg, sizeof(msg), "%s: %s", what, shunt_cu_error(e));
  fail_msg(p, SHUNT_E_CUDA, msg);
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

static void net_failed(void* ctx, int code, const char* msg) {
  fail_msg(ctx, code, msg);
}

static bool net_gives_up(void* ctx) {
  struct shunt_gpu_proxy* p = ctx;
  return atomic_load_explicit(&p->stop, memory_order_relaxed) || atomic_load(&p->failed) ||
         __atomic_load_n(&p->cfg.fifo->error.code, __ATOMIC_RELAXED) != 0;
}

/* The receiving thread: the bytes into the mirror at their region offset, the extent noted as
 * pending on its channel until the channel's flag (the protocol in gpu_fifo.h). No CUDA call. */
static int net_landed(void* ctx, uint32_t peer, uint16_t ordinal, uint64_t off, const char* at,
                      uint64_t bytes) {
  struct shunt_gpu_proxy* p = ctx;
  if (!p->xin || off > p->region_bytes || bytes > p->region_bytes - off || peer >= p->cfg.nranks ||
      ordinal >= p->cfg.ordinals)
    return SHUNT_E_INVALID;
  memcpy(p->xin_data + off, at, bytes);
  struct shunt_gpu_xin_rec* r = &p->pend[(size_t)peer * p->cfg.ordinals + ordinal];
  if (r->n && r->off[r->n - 1] + r->bytes[r->n - 1] == off) {
    r->bytes[r->n - 1] += bytes; /* the next piece of the same put */
    return 0;
  }
  if (r->n == SHUNT_GPU_XIN_EXT) {
    char msg[160];
    snprintf(msg, sizeof(msg), "more than %u separate puts from rank %u on channel %u before its flag",
             SHUNT_GPU_XIN_EXT, peer, ordinal);
    fail_msg(p, SHUNT_E_INVALID, msg);
    return SHUNT_E_INVALID;
  }
  r->off[r->n] = off;
  r->bytes[r->n] = bytes;
  r->n++;
  return 0;
}

/* Only `peer` raises this channel, and the receiving thread sees its flags in order, after
 * their data: the pending extents go into the record of the new count, then the count is
 * published with one release store of an aligned word, which lands whole (unlike a copy's
 * bytes: write_count). The record is reused only once the kernel has copied the one before it
 * in that entry. */
static void net_signal(void* ctx, uint32_t peer, uint16_t ordinal) {
  struct shunt_gpu_proxy* p = ctx;
  if (!p->xin || peer >= p->cfg.nranks || ordinal >= p->cfg.ordinals) return;
  size_t k = (size_t)peer * p->cfg.ordinals + ordinal;
  struct shunt_gpu_xin_chan* ch = &p->xin[k];
  uint64_t n = ++p->got[k];
  while (n > SHUNT_GPU_XIN_RECS && __atomic_load_n(&ch->copied, __ATOMIC_ACQUIRE) < n - SHUNT_GPU_XIN_RECS) {
    if (net_gives_up(p)) return;
    struct timespec ts = {0, PROXY_NAP_NS};
    nanosleep(&ts, NULL);
  }
  struct shunt_gpu_xin_rec* r = &ch->rec[n % SHUNT_GPU_XIN_RECS];
  struct shunt_gpu_xin_rec* pd = &p->pend[k];
  for (uint64_t i = 0; i < pd->n; i++) {
    r->off[i] = pd->off[i];
    r->bytes[i] = pd->bytes[i];
  }
  r->n = pd->n;
  pd->n = 0;
  __atomic_store_n(&ch->count, n, __ATOMIC_RELEASE);
}

void shunt_gpu_proxy_net_callbacks(struct shunt_gpu_proxy* p, struct shunt_net_ep_config* c) {
  p->region_bytes = c->bytes;
  c->ctx = p;
  c->fail = net_failed;
  c->give_up = net_gives_up;
  c->landed = net_landed;
  c->signal = net_signal;
  c->out_stage = p->xout;
  c->out_bytes = (uint64_t)SHUNT_GPU_XOUT_SLOTS * SHUNT_GPU_XOUT_CHUNK;
}

/* Mapped pinned host memory of `bytes`, zeroed, and its device view. */
static CUresult host_mapped(const struct shunt_cu* cu, size_t bytes, void** host, CUdeviceptr* dev) {
  CUresult e = cu->MemHostAlloc(host, bytes, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP);
  if (e != CUDA_SUCCESS) {
    *host = NULL;
    return e;
  }
  memset(*host, 0, bytes);
  return cu->MemHostGetDevicePointer(dev, *host, 0);
}

int shunt_gpu_proxy_set_net(struct shunt_gpu_proxy* p, const struct shunt_net_ops* ops, void* ep, char* err,
                            size_t len) {
  p->net = ops;
  p->ep = ep;
  if (!ops->hands_arrivals) return 0;
  const struct shunt_cu* cu = p->cfg.cu;
  size_t chans = (size_t)p->cfg.nranks * p->cfg.ordinals;
  if (!(p->pend = calloc(chans, sizeof(*p->pend)))) {
    snprintf(err, len, "rank %u proxy: out of memory", p->cfg.rank);
    return SHUNT_E_NOMEM;
  }
  struct shunt_cu_guard g = shunt_cu_enter(cu, p->cfg.ctx, 1);
  CUresult e = host_mapped(cu, chans * sizeof(*p->xin), (void**)&p->xin, &p->xin_dev);
  if (e == CUDA_SUCCESS) e = host_mapped(cu, p->region_bytes, (void**)&p->xin_data, &p->xin_data_dev);
  shunt_cu_leave(&g);
  if (e != CUDA_SUCCESS) {
    snprintf(err, len, "rank %u proxy: mapped host memory for arrivals (%llu bytes): %s", p->cfg.rank,
             (unsigned long long)p->region_bytes, shunt_cu_error(e));
    return e == CUDA_ERROR_OUT_OF_MEMORY ? SHUNT_E_NOMEM : SHUNT_E_CUDA;
  }
  return 0;
}

void shunt_gpu_proxy_kargs(const struct shunt_gpu_proxy* p, struct shunt_gpu_kargs* k) {
  k->xout = (char*)(uintptr_t)p->xout_dev;
  k->xin = p->xin ? (struct shunt_gpu_xin_chan*)(uintptr_t)p->xin_dev : NULL;
  k->xin_data = p->xin ? (const char*)(uintptr_t)p->xin_data_dev : NULL;
}

/* ---- serving triggers -------------------------------------------------------------------- */

/* A trigger to a rank of another host: the data, which the kernel staged in this position's
 * chunk (gpu_fifo.h), put at their offset in the peer's region, the flag after them; flushed
 * here, so that the chunk is free again and a later SYNC finds them complete. */
static void handle_remote(struct shunt_gpu_proxy* p, const struct shunt_gpu_slot* s, uint64_t pos) {
  const struct shunt_trigger* t = &s->t;
  const char* src = p->xout + (size_t)(pos % SHUNT_GPU_XOUT_SLOTS) * SHUNT_GPU_XOUT_CHUNK;
  if ((t->type & SHUNT_TRIG_DATA) && t->size > SHUNT_GPU_XOUT_CHUNK) {
    fail_msg(p, SHUNT_E_INVALID, "a put to another host larger than a staging chunk");
    return;
  }
  if ((t->type & SHUNT_TRIG_DATA) && (t->type & SHUNT_TRIG_PACKETS) && p->net->hands_arrivals) {
    /* The receiving kernel polls its scratch for packets, which only a row writing in place
     * (RDMA) can reach without a CUDA copy; no shipped plan puts packets on port channels. */
    fail_msg(p, SHUNT_E_INVALID, "packets on a port channel to another host need verbs (SHUNT_NET=ib)");
    return;
  }
  if ((t->type & SHUNT_TRIG_DATA) && t->size &&
      p->net->put(p->ep, t->peer, t->ordinal, src, t->size, s->dst_addr - (uint64_t)(uintptr_t)p->cfg.region,
                  (t->type & SHUNT_TRIG_PACKETS) != 0) != 0)
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
    handle_remote(p, s, pos);
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
    /* The position's staging chunk is free again (a trigger to another host is flushed). */
    __atomic_store_n(&p->cfg.fifo->handled, pos + 1, __ATOMIC_RELEASE);
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
    return SHUNT_E_NOMEM;
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
  if (e == CUDA_SUCCESS) {
    what = "cuMemHostAlloc";
    e = cu->MemHostAlloc((void**)&p->flag_ring, FLAG_RING * sizeof(uint64_t), CU_MEMHOSTALLOC_PORTABLE);
  }
  if (e == CUDA_SUCCESS)
    e = host_mapped(cu, (size_t)SHUNT_GPU_XOUT_SLOTS * SHUNT_GPU_XOUT_CHUNK, (void**)&p->xout, &p->xout_dev);
  if (e != CUDA_SUCCESS) {
    snprintf(err, len, "rank %u proxy: %s: %s", cfg->rank, what, shunt_cu_error(e));
    shunt_gpu_proxy_free(p);
    return e == CUDA_ERROR_OUT_OF_MEMORY ? SHUNT_E_NOMEM : SHUNT_E_CUDA;
  }
  *out = p;
  return 0;
}

int shunt_gpu_proxy_start(struct shunt_gpu_proxy* p, char* err, size_t len) {
  int e = pthread_create(&p->thread, NULL, proxy_main, p);
  if (e != 0) {
    snprintf(err, len, "cannot start the proxy thread: %s", strerror(e));
    return shunt_errno_status(e);
  }
  p->started = true;
  return 0;
}

int shunt_gpu_proxy_failed(struct shunt_gpu_proxy* p) {
  return atomic_load(&p->failed);
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
  if (p->flag_ring) cu->MemFreeHost(p->flag_ring);
  if (p->xout) cu->MemFreeHost(p->xout);
  if (p->xin) cu->MemFreeHost(p->xin);
  if (p->xin_data) cu->MemFreeHost(p->xin_data);
  if (p->stream) cu->StreamDestroy(p->stream);
  free(p->pend);
  free(p->sent);
  free(p->got);
  free(p);
}
