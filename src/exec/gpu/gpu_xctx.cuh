/* The GPU backend's primitives for exec/exec_ops.h: one CUDA block per plan threadblock, any
 * number of threads per block (the program's, or fewer when the launcher asks), CUDA C.
 *
 * Promises:
 * - Data moves in 16-byte pieces per thread (xb_batch), with 16-byte vector accesses when both
 *   sides are aligned, narrower ones otherwise. Reductions use the element math of
 *   exec/ops/reduce.h for the call's dtype and step op, bit for bit what the host backend does.
 * - LL packets use the device hooks of exec/ops/packet.h: one volatile 16-byte (LL16) or 8-byte
 *   (LL8) store or load per packet, the flag of this execution in every packet.
 * - Signals are system-scope release reductions on the peer's 64-bit counter, waits
 *   system-scope acquire loads (relaxed for rlxsignal/rlxwait).
 * - Every wait can be ended: it gives up at once when its rank's abort word is set, and after
 *   the world's timeout when it has one (none by default: a healthy job may be late), records
 *   (first failure per rank) which block, thread, op and what it waited for, raises every rank's
 *   abort word so every other waiter in the world gives up too, and returns -1.
 * - Port channel ops to a rank whose memory this process maps (every rank of this host) need no
 *   proxy and no CUDA call: the block copies the data itself, as a memory channel does, and the
 *   flag is a system-scope release add on the peer's counter for (port, this rank, ordinal),
 *   which only this rank writes; a flush is a system fence. Ops to a rank of another host push
 *   a trigger with absolute addresses into the rank's FIFO in mapped host memory, their data
 *   first copied by the pushing thread into staging chunks there; flush-type triggers wait for
 *   the proxy's completion counter. A wait on a port channel from another host whose arrivals
 *   the proxy hands on (TCP) polls a count in mapped host memory and copies the data the flag
 *   follows from a host mirror into the region (transport/gpu_fifo.h). So a kernel waits on no CUDA call of
 * the host's, which another thread's module load or synchronizing call could hold up (the context lock), nor
 * on a stream that may share a hardware queue with the kernel's own.
 * - The host aborts a rank through a word in mapped host memory (the FIFO's abort): waits look
 *   at it with the rank's own abort word and, once it is set, raise every rank's.
 * - Device reads of mapped host memory are few (each a PCIe round trip): the FIFO's consumed
 *   count is read only when the FIFO looks full, the host's abort word every 256 polls.
 * Only for inclusion by gpu_kernel.cuh (CUDA and its CPU build). */
#ifndef SHUNT_EXEC_GPU_XCTX_CUH
#define SHUNT_EXEC_GPU_XCTX_CUH

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "exec/gpu/gpu_abi.h"
#include "exec/ops/packet.h"
#include "exec/ops/reduce.h"
#include "exec/ops/reduce_loop.h"
#include "exec/program.h"
#include "plan/plan.h"
#include "plan/planset.h"

/* The primitives below are written once: nvcc gets them from gpu_device.cuh, a host C++
 * compiler (the kernel's CPU build, exec/kcpu) from its shim, which must come first. */
#if defined(__CUDACC__)
#include "exec/gpu/gpu_device.cuh"
#elif !defined(SHUNT_KCPU_SHIM_H)
#error "gpu_xctx.cuh outside nvcc needs exec/kcpu/kcpu_shim.h included first"
#endif

#define SHUNT_XFN XG_FN
#define SHUNT_GPU_BATCH 16u

struct shunt_xctx {
  const struct shunt_program* prog;
  uint32_t block, tid, nthreads, op;
  const struct shunt_gpu_kargs* k;
  char* base[3];  /* own input, output, scratch (scratch with the half) */
  char* scratch0; /* own scratch without the half */
  uint64_t half;
  uint32_t flag;
  uint32_t ll8;         /* packets are LL8 */
  struct shunt_red red; /* the dtype and the op applied at reduce steps */
  int4 tmp[2];          /* xb_tmp: one batch each */
};

/* ---- Addresses ----------------------------------------------------------------------------------- */

XG_FN struct shunt_gpu_ctrl* xg_ctrl(const struct shunt_xctx* X) {
  return (struct shunt_gpu_ctrl*)(X->k->region + X->k->lay.ctrl);
}

/* Start of buffer `buf` (0 input, 1 output, 2 scratch without the half) of a peer: its user
 * buffer itself when the call is zero-copy for that buffer (the table holds each rank's own
 * address, agreed by every rank: gpu_reg.h), else its staging section, since a rank stages
 * every user buffer that peers reach (program.remote_access). In place, one buffer is a view
 * into the other on every rank (kargs.alias): only the holder is staged or in a table, and
 * the view lies at the rank's own offset inside it. */
XG_FN char* xg_peer_buf(const struct shunt_xctx* X, uint32_t rank, unsigned buf) {
  const struct shunt_gpu_kargs* k = X->k;
  const struct shunt_gpu_layout* L = &k->lay;
  char* b = (char*)(uintptr_t)k->peers[rank];
  if (buf != SHUNT_BUF_INPUT && buf != SHUNT_BUF_OUTPUT) return b + L->scratch;
  /* Which buffer holds the one asked for: the input, unless it is a view into the output; the
   * output, unless it is a view into the input. */
  bool out_in_in = k->alias && SHUNT_PROG_OUT_IN_INPUT(X->prog);
  bool in_in_out = k->alias && !out_in_in;
  if (buf == SHUNT_BUF_INPUT ? !in_in_out : out_in_in) {
    char* in = k->zc_in ? (char*)(uintptr_t)(k->zc_in[rank] + k->zc_in_off) : b + L->input;
    return buf == SHUNT_BUF_INPUT ? in : in + SHUNT_PROG_OUT_VIEW(X->prog, rank);
  }
  char* out = k->zc_out ? (char*)(uintptr_t)(k->zc_out[rank] + k->zc_out_off) : b + L->output;
  return buf == SHUNT_BUF_OUTPUT ? out : out + SHUNT_PROG_IN_VIEW(X->prog, rank);
}

SHUNT_XFN bool xb_aliased(struct shunt_xctx* X) {
  return X->k->alias != 0;
}

XG_FN char* xg_base(const struct shunt_xctx* X, unsigned kind, unsigned slot, unsigned buf, unsigned member) {
  uint32_t rank = X->k->rank;
  if (kind == SHUNT_PREF_REMOTE) rank = slot;
  if (kind == SHUNT_PREF_SWITCH) {
    const struct shunt_prog_switch* sw = &shunt_prog_switches(X->prog)[slot];
    rank = shunt_prog_switch_ranks(X->prog)[sw->first_rank + member];
  }
  if (rank == X->k->rank) return X->base[buf > 2 ? 2 : buf];
  char* b = xg_peer_buf(X, rank, buf);
  return buf == SHUNT_BUF_SCRATCH ? b + X->half : b;
}

SHUNT_XFN char* xb_addr(struct shunt_xctx* X, const struct shunt_prog_ref* r, unsigned member, uint64_t win) {
  return xg_base(X, r->kind, r->slot, r->buf, member) + r->off + win;
}

SHUNT_XFN uint64_t xb_rel(struct shunt_xctx* X, const struct shunt_prog_ref* r, uint64_t win) {
  return r->off + win + (r->buf == SHUNT_BUF_SCRATCH ? X->half : 0);
}

SHUNT_XFN unsigned xb_switch_n(struct shunt_xctx* X, const struct shunt_prog_ref* r) {
  return r->kind == SHUNT_PREF_SWITCH ? shunt_prog_switches(X->prog)[r->slot].nranks : 1;
}

SHUNT_XFN uint64_t xb_batch(struct shunt_xctx* X) {
  (void)X;
  return SHUNT_GPU_BATCH;
}

SHUNT_XFN char* xb_tmp(struct shunt_xctx* X, unsigned k) {
  return (char*)&X->tmp[k & 1];
}

/* ---- Data ----------------------------------------------------------------------------------------- */

/* Unaligned-safe loads and stores of 4 and 8 bytes: user buffers need only element alignment. */
XG_FN uint64_t xg_ld64(const char* p) {
  if (((uintptr_t)p & 7) == 0) return *(const uint64_t*)p;
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)(unsigned char)p[i] << (8 * i);
  return v;
}
XG_FN void xg_st64(char* p, uint64_t v) {
  if (((uintptr_t)p & 7) == 0) {
    *(uint64_t*)p = v;
    return;
  }
  for (int i = 0; i < 8; i++) p[i] = (char)(v >> (8 * i));
}
XG_FN uint32_t xg_ld32(const char* p) {
  if (((uintptr_t)p & 3) == 0) return *(const uint32_t*)p;
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) v |= (uint32_t)(unsigned char)p[i] << (8 * i);
  return v;
}
XG_FN void xg_st32(char* p, uint32_t v) {
  if (((uintptr_t)p & 3) == 0) {
    *(uint32_t*)p = v;
    return;
  }
  for (int i = 0; i < 4; i++) p[i] = (char)(v >> (8 * i));
}

SHUNT_XFN void xb_copy(struct shunt_xctx* X, char* dst, const char* src, uint64_t n) {
  (void)X;
  if (dst == src || n == 0) return;
  uintptr_t a = (uintptr_t)dst | (uintptr_t)src;
  if (n == 16 && (a & 15) == 0) {
    *(int4*)dst = *(const int4*)src;
  } else if ((a & 7) == 0 && (n & 7) == 0) {
    for (uint64_t i = 0; i < n; i += 8) *(uint64_t*)(dst + i) = *(const uint64_t*)(src + i);
  } else if ((a & 3) == 0 && (n & 3) == 0) {
    for (uint64_t i = 0; i < n; i += 4) *(uint32_t*)(dst + i) = *(const uint32_t*)(src + i);
  } else {
    for (uint64_t i = 0; i < n; i++) dst[i] = src[i];
  }
}

/* dst = dst (+) src element by element; n is a whole number of elements. The one typed loop of
 * every executor (exec/ops/reduce_loop.h: the same functions, so the same bits as the host
 * backend). Not inlined: one copy of the 48 loops serves every reducing op. */
XG_NOINLINE void xg_reduce(enum shunt_dtype ty, enum shunt_redop kind, char* dst, const char* src, uint64_t n) {
  shunt_reduce_typed(ty, kind, dst, src, n);
}

SHUNT_XFN void xb_reduce(struct shunt_xctx* X, char* dst, const char* src, uint64_t n) {
  xg_reduce(X->red.ty, X->red.kind, dst, src, n);
}

SHUNT_XFN void xb_block_sync(struct shunt_xctx* X) {
  (void)X;
  __syncthreads();
}

/* Plain stores to different addresses may reach other SMs (or this one's other threads) in
 * any order; the fence makes the packet's flag publish the data stored before it. */
SHUNT_XFN void xb_data_before_packets(struct shunt_xctx* X) {
  (void)X;
  __threadfence();
}

/* ---- Bounded waiting -------------------------------------------------------------------------- */

struct xg_spin {
  uint64_t t0;
  uint32_t n;
  uint32_t aborted;
};

/* One more poll? False once the world's abort word is set or its timeout (when it has one) has
 * passed; both are looked at every 256 polls so that a poll costs one memory access. */
XG_FN uint32_t xg_host_aborted(const struct shunt_gpu_kargs* k) {
  xg_pcie_read();
  return xg_ld_vol_u32(&k->fifo->abort);
}

XG_FN bool xg_spin_more(const struct shunt_xctx* X, struct xg_spin* s) {
  xg_relax(s->n);
  if ((++s->n & 255u) != 0) return true;
  if (xg_ld_vol_u32(X->k->abort) || xg_host_aborted(X->k)) {
    s->aborted = 1;
    return false;
  }
  if (X->k->timeout_ns == 0) return true;
  uint64_t now = xg_now_ns();
  if (s->t0 == 0) {
    s->t0 = now;
    return true;
  }
  return now - s->t0 <= X->k->timeout_ns;
}

/* Records why this thread gives up (the first failure of the rank wins), raises the world's
 * abort word so that every other waiter gives up too, and returns -1. */
XG_FN int xg_blocked(struct shunt_xctx* X, const struct xg_spin* s, unsigned what, unsigned chan_type,
                     uint32_t peer, uint32_t ordinal, uint64_t awaited, uint64_t seen, uint64_t where) {
  struct shunt_gpu_ctrl* c = xg_ctrl(X);
  if (atomicCAS(&c->err_claim, 0u, 1u) == 0u) {
    /* Plain fields, then the code published after them: the host reads the code first. */
    volatile struct shunt_gpu_error* e = &X->k->fifo->error;
    e->what = what;
    e->rank = X->k->rank;
    e->block = X->block;
    e->thread = X->tid;
    e->op = X->op;
    e->chan_type = chan_type;
    e->peer = peer;
    e->ordinal = ordinal;
    e->awaited = awaited;
    e->seen = seen;
    e->where = where;
    xg_publish_u32(&X->k->fifo->error.code, s->aborted ? SHUNT_GPU_ERR_ABORTED : SHUNT_GPU_ERR_TIMEOUT);
  }
  /* Every rank polls its own word (a local read); a failure raises all of them. */
  const struct shunt_gpu_kargs* k = X->k;
  for (uint32_t r = 0; r < k->nranks; r++)
    xg_st_vol_u32((uint32_t*)(uintptr_t)(k->peers[r] + shunt_gpu_abort_offset(&k->lay)), 1u);
  __threadfence_system();
  xg_progress();
  return -1;
}

/* ---- Packets ------------------------------------------------------------------------------------ */

XG_FN uint64_t xg_scratch_where(const struct shunt_xctx* X, const char* p) {
  const char* s = X->scratch0;
  return (p >= s && p < s + X->k->lay.scratch_bytes) ? (uint64_t)(p - s) : (uint64_t)(uintptr_t)p;
}

SHUNT_XFN void xb_pkt_put(struct shunt_xctx* X, char* pkt, const char* data, uint64_t n) {
  if (X->ll8) {
    for (uint64_t i = 0; i < n / SHUNT_LL8_PAYLOAD; i++)
      shunt_ll8_put((struct shunt_ll8*)pkt + i, xg_ld32(data + SHUNT_LL8_PAYLOAD * i), X->flag);
  } else {
    for (uint64_t i = 0; i < n / SHUNT_LL16_PAYLOAD; i++)
      shunt_ll16_put((struct shunt_ll16*)pkt + i, xg_ld64(data + SHUNT_LL16_PAYLOAD * i), X->flag);
  }
  xg_progress();
}

/* Waits for packet i of pkt; its payload in *v (LL8: the low 32 bits). */
XG_FN int xg_pkt_wait(struct shunt_xctx* X, const char* pkt, uint64_t i, uint64_t* v) {
  struct xg_spin s = {0, 0, 0};
  if (X->ll8) {
    const struct shunt_ll8* p = (const struct shunt_ll8*)pkt + i;
    uint32_t u = 0;
    while (!shunt_ll8_try(p, X->flag, &u))
      if (!xg_spin_more(X, &s)) {
        uint64_t w;
        SHUNT_PKT_LOAD8(p, w);
        return xg_blocked(X, &s, SHUNT_GPU_WAIT_PACKET, 0, 0, 0, X->flag, shunt_pkt_word_flag(w),
                          xg_scratch_where(X, (const char*)p));
      }
    *v = u;
    return 0;
  }
  const struct shunt_ll16* p = (const struct shunt_ll16*)pkt + i;
  while (!shunt_ll16_try(p, X->flag, v))
    if (!xg_spin_more(X, &s)) {
      uint64_t lo, hi;
      SHUNT_PKT_LOAD16(p, lo, hi);
      uint32_t f = shunt_pkt_word_flag(lo) != X->flag ? shunt_pkt_word_flag(lo) : shunt_pkt_word_flag(hi);
      return xg_blocked(X, &s, SHUNT_GPU_WAIT_PACKET, 0, 0, 0, X->flag, f,
                        xg_scratch_where(X, (const char*)p));
    }
  return 0;
}

SHUNT_XFN int xb_pkt_get(struct shunt_xctx* X, char* data, const char* pkt, uint64_t n) {
  uint64_t pl = X->ll8 ? SHUNT_LL8_PAYLOAD : SHUNT_LL16_PAYLOAD;
  for (uint64_t i = 0; i < n / pl; i++) {
    uint64_t v = 0;
    if (xg_pkt_wait(X, pkt, i, &v)) return -1;
    if (X->ll8)
      xg_st32(data + pl * i, (uint32_t)v);
    else
      xg_st64(data + pl * i, v);
  }
  return 0;
}

SHUNT_XFN int xb_pkt_fwd(struct shunt_xctx* X, char* dst, const char* pkt, uint64_t n) {
  uint64_t pl = X->ll8 ? SHUNT_LL8_PAYLOAD : SHUNT_LL16_PAYLOAD;
  for (uint64_t i = 0; i < n / pl; i++) {
    uint64_t v = 0;
    if (xg_pkt_wait(X, pkt, i, &v)) return -1;
    /* The packet carries this execution's flag: writing (payload, flag) again is the packet. */
    if (X->ll8)
      shunt_ll8_put((struct shunt_ll8*)dst + i, (uint32_t)v, X->flag);
    else
      shunt_ll16_put((struct shunt_ll16*)dst + i, v, X->flag);
  }
  xg_progress();
  return 0;
}

/* ---- Channels ------------------------------------------------------------------------------------ */

SHUNT_XFN int xb_signal(struct shunt_xctx* X, const struct shunt_prog_chan* c, bool relaxed) {
  const struct shunt_gpu_kargs* k = X->k;
  uint64_t* s = (uint64_t*)(uintptr_t)(k->peers[c->peer] + k->lay.inbound) +
                shunt_gpu_sem_index(k->nranks, c->type, k->rank, c->ordinal);
  if (relaxed)
    xg_add_relaxed_sys(s, 1);
  else
    xg_add_release_sys(s, 1);
  xg_progress();
  return 0;
}

XG_FN int xg_wait_host(struct shunt_xctx* X, const struct shunt_prog_chan* c, uint64_t exp);

SHUNT_XFN int xb_wait(struct shunt_xctx* X, const struct shunt_prog_chan* c, bool relaxed) {
  const struct shunt_gpu_kargs* k = X->k;
  uint32_t i = shunt_gpu_sem_index(k->nranks, c->type, c->peer, c->ordinal);
  /* Several blocks may wait on one channel: each wait claims the next count. Only this rank's
   * kernel touches its expected counts, so device scope is enough. */
  unsigned long long* ex = (unsigned long long*)(k->region + k->lay.expected) + i;
  uint64_t exp = (uint64_t)atomicAdd(ex, 1ull) + 1;
  if (k->xin && c->type == SHUNT_CHAN_PORT && c->peer != k->rank &&
      k->peers[c->peer] == (uint64_t)(uintptr_t)k->region)
    return xg_wait_host(X, c, exp);
  const uint64_t* in = (const uint64_t*)(k->region + k->lay.inbound) + i;
  struct xg_spin s = {0, 0, 0};
  uint64_t v;
  while ((v = relaxed ? xg_ld_relaxed_sys(in) : xg_ld_acquire_sys(in)) < exp)
    if (!xg_spin_more(X, &s))
      return xg_blocked(X, &s, SHUNT_GPU_WAIT_SIGNAL, c->type, c->peer, c->ordinal, exp, v, 0);
  /* A relaxed wait orders what the peer's stream wrote before its kernel started (the kernel
   * boundary), nothing its kernel wrote: plans use it for the handshake before zero-copy reads. */
  if (relaxed) xg_launch_acquire(k->peers[c->peer]);
  return 0;
}

/* A port channel from a rank of another host whose arrivals the proxy hands on (TCP): the count
 * lives in mapped host memory, and the data the flag follows wait in the mirror until this wait
 * copies them into the region (the protocol in transport/gpu_fifo.h). Always an acquire: the
 * record and the mirror are read after the count. */
XG_FN int xg_wait_host(struct shunt_xctx* X, const struct shunt_prog_chan* c, uint64_t exp) {
  const struct shunt_gpu_kargs* k = X->k;
  struct shunt_gpu_xin_chan* ch = &k->xin[(size_t)c->peer * SHUNT_GPU_ORDINALS + c->ordinal];
  struct xg_spin s = {0, 0, 0};
  uint64_t v;
  while ((xg_pcie_read(), v = xg_ld_acquire_sys(&ch->count)) < exp)
    if (!xg_spin_more(X, &s))
      return xg_blocked(X, &s, SHUNT_GPU_WAIT_SIGNAL, c->type, c->peer, c->ordinal, exp, v, 0);
  const struct shunt_gpu_xin_rec* r = &ch->rec[exp % SHUNT_GPU_XIN_RECS];
  uint64_t n = xg_ld_vol_u64(&r->n);
  for (uint64_t i = 0; i < n && i < SHUNT_GPU_XIN_EXT; i++) {
    uint64_t off = xg_ld_vol_u64(&r->off[i]), bytes = xg_ld_vol_u64(&r->bytes[i]);
    for (uint64_t o = 0; o < bytes; o += SHUNT_GPU_BATCH)
      xb_copy(X, k->region + off + o, k->xin_data + off + o,
              bytes - o < SHUNT_GPU_BATCH ? bytes - o : SHUNT_GPU_BATCH);
  }
  /* The data in place before the wait completes: the plan's next ops read them there. */
  __threadfence();
  /* Lets the receiving thread reuse the record; racing waits may store a lower count, which
   * only makes it wait for a later one. */
  if (exp > xg_ld_vol_u64(&ch->copied)) xg_st_release_sys(&ch->copied, exp);
  return 0;
}

/* Whether this process maps the peer's memory (every rank of this host): a rank of another host
 * has this rank's own region as its entry of the peer table. */
SHUNT_XFN bool xb_port_direct(struct shunt_xctx* X, uint32_t peer) {
  const struct shunt_gpu_kargs* k = X->k;
  return peer == k->rank || k->peers[peer] != (uint64_t)(uintptr_t)k->region;
}

XG_FN char* xg_trig_src(const struct shunt_xctx* X, const struct shunt_trigger* t) {
  char* lb = t->src_buf == SHUNT_BUF_SCRATCH ? X->scratch0 : X->base[t->src_buf == SHUNT_BUF_OUTPUT ? 1 : 0];
  return lb + t->src_off;
}
XG_FN char* xg_trig_dst(const struct shunt_xctx* X, const struct shunt_trigger* t) {
  return xg_peer_buf(X, t->peer, t->dst_buf) + t->dst_off;
}

/* The data of a trigger to a peer this process maps, copied by the whole block (every thread
 * calls it): packets in whole 8-byte words, each landing at once, as a packet's reader needs. */
SHUNT_XFN void xb_port_copy(struct shunt_xctx* X, const struct shunt_trigger* t) {
  char* dst = xg_trig_dst(X, t);
  const char* src = xg_trig_src(X, t);
  if (t->type & SHUNT_TRIG_PACKETS) {
    for (uint64_t o = (uint64_t)X->tid * 8u; o + 8u <= t->size; o += (uint64_t)X->nthreads * 8u)
      xg_st_vol_u64((uint64_t*)(dst + o), xg_ld_vol_u64((const uint64_t*)(src + o)));
  } else {
    const uint64_t B = SHUNT_GPU_BATCH;
    for (uint64_t o = (uint64_t)X->tid * B; o < t->size; o += (uint64_t)X->nthreads * B)
      xb_copy(X, dst + o, src + o, t->size - o < B ? t->size - o : B);
  }
}

/* A trigger to a peer this process maps, once its data are there (xb_port_copy, then a block
 * barrier): the flag a system-scope release add on the peer's counter for (port, this rank,
 * ordinal), which only this rank writes, so the same count the proxy would have written; a
 * flush a system fence, since every copy before it is this block's own and done. */
XG_FN int xg_port_direct(struct shunt_xctx* X, const struct shunt_prog_chan* c,
                         const struct shunt_trigger* t) {
  const struct shunt_gpu_kargs* k = X->k;
  if (t->type & SHUNT_TRIG_FLAG) {
    uint64_t* s = (uint64_t*)(uintptr_t)(k->peers[t->peer] + k->lay.inbound) +
                  shunt_gpu_sem_index(k->nranks, SHUNT_CHAN_PORT, k->rank, c ? c->ordinal : t->ordinal);
    __threadfence_system();
    xg_add_release_sys(s, 1);
    xg_progress();
  }
  if (t->type & SHUNT_TRIG_SYNC) __threadfence_system();
  return 0;
}

/* Reserves the next FIFO position and waits until its slot is free (and, with stage, until
 * its staging chunk is: transport/gpu_fifo.h); the position, or ~0 when the wait gave up. */
XG_FN uint64_t xg_fifo_reserve(struct shunt_xctx* X, uint32_t peer, uint32_t ord, bool stage) {
  const struct shunt_gpu_kargs* k = X->k;
  struct shunt_gpu_fifo* f = k->fifo;
  struct shunt_gpu_ctrl* ctrl = xg_ctrl(X);
  uint64_t pos = (uint64_t)atomicAdd((unsigned long long*)&ctrl->fifo_head, 1ull);
  struct xg_spin s = {0, 0, 0};
  /* The device copy of the consumed count first: the host's is read across PCIe only while
   * the FIFO looks full. */
  uint64_t consumed = xg_ld_vol_u64(&ctrl->fifo_consumed);
  while (pos - consumed >= SHUNT_GPU_FIFO_SLOTS) {
    xg_pcie_read();
    consumed = xg_ld_acquire_sys(&f->consumed);
    if (pos - consumed < SHUNT_GPU_FIFO_SLOTS) {
      /* Racing stores of this copy may lower it: that costs a read, never a slot. */
      if (consumed > xg_ld_vol_u64(&ctrl->fifo_consumed)) xg_st_vol_u64(&ctrl->fifo_consumed, consumed);
      break;
    }
    if (!xg_spin_more(X, &s)) {
      xg_blocked(X, &s, SHUNT_GPU_WAIT_FIFO, SHUNT_CHAN_PORT, peer, ord, pos + 1 - SHUNT_GPU_FIFO_SLOTS,
                 consumed, pos);
      return ~0ull;
    }
  }
  uint64_t handled;
  while (stage &&
         (xg_pcie_read(), handled = xg_ld_acquire_sys(&f->handled), pos - handled >= SHUNT_GPU_XOUT_SLOTS))
    if (!xg_spin_more(X, &s)) {
      xg_blocked(X, &s, SHUNT_GPU_WAIT_FIFO, SHUNT_CHAN_PORT, peer, ord, pos + 1 - SHUNT_GPU_XOUT_SLOTS,
                 handled, pos);
      return ~0ull;
    }
  return pos;
}

/* Publishes the trigger at position pos. The slot lives in host memory: plain 8-byte stores,
 * then one system fence (which also orders a staged chunk's bytes before it), then the
 * sequence word the proxy polls. */
XG_FN void xg_fifo_publish(struct shunt_gpu_fifo* f, uint64_t pos, const struct shunt_trigger* t,
                           uint64_t src, uint64_t dst) {
  struct shunt_gpu_slot* slot = &f->slots[pos % SHUNT_GPU_FIFO_SLOTS];
  uint64_t tw[sizeof(struct shunt_trigger) / 8];
  memcpy(tw, t, sizeof(tw)); /* not through a uint64_t pointer: t is a struct shunt_trigger */
  volatile uint64_t* sw = (volatile uint64_t*)&slot->t;
  for (unsigned w = 0; w < sizeof(struct shunt_trigger) / 8; w++) sw[w] = tw[w];
  *(volatile uint64_t*)&slot->src_addr = src;
  *(volatile uint64_t*)&slot->dst_addr = dst;
  __threadfence_system();
  xg_st_release_sys(&slot->seq, pos + 1);
  xg_progress();
}

/* Pushes a trigger into the FIFO, for the proxy; with wait_done, waits until the proxy has
 * completed it (and everything before it). Data to a rank of another host (where the world has
 * outgoing staging) leave the device here: cut into pieces of a staging chunk, each copied by
 * this thread into the chunk of its position before it is published, so that the proxy sends
 * from host memory with no CUDA call (transport/gpu_fifo.h); the flag and SYNC ride on the
 * last piece. */
XG_FN int xg_port_push(struct shunt_xctx* X, const struct shunt_prog_chan* c, const struct shunt_trigger* t,
                       bool wait_done) {
  const struct shunt_gpu_kargs* k = X->k;
  struct shunt_gpu_fifo* f = k->fifo;
  struct shunt_gpu_ctrl* ctrl = xg_ctrl(X);
  uint32_t peer = c ? c->peer : t->peer, ord = c ? c->ordinal : t->ordinal;
  uint64_t pos;
  if ((t->type & SHUNT_TRIG_DATA) && t->size && k->xout) {
    const char* src = xg_trig_src(X, t);
    char* dst = xg_trig_dst(X, t);
    struct shunt_trigger piece = *t;
    for (uint64_t done = 0;;) {
      uint64_t n = t->size - done < SHUNT_GPU_XOUT_CHUNK ? t->size - done : SHUNT_GPU_XOUT_CHUNK;
      bool last = done + n == t->size;
      piece.size = n;
      piece.type = (uint8_t)(last ? t->type : t->type & (SHUNT_TRIG_DATA | SHUNT_TRIG_PACKETS));
      if ((pos = xg_fifo_reserve(X, peer, ord, true)) == ~0ull) return -1;
      char* chunk = k->xout + (size_t)(pos % SHUNT_GPU_XOUT_SLOTS) * SHUNT_GPU_XOUT_CHUNK;
      for (uint64_t o = 0; o < n; o += SHUNT_GPU_BATCH)
        xb_copy(X, chunk + o, src + done + o, n - o < SHUNT_GPU_BATCH ? n - o : SHUNT_GPU_BATCH);
      xg_fifo_publish(f, pos, &piece, (uint64_t)(uintptr_t)chunk, (uint64_t)(uintptr_t)(dst + done));
      done += n;
      if (last) break;
    }
  } else {
    if ((pos = xg_fifo_reserve(X, peer, ord, false)) == ~0ull) return -1;
    uint64_t src = 0, dst = 0;
    if (t->type & SHUNT_TRIG_DATA) {
      src = (uint64_t)(uintptr_t)xg_trig_src(X, t);
      dst = (uint64_t)(uintptr_t)xg_trig_dst(X, t);
    }
    xg_fifo_publish(f, pos, t, src, dst);
  }
  if (!wait_done) return 0;
  struct xg_spin s = {0, 0, 0};
  uint64_t d;
  while ((xg_pcie_read(), d = xg_ld_acquire_sys(&f->done)) <= pos)
    if (!xg_spin_more(X, &s))
      return xg_blocked(X, &s, SHUNT_GPU_WAIT_FLUSH, SHUNT_CHAN_PORT, peer, ord, pos + 1, d, pos);
  if (d > xg_ld_vol_u64(&ctrl->fifo_synced)) xg_st_vol_u64(&ctrl->fifo_synced, d);
  return 0;
}

/* Pushes a trigger; with wait_done, waits until it is complete (and everything before it). To a
 * peer this process maps, the data must already be there (xb_port_copy). */
SHUNT_XFN int xb_port(struct shunt_xctx* X, const struct shunt_prog_chan* c, const struct shunt_trigger* t,
                      bool wait_done) {
  if (xb_port_direct(X, t->peer)) return xg_port_direct(X, c, t);
  return xg_port_push(X, c, t, wait_done);
}

/* ---- Blocks and semaphores ---------------------------------------------------------------------- */

/* Every thread of the block calls it (exec_ops runs every op on every thread). Thread 0 arrives
 * at the rank's barrier counter; the whole block learns whether it gave up. */
SHUNT_XFN int xb_barrier(struct shunt_xctx* X, uint32_t id, uint32_t nblocks) {
  __syncthreads();
  int bad = 0;
  if (X->tid == 0) {
    unsigned long long* b = (unsigned long long*)&xg_ctrl(X)->bars[id % SHUNT_GPU_BARRIERS];
    __threadfence();
    uint64_t k = (uint64_t)atomicAdd(b, 1ull);
    xg_progress();
    uint64_t target = (k / nblocks + 1) * nblocks;
    struct xg_spin s = {0, 0, 0};
    uint64_t v;
    while ((v = xg_ld_vol_u64((const uint64_t*)b)) < target)
      if (!xg_spin_more(X, &s)) {
        bad = xg_blocked(X, &s, SHUNT_GPU_WAIT_BARRIER, 0, 0, id, target, v, nblocks);
        break;
      }
    __threadfence();
  }
  return __syncthreads_or(bad) ? -1 : 0;
}

SHUNT_XFN int xb_sem_acquire(struct shunt_xctx* X, uint32_t id) {
  long long* s = X->k->sems + id;
  long long old = (long long)atomicAdd((unsigned long long*)s, ~0ull); /* - 1 */
  __threadfence();
  if (old > 0) return 0;
  struct xg_spin sp = {0, 0, 0};
  long long v;
  while ((v = xg_ld_vol_i64(s)) < old)
    if (!xg_spin_more(X, &sp))
      return xg_blocked(X, &sp, SHUNT_GPU_WAIT_SEMAPHORE, 0, 0, id, (uint64_t)old, (uint64_t)v, 0);
  __threadfence();
  return 0;
}

SHUNT_XFN void xb_sem_release(struct shunt_xctx* X, uint32_t id) {
  __threadfence();
  atomicAdd((unsigned long long*)(X->k->sems + id), 1ull);
  xg_progress();
}

#include "exec/exec_ops.h"

#endif
