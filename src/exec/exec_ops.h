/* The meaning of every op (docs/plan-format.md §5.3-§5.4, §7), written once for both backends.
 *
 * A backend includes this file after defining:
 *   SHUNT_XFN                 function qualifiers ("static inline", or with __device__)
 *   struct shunt_xctx         its per-thread context, with at least the fields
 *                             prog, block, tid, nthreads, op (index in the block, set here)
 *   and these primitives (all return 0, or -1 after recording why the thread is blocked):
 *   xb_addr(X, ref, member, win)     address of a reference (+ window offset win); member
 *                                    picks a rank of a multicast group (else ignored); the
 *                                    double-scratch half is added for every scratch access
 *   xb_rel(X, ref, win)              offset of a reference from its buffer's base, half
 *                                    included (what a port trigger carries)
 *   xb_switch_n(X, ref)              members of a multicast reference's group
 *   xb_copy(X, dst, src, n)          this thread's share is the whole range given
 *   xb_reduce(X, dst, src, n)        dst = dst (+) src in the call's dtype and op
 *   xb_pkt_put(X, pkt, data, n)      write n data bytes as packets stamped with the flag
 *   xb_pkt_get(X, data, pkt, n)      wait for n data bytes of packets, store the payload
 *   xb_pkt_fwd(X, dst, pkt, n)       wait for packets, copy them as they are
 *   xb_batch(X)                      bytes one thread handles per step (multiple of 16)
 *   xb_tmp(X, k)                     per-thread temporary of xb_batch bytes, k in 0..1
 *   xb_block_sync(X), xb_barrier(X, id, nblocks)
 *   xb_data_before_packets(X)        this thread's data stores are seen by any thread before
 *                                    its packet stores that follow
 *   xb_signal(X, chan, relaxed), xb_wait(X, chan, relaxed)
 *   xb_port(X, chan, trigger, wait_done)   push a trigger; wait for its completion if asked
 *   xb_port_direct(X, peer)          whether port ops to that peer move the data in the
 *                                    kernel: then every thread calls xb_port_copy(X, trigger)
 *                                    for the data, the block syncs, and xb_port gets the
 *                                    trigger without DATA (the flag, the flush)
 *   xb_sem_acquire(X, id), xb_sem_release(X, id)
 *   xb_aliased(X)                    the call is in place: every rank's input is a view into
 *                                    its output (SHUNT_PROG_IN_VIEW), xb_addr places peers'
 *                                    inputs there, and a trigger names the output (reducescatter,
 *                                    SHUNT_PROG_OUT_IN_INPUT: the output a view into the input,
 *                                    SHUNT_PROG_OUT_VIEW, and a trigger names the input)
 * Data ops split their bytes into xb_batch pieces handed round-robin to the block's threads;
 * per-channel and per-semaphore ops use threads 0..n-1, as the reference does. */
#ifndef SHUNT_EXEC_EXEC_OPS_H
#define SHUNT_EXEC_EXEC_OPS_H

#include "exec/program.h"
#include "plan/plan.h"
#include "transport/trigger.h"

#define SHUNT_WIN_ALL (~(uint64_t)0)

/* Ops that honour the pipeline window (§5.4). */
SHUNT_XFN bool shunt_x_piped(unsigned t) {
  switch (t) {
    case SHUNT_OP_PUT:
    case SHUNT_OP_PWS:
    case SHUNT_OP_PWSF:
    case SHUNT_OP_GET:
    case SHUNT_OP_COPY:
    case SHUNT_OP_RE:
    case SHUNT_OP_RES:
    case SHUNT_OP_RRE:
    case SHUNT_OP_RRES:
    case SHUNT_OP_GLRES:
    case SHUNT_OP_GSTORE:
      return true;
    default:
      return false;
  }
}

/* Bytes of a reference inside the window (off, unit): min(bytes - off, unit). */
SHUNT_XFN uint64_t shunt_x_len(const struct shunt_prog_ref* r, uint64_t off, uint64_t unit) {
  if (r->bytes <= off) return 0;
  uint64_t n = r->bytes - off;
  return n < unit ? n : unit;
}

/* A memory-channel put, a get and a local copy are one move: dst_i <- src_i (or src_0 when there
 * is one source for many dsts), plain loads and stores by the block's threads; a put's size is
 * its destination's, a get's and a copy's their source's. */
SHUNT_XFN int shunt_x_mem_puts(struct shunt_xctx* X, const struct shunt_prog_ref* r, unsigned nsrc,
                               unsigned ndst, bool size_from_src, uint64_t off, uint64_t unit) {
  uint64_t B = xb_batch(X);
  for (unsigned i = 0; i < ndst; i++) {
    const struct shunt_prog_ref* s = &r[nsrc > i ? i : 0];
    const struct shunt_prog_ref* d = &r[nsrc + i];
    uint64_t n = shunt_x_len(size_from_src ? s : d, off, unit);
    if (d->kind == SHUNT_PREF_SWITCH) return -1;
    char* dp = xb_addr(X, d, 0, off);
    const char* sp = xb_addr(X, s, 0, off);
    for (uint64_t o = (uint64_t)X->tid * B; o < n; o += (uint64_t)X->nthreads * B)
      xb_copy(X, dp + o, sp + o, n - o < B ? n - o : B);
  }
  return 0;
}

/* The trigger of a port put op's destination i. */
SHUNT_XFN void shunt_x_port_trigger(struct shunt_xctx* X, const struct shunt_prog_op* o,
                                    const struct shunt_prog_ref* r, const struct shunt_prog_chan* c,
                                    unsigned type, uint64_t off, uint64_t unit, unsigned i,
                                    struct shunt_trigger* out) {
  bool pkt = o->type == SHUNT_OP_PPKT || o->type == SHUNT_OP_RPPKT;
  const struct shunt_prog_ref* s = &r[o->nsrc > i ? i : 0];
  const struct shunt_prog_ref* d = &r[o->nsrc + i];
  struct shunt_trigger t;
  t.type = (uint8_t)(type | (pkt ? SHUNT_TRIG_PACKETS : 0));
  t.peer = d->slot;
  t.ordinal = i < o->nchan ? c[i].ordinal : 0;
  t.src_buf = s->buf;
  t.dst_buf = d->buf;
  t.pad_ = 0;
  /* Offsets relative to the buffers' bases: the backend adds the half for scratch. */
  t.src_off = xb_rel(X, s, pkt ? 0 : off);
  t.dst_off = xb_rel(X, d, pkt ? 0 : off);
  if (xb_aliased(X) && SHUNT_PROG_OUT_IN_INPUT(X->prog)) {
    /* Reducescatter: the peer's output is a view into its input. */
    if (t.dst_buf == SHUNT_BUF_OUTPUT) {
      t.dst_buf = SHUNT_BUF_INPUT;
      t.dst_off += SHUNT_PROG_OUT_VIEW(X->prog, t.peer);
    }
  } else if (t.dst_buf == SHUNT_BUF_INPUT && xb_aliased(X)) {
    /* The peer's input is a view into its output. */
    t.dst_buf = SHUNT_BUF_OUTPUT;
    t.dst_off += SHUNT_PROG_IN_VIEW(X->prog, t.peer);
  }
  t.size = pkt ? 2 * d->bytes : shunt_x_len(d, off, unit);
  *out = t;
}

/* Port put family. To peers whose memory the backend reaches itself (xb_port_direct) the whole
 * block copies the data, then syncs; then thread i < ndst hands its destination's trigger to
 * xb_port (without DATA where the block copied it). */
SHUNT_XFN int shunt_x_port_puts(struct shunt_xctx* X, const struct shunt_prog_op* o,
                                const struct shunt_prog_ref* r, const struct shunt_prog_chan* c,
                                unsigned type, uint64_t off, uint64_t unit) {
  struct shunt_trigger t;
  bool copied = false;
  for (unsigned i = 0; i < o->ndst; i++)
    if (xb_port_direct(X, r[o->nsrc + i].slot) && (type & SHUNT_TRIG_DATA)) {
      shunt_x_port_trigger(X, o, r, c, type, off, unit, i, &t);
      xb_port_copy(X, &t);
      copied = true;
    }
  if (copied) xb_block_sync(X);
  for (unsigned i = X->tid; i < o->ndst; i += X->nthreads) {
    shunt_x_port_trigger(X, o, r, c, type, off, unit, i, &t);
    if (xb_port_direct(X, t.peer)) t.type = (uint8_t)(t.type & ~SHUNT_TRIG_DATA);
    if (xb_port(X, i < o->nchan ? &c[i] : 0, &t, (type & SHUNT_TRIG_SYNC) != 0)) return -1;
  }
  return 0;
}

/* Reductions: res = src_0 (+) src_1.. (data, remote data or packets), then store it as data
 * to dst_0 and to data destinations, or as packets to packet destinations. */
SHUNT_XFN int shunt_x_reduce(struct shunt_xctx* X, const struct shunt_prog_op* o,
                             const struct shunt_prog_ref* r, uint64_t off, uint64_t unit) {
  uint64_t B = xb_batch(X);
  const struct shunt_prog_ref* dst = &r[o->nsrc];
  uint64_t n = shunt_x_len(&dst[0], off, unit);
  char* acc = xb_tmp(X, 0);
  char* in = xb_tmp(X, 1);
  for (uint64_t at = (uint64_t)X->tid * B; at < n; at += (uint64_t)X->nthreads * B) {
    uint64_t m = n - at < B ? n - at : B;
    for (unsigned i = 0; i < o->nsrc; i++) {
      const struct shunt_prog_ref* s = &r[i];
      char* into = i == 0 ? acc : in;
      if (s->flags & SHUNT_PREF_PACKETS) {
        if (xb_pkt_get(X, into, xb_addr(X, s, 0, 2 * at), m)) return -1;
      } else {
        xb_copy(X, into, xb_addr(X, s, 0, off + at), m);
      }
      if (i) xb_reduce(X, acc, in, m);
    }
    /* Data first, then packets: a thread that sees a packet's flag may rely on the data this
     * thread stored before it (the race check's LL-flag ordering, plan/check_race.c), which
     * on a GPU takes a fence between the two. */
    bool data = false;
    for (unsigned i = 0; i < o->ndst; i++)
      if (!(dst[i].flags & SHUNT_PREF_PACKETS)) {
        xb_copy(X, xb_addr(X, &dst[i], 0, off + at), acc, m);
        data = true;
      }
    for (unsigned i = 0, fenced = 0; i < o->ndst; i++)
      if (dst[i].flags & SHUNT_PREF_PACKETS) {
        if (data && !fenced++) xb_data_before_packets(X);
        xb_pkt_put(X, xb_addr(X, &dst[i], 0, 2 * at), acc, m);
      }
  }
  return 0;
}

/* Multicast (switch channel) ops, emulated over the group's buffers: glres reduces every
 * member's source range and stores the result to every member; gstore stores local data to
 * every member; gstorepkt forwards local packets to every member. */
SHUNT_XFN int shunt_x_multicast(struct shunt_xctx* X, const struct shunt_prog_op* o,
                                const struct shunt_prog_ref* r, uint64_t off, uint64_t unit) {
  uint64_t B = xb_batch(X);
  const struct shunt_prog_ref* s = &r[0];
  const struct shunt_prog_ref* d = &r[o->nsrc];
  unsigned nm = xb_switch_n(X, d);
  if (o->type == SHUNT_OP_GSTOREPKT) {
    uint64_t n = s->bytes;
    for (uint64_t at = (uint64_t)X->tid * B; at < n; at += (uint64_t)X->nthreads * B) {
      uint64_t m = n - at < B ? n - at : B;
      for (unsigned k = 0; k < nm; k++)
        if (xb_pkt_fwd(X, xb_addr(X, d, k, 2 * at), xb_addr(X, s, 0, 2 * at), m)) return -1;
    }
    return 0;
  }
  uint64_t n = shunt_x_len(o->type == SHUNT_OP_GLRES ? d : s, off, unit);
  char* acc = xb_tmp(X, 0);
  char* in = xb_tmp(X, 1);
  for (uint64_t at = (uint64_t)X->tid * B; at < n; at += (uint64_t)X->nthreads * B) {
    uint64_t m = n - at < B ? n - at : B;
    if (o->type == SHUNT_OP_GLRES) {
      unsigned ns = xb_switch_n(X, s);
      for (unsigned k = 0; k < ns; k++) {
        xb_copy(X, k ? in : acc, xb_addr(X, s, k, off + at), m);
        if (k) xb_reduce(X, acc, in, m);
      }
    } else {
      xb_copy(X, acc, xb_addr(X, s, 0, off + at), m);
    }
    for (unsigned k = 0; k < nm; k++) xb_copy(X, xb_addr(X, d, k, off + at), acc, m);
  }
  return 0;
}

/* Packet ops without reduction. */
SHUNT_XFN int shunt_x_packets(struct shunt_xctx* X, const struct shunt_prog_op* o,
                              const struct shunt_prog_ref* r, const struct shunt_prog_chan* c) {
  uint64_t B = xb_batch(X);
  const struct shunt_prog_ref* dst = &r[o->nsrc];
  switch (o->type) {
    case SHUNT_OP_CPKT:
    case SHUNT_OP_UPKT: {
      uint64_t n = r[0].bytes;
      for (uint64_t at = (uint64_t)X->tid * B; at < n; at += (uint64_t)X->nthreads * B) {
        uint64_t m = n - at < B ? n - at : B;
        if (o->type == SHUNT_OP_CPKT)
          xb_pkt_put(X, xb_addr(X, &dst[0], 0, 2 * at), xb_addr(X, &r[0], 0, at), m);
        else if (xb_pkt_get(X, xb_addr(X, &dst[0], 0, at), xb_addr(X, &r[0], 0, 2 * at), m))
          return -1;
      }
      return 0;
    }
    case SHUNT_OP_PPKT:
      if (o->chan_type == SHUNT_CHAN_PORT)
        return shunt_x_port_puts(X, o, r, c, SHUNT_TRIG_DATA, 0, SHUNT_WIN_ALL);
      for (unsigned i = 0; i < o->ndst; i++) {
        const struct shunt_prog_ref* s = &r[o->nsrc > i ? i : 0];
        uint64_t n = dst[i].bytes;
        for (uint64_t at = (uint64_t)X->tid * B; at < n; at += (uint64_t)X->nthreads * B) {
          uint64_t m = n - at < B ? n - at : B;
          xb_pkt_put(X, xb_addr(X, &dst[i], 0, 2 * at), xb_addr(X, s, 0, at), m);
        }
      }
      return 0;
    case SHUNT_OP_RPPKT: {
      uint64_t n = r[0].bytes;
      if (o->chan_type == SHUNT_CHAN_PORT) {
        /* Every local packet must carry the flag before the proxy copies the region. */
        for (uint64_t at = (uint64_t)X->tid * B; at < n; at += (uint64_t)X->nthreads * B)
          if (xb_pkt_get(X, xb_tmp(X, 0), xb_addr(X, &r[0], 0, 2 * at), n - at < B ? n - at : B)) return -1;
        xb_block_sync(X);
        return shunt_x_port_puts(X, o, r, c, SHUNT_TRIG_DATA, 0, SHUNT_WIN_ALL);
      }
      for (uint64_t at = (uint64_t)X->tid * B; at < n; at += (uint64_t)X->nthreads * B) {
        uint64_t m = n - at < B ? n - at : B;
        for (unsigned i = 0; i < o->ndst; i++)
          if (xb_pkt_fwd(X, xb_addr(X, &dst[i], 0, 2 * at), xb_addr(X, &r[0], 0, 2 * at), m)) return -1;
      }
      return 0;
    }
    default:
      return 0;
  }
}

/* One op with the pipeline window (off, unit); (0, SHUNT_WIN_ALL) outside pipelines. */
SHUNT_XFN int shunt_x_op(struct shunt_xctx* X, const struct shunt_prog_op* o, uint64_t off, uint64_t unit) {
  const struct shunt_program* P = X->prog;
  const struct shunt_prog_ref* r = shunt_prog_refs(P) + o->ref;
  const struct shunt_prog_chan* c = shunt_prog_chans(P) + o->chan;
  const uint32_t* sem = shunt_prog_u32(P) + o->chan;
  bool port = o->chan_type == SHUNT_CHAN_PORT;
  switch ((enum shunt_op_type)o->type) {
    case SHUNT_OP_NOP:
      xb_block_sync(X);
      return 0;
    case SHUNT_OP_BARRIER:
      if (o->b > 1) return xb_barrier(X, o->a, o->b);
      xb_block_sync(X);
      return 0;
    case SHUNT_OP_SIGNAL:
    case SHUNT_OP_RLXSIGNAL:
      for (unsigned i = X->tid; i < o->nchan; i += X->nthreads) {
        if (c[i].type == SHUNT_CHAN_PORT) {
          struct shunt_trigger t = {0, 0, 0, c[i].peer, c[i].ordinal, SHUNT_TRIG_FLAG, 0, 0, 0};
          if (xb_port(X, &c[i], &t, false)) return -1;
        } else if (xb_signal(X, &c[i], o->type == SHUNT_OP_RLXSIGNAL)) {
          return -1;
        }
      }
      return 0;
    case SHUNT_OP_WAIT:
    case SHUNT_OP_RLXWAIT:
      for (unsigned i = X->tid; i < o->nchan; i += X->nthreads)
        if (xb_wait(X, &c[i], o->type == SHUNT_OP_RLXWAIT)) return -1;
      return 0;
    case SHUNT_OP_FLUSH:
      for (unsigned i = X->tid; i < o->nchan; i += X->nthreads) {
        struct shunt_trigger t = {0, 0, 0, c[i].peer, c[i].ordinal, SHUNT_TRIG_SYNC, 0, 0, 0};
        if (xb_port(X, &c[i], &t, true)) return -1;
      }
      return 0;
    case SHUNT_OP_PUT:
      if (port) return shunt_x_port_puts(X, o, r, c, SHUNT_TRIG_DATA, off, unit);
      return shunt_x_mem_puts(X, r, o->nsrc, o->ndst, false, off, unit);
    case SHUNT_OP_PWS: /* port put with signal */
      return shunt_x_port_puts(X, o, r, c, SHUNT_TRIG_DATA | SHUNT_TRIG_FLAG, off, unit);
    case SHUNT_OP_PWSF: /* port put with signal and flush */
      return shunt_x_port_puts(X, o, r, c, SHUNT_TRIG_DATA | SHUNT_TRIG_FLAG | SHUNT_TRIG_SYNC, off, unit);
    case SHUNT_OP_GET:
      return shunt_x_mem_puts(X, r, o->nsrc, o->ndst, true, off, unit);
    case SHUNT_OP_COPY:
      return shunt_x_mem_puts(X, r, 1, 1, true, off, unit);
    case SHUNT_OP_RE:      /* reduce: dst0 = src0 (+) src1 ... */
    case SHUNT_OP_RES:     /* reduce, then store the result to remote dsts */
    case SHUNT_OP_RRE:     /* reduce with remote sources */
    case SHUNT_OP_RRES:    /* reduce with remote sources, store to remote dsts */
    case SHUNT_OP_REPKT:   /* reduce packets into data */
    case SHUNT_OP_RESPKT:  /* reduce packets, send the result as packets to remotes */
    case SHUNT_OP_RECPKT:  /* reduce packets, keep the result as local packets too */
    case SHUNT_OP_RECSPKT: /* reduce packets, keep local packets and send to remotes */
      return shunt_x_reduce(X, o, r, off, unit);
    case SHUNT_OP_CPKT:  /* copy data into local packets */
    case SHUNT_OP_UPKT:  /* unpack local packets into data */
    case SHUNT_OP_PPKT:  /* put data as packets into remotes */
    case SHUNT_OP_RPPKT: /* forward local packets to remotes as they are */
      return shunt_x_packets(X, o, r, c);
    case SHUNT_OP_GLRES:     /* multicast load-reduce-store */
    case SHUNT_OP_GSTORE:    /* multicast store */
    case SHUNT_OP_GSTOREPKT: /* multicast store of packets */
      return shunt_x_multicast(X, o, r, off, unit);
    case SHUNT_OP_SEM_ACQUIRE:
      for (unsigned i = X->tid; i < o->nsem; i += X->nthreads)
        if (xb_sem_acquire(X, sem[i])) return -1;
      return 0;
    case SHUNT_OP_SEM_RELEASE:
      for (unsigned i = X->tid; i < o->nsem; i += X->nthreads) xb_sem_release(X, sem[i]);
      return 0;
    case SHUNT_OP_PIPELINE:
    case SHUNT_OP_COUNT:
      return 0;
  }
  return 0;
}

/* Runs one threadblock's ops in order; -1 when a primitive gave up (timeout). */
SHUNT_XFN int shunt_x_block(struct shunt_xctx* X) {
  const struct shunt_prog_block* b = &shunt_prog_blocks(X->prog)[X->block];
  const struct shunt_prog_op* ops = shunt_prog_ops(X->prog) + b->first_op;
  for (uint32_t i = 0; i < b->nops;) {
    const struct shunt_prog_op* o = &ops[i];
    if (o->type == SHUNT_OP_PIPELINE) {
      for (uint32_t it = 0; it < o->a; it++)
        for (uint32_t j = 1; j <= o->b && i + j < b->nops; j++) {
          const struct shunt_prog_op* in = &ops[i + j];
          X->op = i + j;
          bool piped = shunt_x_piped(in->type);
          if (shunt_x_op(X, in, piped ? (uint64_t)it * o->unit : 0, piped ? o->unit : SHUNT_WIN_ALL))
            return -1;
        }
      i += o->b + 1;
    } else {
      X->op = i;
      if (shunt_x_op(X, o, 0, SHUNT_WIN_ALL)) return -1;
      i++;
    }
  }
  return 0;
}

#endif
