/* The host backend's primitives for exec/exec_ops.h: every threadblock a fiber on the
 * calling thread (transport/fiber.h), C11 atomics on shared memory for semaphores and
 * packets, the proxy for port channels. A block that must wait hands the thread back to the
 * run's scheduler with what it waits for, which the scheduler checks without switching.
 * Packets are stored as 8-byte words {4 data bytes, 4 flag bytes}, each written and read
 * with one atomic access; an LL16 packet is two such words (both flags must match), an LL8
 * packet one, which is exactly the layout of docs/plan-format.md §7.1. */
#ifndef SHUNT_EXEC_HOST_XCTX_H
#define SHUNT_EXEC_HOST_XCTX_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "exec/elem.h"
#include "exec/program.h"
#include "plan/plan.h"
#include "transport/backoff.h"
#include "transport/fiber.h"
#include "transport/proxy.h"
#include "transport/world.h"

#define SHUNT_XFN static inline
#define SHUNT_HOST_BATCH 16384u

/* State of one run on one rank, shared by its block threads. */
struct shunt_host_shared {
  struct shunt_world* w;
  const struct shunt_program* p;
  char* base[3]; /* input, output, scratch (without the half) */
  uint64_t half;
  uint32_t flag;
  uint64_t deadline;
  enum shunt_dtype dt;
  enum shunt_redop step_op;
  uint32_t esize;
  _Atomic int64_t* sems;
  _Atomic uint64_t bars[16];
  bool alias; /* in place: every rank's input is a view into its output */
  struct shunt_fibers* fibers;
  bool expired; /* the deadline passed or the world was aborted: every wait gives up */
};

/* What a waiting block waits for. */
enum shunt_host_cond_kind {
  SHUNT_HC_NONE,   /* not waiting (not started yet) */
  SHUNT_HC_GE_U64, /* the uint64 at p reaches v */
  SHUNT_HC_GE_I64, /* the int64 at p reaches (int64_t)v */
  SHUNT_HC_FLAG,   /* the packet word at p carries flag v */
  SHUNT_HC_PROXY,  /* the proxy p has done v triggers */
};
struct shunt_host_cond {
  enum shunt_host_cond_kind kind;
  const void* p;
  uint64_t v;
};

static inline bool shunt_host_cond_ready(const struct shunt_host_cond* c) {
  switch (c->kind) {
    case SHUNT_HC_GE_U64:
      return atomic_load_explicit((_Atomic uint64_t*)c->p, memory_order_relaxed) >= c->v;
    case SHUNT_HC_GE_I64:
      return atomic_load_explicit((_Atomic int64_t*)c->p, memory_order_relaxed) >= (int64_t)c->v;
    case SHUNT_HC_FLAG:
      return (uint32_t)(atomic_load_explicit((_Atomic uint64_t*)c->p, memory_order_relaxed) >> 32) ==
             (uint32_t)c->v;
    case SHUNT_HC_PROXY:
      return shunt_proxy_done((struct shunt_proxy*)(uintptr_t)c->p) >= c->v;
    default:
      return true;
  }
}

/* Why a thread gave up: filled by the primitive that timed out. */
struct shunt_host_blocked {
  bool set;
  char what[96];
  uint64_t awaited, seen;
};

struct shunt_xctx {
  const struct shunt_program* prog;
  uint32_t block, tid, nthreads, op;
  struct shunt_host_shared* sh;
  char* tmp[2];
  struct shunt_host_blocked why;
  struct shunt_host_cond cond; /* what it waits for, while it waits */
};

static inline char* xh_base(struct shunt_xctx* X, unsigned kind, unsigned slot, unsigned buf,
                            unsigned member) {
  struct shunt_host_shared* sh = X->sh;
  uint32_t rank = sh->w->rank;
  if (kind == SHUNT_PREF_REMOTE) rank = slot;
  if (kind == SHUNT_PREF_SWITCH) {
    const struct shunt_prog_switch* sw = &shunt_prog_switches(X->prog)[slot];
    rank = shunt_prog_switch_ranks(X->prog)[sw->first_rank + member];
  }
  char* b;
  if (rank == sh->w->rank)
    b = sh->base[buf];
  else if (sh->alias && SHUNT_PROG_OUT_IN_INPUT(X->prog))
    b = buf == SHUNT_BUF_OUTPUT
            ? shunt_world_buf(sh->w, rank, SHUNT_BUF_INPUT) + SHUNT_PROG_OUT_VIEW(X->prog, rank)
            : shunt_world_buf(sh->w, rank, buf);
  else if (buf == SHUNT_BUF_INPUT && sh->alias)
    b = shunt_world_buf(sh->w, rank, SHUNT_BUF_OUTPUT) + SHUNT_PROG_IN_VIEW(X->prog, rank);
  else
    b = shunt_world_buf(sh->w, rank, buf);
  return buf == SHUNT_BUF_SCRATCH ? b + sh->half : b;
}

SHUNT_XFN bool xb_aliased(struct shunt_xctx* X) {
  return X->sh->alias;
}

SHUNT_XFN char* xb_addr(struct shunt_xctx* X, const struct shunt_prog_ref* r, unsigned member, uint64_t win) {
  return xh_base(X, r->kind, r->slot, r->buf, member) + r->off + win;
}

SHUNT_XFN uint64_t xb_rel(struct shunt_xctx* X, const struct shunt_prog_ref* r, uint64_t win) {
  return r->off + win + (r->buf == SHUNT_BUF_SCRATCH ? X->sh->half : 0);
}

SHUNT_XFN unsigned xb_switch_n(struct shunt_xctx* X, const struct shunt_prog_ref* r) {
  return r->kind == SHUNT_PREF_SWITCH ? shunt_prog_switches(X->prog)[r->slot].nranks : 1;
}

SHUNT_XFN uint64_t xb_batch(struct shunt_xctx* X) {
  (void)X;
  return SHUNT_HOST_BATCH;
}
SHUNT_XFN char* xb_tmp(struct shunt_xctx* X, unsigned k) {
  return X->tmp[k];
}

SHUNT_XFN void xb_copy(struct shunt_xctx* X, char* dst, const char* src, uint64_t n) {
  (void)X;
  if (dst != src && n) memmove(dst, src, n);
}

SHUNT_XFN void xb_reduce(struct shunt_xctx* X, char* dst, const char* src, uint64_t n) {
  shunt_elem_reduce(X->sh->dt, X->sh->step_op, dst, src, n / X->sh->esize);
}

SHUNT_XFN void xb_block_sync(struct shunt_xctx* X) {
  (void)X;
}

/* A rank's blocks are fibers of one thread: stores are seen in program order. */
SHUNT_XFN void xb_data_before_packets(struct shunt_xctx* X) {
  (void)X;
}

static inline int xh_blocked(struct shunt_xctx* X, uint64_t awaited, uint64_t seen, const char* fmt, ...)
    SHUNT_PRINTF(4, 5);
static inline int xh_blocked(struct shunt_xctx* X, uint64_t awaited, uint64_t seen, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(X->why.what, sizeof(X->why.what), fmt, ap);
  va_end(ap);
  X->why.set = true;
  X->why.awaited = awaited;
  X->why.seen = seen;
  return -1;
}

static inline uint64_t xh_word(uint32_t data, uint32_t flag) {
  return (uint64_t)data | ((uint64_t)flag << 32);
}

SHUNT_XFN void xb_pkt_put(struct shunt_xctx* X, char* pkt, const char* data, uint64_t n) {
  _Atomic uint64_t* w = (_Atomic uint64_t*)(void*)pkt;
  for (uint64_t i = 0; i < n / 4; i++) {
    uint32_t d;
    memcpy(&d, data + 4 * i, 4);
    atomic_store_explicit(&w[i], xh_word(d, X->sh->flag), memory_order_release);
  }
  shunt_world_ring_at(X->sh->w, pkt);
}

/* One pause of a wait on `kind, p, v`: the thread goes to the other blocks until that holds.
 * False once the run expired (its deadline passed, or the world was aborted: its communicator
 * is being torn down while this block waits on peers). */
static inline bool xh_pause(struct shunt_xctx* X, enum shunt_host_cond_kind kind, const void* p, uint64_t v) {
  X->cond = (struct shunt_host_cond){kind, p, v};
  shunt_fibers_yield(X->sh->fibers);
  X->cond.kind = SHUNT_HC_NONE;
  return !X->sh->expired;
}

static inline int xh_pkt_wait(struct shunt_xctx* X, _Atomic uint64_t* w, uint64_t* out) {
  uint64_t v = atomic_load_explicit(w, memory_order_acquire);
  while ((uint32_t)(v >> 32) != X->sh->flag) {
    if (!xh_pause(X, SHUNT_HC_FLAG, w, X->sh->flag)) {
      char* s = xh_base(X, SHUNT_PREF_LOCAL, 0, SHUNT_BUF_SCRATCH, 0);
      return xh_blocked(X, X->sh->flag, v >> 32, "packet flag at scratch byte %lld",
                        (long long)((char*)w - s));
    }
    v = atomic_load_explicit(w, memory_order_acquire);
  }
  *out = v;
  return 0;
}

SHUNT_XFN int xb_pkt_get(struct shunt_xctx* X, char* data, const char* pkt, uint64_t n) {
  _Atomic uint64_t* w = (_Atomic uint64_t*)(void*)pkt;
  for (uint64_t i = 0; i < n / 4; i++) {
    uint64_t v = 0;
    if (xh_pkt_wait(X, &w[i], &v)) return -1;
    uint32_t d = (uint32_t)v;
    memcpy(data + 4 * i, &d, 4);
  }
  return 0;
}

SHUNT_XFN int xb_pkt_fwd(struct shunt_xctx* X, char* dst, const char* pkt, uint64_t n) {
  _Atomic uint64_t* w = (_Atomic uint64_t*)(void*)pkt;
  _Atomic uint64_t* d = (_Atomic uint64_t*)(void*)dst;
  for (uint64_t i = 0; i < n / 4; i++) {
    uint64_t v = 0;
    if (xh_pkt_wait(X, &w[i], &v)) return -1;
    atomic_store_explicit(&d[i], v, memory_order_release);
  }
  shunt_world_ring_at(X->sh->w, dst);
  return 0;
}

static inline const char* xh_chan_name(unsigned t) {
  return t == SHUNT_CHAN_PORT ? "port" : "memory";
}

SHUNT_XFN int xb_signal(struct shunt_xctx* X, const struct shunt_prog_chan* c, bool relaxed) {
  struct shunt_world* w = X->sh->w;
  _Atomic uint64_t* s = &w->peers[c->peer].inbound[shunt_world_sem(w, c->type, w->rank, c->ordinal)];
  atomic_fetch_add_explicit(s, 1, relaxed ? memory_order_relaxed : memory_order_release);
  shunt_world_ring(w, c->peer);
  return 0;
}

SHUNT_XFN int xb_wait(struct shunt_xctx* X, const struct shunt_prog_chan* c, bool relaxed) {
  struct shunt_world* w = X->sh->w;
  size_t i = shunt_world_sem(w, c->type, c->peer, c->ordinal);
  uint64_t exp = atomic_fetch_add_explicit(&w->expected[i], 1, memory_order_relaxed) + 1;
  _Atomic uint64_t* s = &w->peers[w->rank].inbound[i];
  memory_order mo = relaxed ? memory_order_relaxed : memory_order_acquire;
  uint64_t v;
  while ((v = atomic_load_explicit(s, mo)) < exp)
    if (!xh_pause(X, SHUNT_HC_GE_U64, s, exp))
      return xh_blocked(X, exp, v, "signal on %s channel #%u to rank %u", xh_chan_name(c->type), c->ordinal,
                        c->peer);
  return 0;
}

/* Every port op goes through the host world's proxy. */
SHUNT_XFN bool xb_port_direct(struct shunt_xctx* X, uint32_t peer) {
  (void)X;
  (void)peer;
  return false;
}
SHUNT_XFN void xb_port_copy(struct shunt_xctx* X, const struct shunt_trigger* t) {
  (void)X;
  (void)t;
}

SHUNT_XFN int xb_port(struct shunt_xctx* X, const struct shunt_prog_chan* c, const struct shunt_trigger* t,
                      bool wait_done) {
  struct shunt_proxy* px = X->sh->w->proxy;
  uint64_t pos = shunt_proxy_push(px, t);
  if (!wait_done) return 0;
  uint64_t d;
  while ((d = shunt_proxy_done(px)) <= pos)
    if (!xh_pause(X, SHUNT_HC_PROXY, px, pos + 1))
      return xh_blocked(X, pos + 1, d, "proxy flush on port channel #%u to rank %u", c ? c->ordinal : 0,
                        c ? c->peer : 0);
  return 0;
}

SHUNT_XFN int xb_barrier(struct shunt_xctx* X, uint32_t id, uint32_t nblocks) {
  _Atomic uint64_t* b = &X->sh->bars[id & 15];
  uint64_t k = atomic_fetch_add_explicit(b, 1, memory_order_acq_rel);
  uint64_t target = (k / nblocks + 1) * nblocks;
  uint64_t v;
  while ((v = atomic_load_explicit(b, memory_order_acquire)) < target)
    if (!xh_pause(X, SHUNT_HC_GE_U64, b, target))
      return xh_blocked(X, target, v, "barrier %u of %u blocks (arrivals)", id, nblocks);
  return 0;
}

SHUNT_XFN int xb_sem_acquire(struct shunt_xctx* X, uint32_t id) {
  _Atomic int64_t* s = &X->sh->sems[id];
  int64_t old = atomic_fetch_sub_explicit(s, 1, memory_order_acquire);
  if (old > 0) return 0;
  int64_t v;
  while ((v = atomic_load_explicit(s, memory_order_acquire)) < old)
    if (!xh_pause(X, SHUNT_HC_GE_I64, s, (uint64_t)old))
      return xh_blocked(X, (uint64_t)old, (uint64_t)v, "semaphore %u", id);
  return 0;
}

SHUNT_XFN void xb_sem_release(struct shunt_xctx* X, uint32_t id) {
  atomic_fetch_add_explicit(&X->sh->sems[id], 1, memory_order_release);
}

#include "exec/exec_ops.h"

#endif
