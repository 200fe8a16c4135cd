/* Races across ranks between thread-block slices and the signals that order them.
 *
 * A threadblock that reads a peer's buffer (a remote source: rre, rres, get, ...) relies on
 * the peer having published the bytes it reads: the peer block that wrote them signals after
 * the write, and this block waits on the channel paired with that signal before it reads.
 * Thread-block groups slice each op's bytes on their own (docs/plan-format.md §4.2), so the peer
 * block that wrote a slice need not be the one this block waited on: then the read races
 * with the write. Reported: a remote read overlapping bytes that a peer block writes (a local
 * destination of one of its ops) and then signals to this rank, when this block has not
 * waited on that signal (as many times as the peer signalled by then) before the read.
 *
 * Only what can be told for certain is reported: the analysis stops, for a block, at a
 * pipeline, a device-wide barrier or a semaphore (orderings it does not follow), and packet
 * reads are never reported (packet flags order them). Slices are compared as fractions of
 * chunks; touching slices do not overlap. */
#include <stdio.h>

#include "plan/check_internal.h"

/* The part [lo, hi) of a buffer entry, in chunks, that an op's slice covers. */
static void slice(const struct shunt_plan_op* o, const struct shunt_plan_ref* r, double* lo, double* hi) {
  double base = r->index, len = r->size;
  if (o->has_tbg && o->tbg_size > 1 && o->tbg_id < o->tbg_size) {
    *lo = base + len * o->tbg_id / o->tbg_size;
    *hi = base + len * (o->tbg_id + 1) / o->tbg_size;
  } else {
    *lo = base;
    *hi = base + len;
  }
}

static bool overlaps(double alo, double ahi, double blo, double bhi) {
  const double eps = 1e-9;
  return alo < bhi - eps && blo < ahi - eps;
}

/* Ops after which the analysis of a block stops: orderings it does not model. */
static bool opaque(const struct shunt_plan_op* o) {
  return o->type == SHUNT_OP_PIPELINE || o->type == SHUNT_OP_SEM_ACQUIRE || o->type == SHUNT_OP_SEM_RELEASE ||
         (o->type == SHUNT_OP_BARRIER && o->num_threadblocks > 1);
}

static bool publishes(const struct shunt_plan_op* o) {
  return o->type == SHUNT_OP_SIGNAL || o->type == SHUNT_OP_RLXSIGNAL || o->type == SHUNT_OP_PWS ||
         o->type == SHUNT_OP_PWSF;
}

static bool waits(const struct shunt_plan_op* o) {
  return o->type == SHUNT_OP_WAIT || o->type == SHUNT_OP_RLXWAIT;
}

/* How many times the ops [0, upto) of block `tb` that match `kind` (waits, or publishing ops)
 * name its global channel `ch` of type `t`. */
static uint32_t uses_of(const struct shunt_plan_threadblock* tb, bool (*kind)(const struct shunt_plan_op*),
                        enum shunt_chan_type t, int32_t ch, uint32_t upto) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < upto && i < tb->nops; i++) {
    const struct shunt_plan_op* o = &tb->ops[i];
    if (!kind(o) || o->channel_type != t) continue;
    for (uint32_t k = 0; k < o->nchannel_ids; k++) n += o->channel_global[k] == ch;
  }
  return n;
}

/* R's global channel of type t paired with P's channel `pc` (P's k-th to R pairs with R's
 * k-th to P), or -1. */
static int32_t paired(const struct shunt_plan_gpu* R, uint32_t p, enum shunt_chan_type t,
                      const struct shunt_plan_channel* pc) {
  for (uint32_t i = 0; i < R->nchannels[t]; i++)
    if (R->channels[t][i].peer == (int32_t)p && R->channels[t][i].peer_ordinal == pc->peer_ordinal)
      return (int32_t)i;
  return -1;
}

/* Whether block `rb` of rank r, before its op `at->i`, has waited for every signal that
 * peer block `w` of rank p sends to r up to (and including) the first one after p's op `wi`.
 * Sets *published to whether w signals r at all after that op. */
static bool waited_for(const struct shunt_plan* pl, uint32_t r, const struct shunt_plan_threadblock* rb,
                       uint32_t upto, uint32_t p, const struct shunt_plan_threadblock* w, uint32_t wi,
                       bool* published) {
  const struct shunt_plan_gpu* P = &pl->gpus[p];
  const struct shunt_plan_gpu* R = &pl->gpus[r];
  *published = false;
  for (uint32_t i = wi + 1; i < w->nops; i++) {
    const struct shunt_plan_op* o = &w->ops[i];
    if (opaque(o)) return true; /* not modelled: assume ordered */
    if (!publishes(o) || (o->channel_type != SHUNT_CHAN_MEMORY && o->channel_type != SHUNT_CHAN_PORT))
      continue;
    for (uint32_t k = 0; k < o->nchannel_ids; k++) {
      int32_t g = o->channel_global[k];
      if (g < 0 || (uint32_t)g >= P->nchannels[o->channel_type]) continue;
      const struct shunt_plan_channel* pc = &P->channels[o->channel_type][g];
      if (pc->peer != (int32_t)r) continue;
      *published = true;
      /* This block must have waited as often as w signalled on the pair, this op included. */
      uint32_t nsig = uses_of(w, publishes, o->channel_type, g, i + 1);
      int32_t rc = paired(R, p, o->channel_type, pc);
      if (rc >= 0 && uses_of(rb, waits, o->channel_type, rc, upto) >= nsig) return true;
    }
    /* The first publishing op to r is the one that orders the write. */
    if (*published) return false;
  }
  return false;
}

/* A read of peer p's buffer `type` over [lo, hi) by block rb of rank r at op `ri`. */
static void check_read(struct cctx* c, const struct oppos* at, const char* sfx, uint32_t p,
                       enum shunt_buf_type type, double lo, double hi) {
  const struct shunt_plan* pl = c->p;
  const struct shunt_plan_threadblock* rb = &pl->gpus[at->r].threadblocks[at->b];
  /* Only reads this block orders by waits on p at all: other plans publish otherwise. */
  bool waited_on_p = false;
  for (uint32_t i = 0; i < at->i && !waited_on_p; i++) {
    const struct shunt_plan_op* o = &rb->ops[i];
    if (!waits(o) || (o->channel_type != SHUNT_CHAN_MEMORY && o->channel_type != SHUNT_CHAN_PORT)) continue;
    for (uint32_t k = 0; k < o->nchannel_ids; k++) {
      int32_t g = o->channel_global[k];
      const struct shunt_plan_gpu* R = &pl->gpus[at->r];
      if (g >= 0 && (uint32_t)g < R->nchannels[o->channel_type] &&
          R->channels[o->channel_type][g].peer == (int32_t)p)
        waited_on_p = true;
    }
  }
  if (!waited_on_p) return;
  const struct shunt_plan_gpu* P = &pl->gpus[p];
  for (uint32_t wb = 0; wb < P->nthreadblocks; wb++) {
    const struct shunt_plan_threadblock* w = &P->threadblocks[wb];
    for (uint32_t wi = 0; wi < w->nops; wi++) {
      const struct shunt_plan_op* o = &w->ops[wi];
      if (opaque(o)) break;
      if (shunt_op_is_sync(o->type) || shunt_op_is_packet(o->type)) continue;
      for (uint32_t d = 0; d < o->ndst; d++) {
        const struct shunt_plan_ref* dr = &o->dst[d];
        if (dr->kind != SHUNT_REF_LOCAL || dr->type != type) continue;
        double wlo, whi;
        slice(o, dr, &wlo, &whi);
        if (!overlaps(lo, hi, wlo, whi)) continue;
        bool published;
        if (waited_for(pl, at->r, rb, at->i, p, w, wi, &published) || !published) continue;
        operr(c, at, sfx,
              "race: reads rank %u's %s chunks [%g, %g) that its threadblock %u writes (ops[%u]) and "
              "publishes with a signal this threadblock does not wait for first",
              p, shunt_buf_type_name(type), lo > wlo ? lo : wlo, hi < whi ? hi : whi, wb, wi);
        return;
      }
    }
  }
}

void check_cross_races(struct cctx* c) {
  const struct shunt_plan* pl = c->p;
  for (uint32_t r = 0; r < pl->ngpus; r++)
    for (uint32_t b = 0; b < pl->gpus[r].nthreadblocks; b++) {
      const struct shunt_plan_threadblock* tb = &pl->gpus[r].threadblocks[b];
      if (tb->nops_flat > SHUNT_PLAN_MAX_OPS_PER_BLOCK) continue;
      for (uint32_t i = 0; i < tb->nops; i++) {
        const struct shunt_plan_op* o = &tb->ops[i];
        if (opaque(o)) break;
        if (shunt_op_is_sync(o->type) || shunt_op_is_packet(o->type)) continue;
        for (uint32_t s = 0; s < o->nsrc; s++) {
          const struct shunt_plan_ref* sr = &o->src[s];
          if (sr->kind != SHUNT_REF_REMOTE || sr->global < 0 || sr->peer < 0 ||
              (uint32_t)sr->peer >= pl->ngpus)
            continue;
          double lo, hi;
          slice(o, sr, &lo, &hi);
          struct oppos at = {r, b, i, -1};
          char sfx[32];
          snprintf(sfx, sizeof(sfx), ".src_buff[%u]", s);
          check_read(c, &at, sfx, (uint32_t)sr->peer, sr->type, lo, hi);
        }
      }
    }
}
