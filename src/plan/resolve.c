/* Derived fields of a parsed plan: channel ordinals per peer, per-type remote-buffer
 * numbering, and op references resolved through the threadblock tables. Out-of-range
 * indices resolve to -1; the checks report them. */
#include <stdlib.h>

#include "plan/parse_internal.h"

static void resolve_op(const struct shunt_plan_gpu* g, const struct shunt_plan_threadblock* tb,
                       struct shunt_plan_op* o, enum shunt_plan_redop* redop) {
  if (o->reduce_op > SHUNT_PLAN_REDOP_SUM && *redop <= SHUNT_PLAN_REDOP_SUM) *redop = o->reduce_op;
  if (o->reduce_op == SHUNT_PLAN_REDOP_SUM && *redop == SHUNT_PLAN_REDOP_NONE) *redop = SHUNT_PLAN_REDOP_SUM;
  enum shunt_chan_type ct = o->channel_type;
  for (uint32_t i = 0; i < o->nchannel_ids; i++) {
    o->channel_global[i] = -1;
    if (ct == SHUNT_CHAN_NONE) continue;
    const struct shunt_plan_table* t = &tb->channels[ct];
    if (o->channel_ids[i] < t->n && t->ids[o->channel_ids[i]] < g->nchannels[ct])
      o->channel_global[i] = (int32_t)t->ids[o->channel_ids[i]];
  }
  for (int side = 0; side < 2; side++) {
    uint32_t n = side ? o->ndst : o->nsrc;
    struct shunt_plan_ref* refs = side ? o->dst : o->src;
    for (uint32_t i = 0; i < n; i++) {
      struct shunt_plan_ref* r = &refs[i];
      r->global = -1;
      r->peer = -1;
      if (r->kind == SHUNT_REF_REMOTE && (ct == SHUNT_CHAN_MEMORY || ct == SHUNT_CHAN_PORT)) {
        const struct shunt_plan_table* t = &tb->remote_refs[ct];
        if (r->id < t->n && t->ids[r->id] < g->nremote_buffers) {
          const struct shunt_plan_remote_buffer* rb = &g->remote_buffers[t->ids[r->id]];
          r->global = (int32_t)t->ids[r->id];
          r->peer = rb->rank;
          r->type = rb->type;
        }
      } else if (r->kind == SHUNT_REF_SWITCH) {
        const struct shunt_plan_table* t = &tb->channels[SHUNT_CHAN_SWITCH];
        if (r->id < t->n && t->ids[r->id] < g->nchannels[SHUNT_CHAN_SWITCH]) {
          r->global = (int32_t)t->ids[r->id];
          r->type = g->channels[SHUNT_CHAN_SWITCH][r->global].buffer_type;
        }
      }
    }
  }
  for (uint32_t i = 0; i < o->nops; i++) resolve_op(g, tb, &o->ops[i], redop);
}

static uint32_t uf_find(uint32_t* up, uint32_t x) {
  while (up[x] != x) x = up[x] = up[up[x]];
  return x;
}

static void uf_join(uint32_t* up, uint32_t a, uint32_t b, uint32_t n) {
  if (a >= n || b >= n) return; /* out of range: the checks report it */
  a = uf_find(up, a);
  b = uf_find(up, b);
  if (a != b) up[a < b ? b : a] = a < b ? a : b;
}

/* Ranks a plan reaches through memory (memory channels, switch groups, remote buffers read over
 * memory) must share a host; port channels may cross hosts. The groups so joined, when they are
 * consecutive ranks of one size M > 1, give ranks per node M (what MSCCL++'s selection compares);
 * no such group: 0, any placement; groups of other shapes: one host (ngpus). */
static uint32_t placement(struct jctx* c, const struct shunt_plan* p) {
  uint32_t n = p->ngpus;
  uint32_t* up = n ? shunt_arena_calloc(c->arena, n, sizeof(*up)) : NULL;
  if (!up) return n;
  for (uint32_t r = 0; r < n; r++) up[r] = r;
  for (uint32_t r = 0; r < n; r++) {
    const struct shunt_plan_gpu* g = &p->gpus[r];
    for (uint32_t i = 0; i < g->nchannels[SHUNT_CHAN_MEMORY]; i++)
      if (g->channels[SHUNT_CHAN_MEMORY][i].peer >= 0)
        uf_join(up, r, (uint32_t)g->channels[SHUNT_CHAN_MEMORY][i].peer, n);
    for (uint32_t i = 0; i < g->nchannels[SHUNT_CHAN_SWITCH]; i++) {
      const struct shunt_plan_channel* ch = &g->channels[SHUNT_CHAN_SWITCH][i];
      for (uint32_t k = 0; k < ch->nranks; k++)
        if (ch->ranks[k] >= 0) uf_join(up, r, (uint32_t)ch->ranks[k], n);
    }
    for (uint32_t i = 0; i < g->nremote_buffers; i++) {
      const struct shunt_plan_remote_buffer* rb = &g->remote_buffers[i];
      if ((rb->access & (1u << SHUNT_CHAN_MEMORY)) && rb->rank >= 0) uf_join(up, r, (uint32_t)rb->rank, n);
    }
  }
  /* Groups are consecutive blocks of size m iff every rank's root is the first of its block
   * (m is the size of rank 0's; m = 1: every rank alone, any placement). */
  uint32_t m = 0;
  while (m < n && uf_find(up, m) == 0) m++;
  if (n % m) return n;
  for (uint32_t r = 0; r < n; r++)
    if (uf_find(up, r) != r - r % m) return n;
  return m == 1 ? 0 : m;
}

void resolve_plan(struct jctx* c, struct shunt_plan* p) {
  uint32_t* per_peer = shunt_arena_calloc(c->arena, p->ngpus, sizeof(*per_peer));
  if (!per_peer) {
    jfail(c, NULL, "out of memory");
    return;
  }
  enum shunt_plan_redop redop = SHUNT_PLAN_REDOP_NONE;
  for (uint32_t r = 0; r < p->ngpus; r++) {
    struct shunt_plan_gpu* g = &p->gpus[r];
    for (int t = SHUNT_CHAN_MEMORY; t <= SHUNT_CHAN_PORT; t++) {
      for (uint32_t i = 0; i < g->nchannels[t]; i++) {
        struct shunt_plan_channel* ch = &g->channels[t][i];
        ch->peer_ordinal = (ch->peer >= 0 && (uint32_t)ch->peer < p->ngpus) ? per_peer[ch->peer]++ : 0;
      }
      /* Reset only what was counted: linear in channels, not in ranks x GPUs. */
      for (uint32_t i = 0; i < g->nchannels[t]; i++) {
        const struct shunt_plan_channel* ch = &g->channels[t][i];
        if (ch->peer >= 0 && (uint32_t)ch->peer < p->ngpus) per_peer[ch->peer] = 0;
      }
    }
    int32_t next[SHUNT_CHAN_TYPES] = {0};
    for (uint32_t i = 0; i < g->nremote_buffers; i++) {
      struct shunt_plan_remote_buffer* rb = &g->remote_buffers[i];
      for (int t = 0; t < SHUNT_CHAN_TYPES; t++)
        rb->type_index[t] = (rb->access & (1u << t)) ? next[t]++ : -1;
    }
    for (uint32_t b = 0; b < g->nthreadblocks; b++) {
      struct shunt_plan_threadblock* tb = &g->threadblocks[b];
      for (uint32_t i = 0; i < tb->nops; i++) resolve_op(g, tb, &tb->ops[i], &redop);
    }
  }
  p->reduce_op = redop;
  p->ranks_per_node = placement(c, p);
}
