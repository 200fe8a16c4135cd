/* Renaming a plan's ranks (plan/rotate.h): copies of the parts that name ranks, in an arena
 * of the new plan's own. */
#include "plan/rotate.h"

#include <string.h>

#include "plan/arena.h"

struct rot {
  struct shunt_arena* a;
  uint32_t n, shift;
  bool oom;
};

/* A rank renamed; anything that is not a rank of the plan (-1: none) stays as written. */
static int32_t ren(const struct rot* r, int32_t q) {
  return q >= 0 && (uint32_t)q < r->n ? (int32_t)(((uint32_t)q + r->shift) % r->n) : q;
}

static void* dup(struct rot* r, const void* src, size_t n, size_t size) {
  if (r->oom) return NULL;
  void* d = shunt_arena_calloc(r->a, n, size);
  if (!d) {
    r->oom = true;
    return NULL;
  }
  if (n) memcpy(d, src, n * size);
  return d;
}

static struct shunt_plan_ref* refs(struct rot* r, const struct shunt_plan_ref* src, uint32_t n) {
  struct shunt_plan_ref* v = dup(r, src, n, sizeof(*v));
  for (uint32_t i = 0; v && i < n; i++) {
    v[i].rank = ren(r, v[i].rank);
    v[i].peer = ren(r, v[i].peer);
  }
  return v;
}

static struct shunt_plan_op* ops(struct rot* r, const struct shunt_plan_op* src, uint32_t n) {
  struct shunt_plan_op* v = dup(r, src, n, sizeof(*v));
  for (uint32_t i = 0; v && i < n; i++) {
    v[i].src = refs(r, src[i].src, src[i].nsrc);
    v[i].dst = refs(r, src[i].dst, src[i].ndst);
    if (src[i].nops) v[i].ops = ops(r, src[i].ops, src[i].nops);
  }
  return v;
}

static void gpu(struct rot* r, const struct shunt_plan_gpu* src, struct shunt_plan_gpu* g) {
  *g = *src;
  g->id = ren(r, src->id);
  for (int t = 0; t < SHUNT_CHAN_TYPES; t++) {
    if (!src->nchannels[t]) continue;
    struct shunt_plan_channel* ch = dup(r, src->channels[t], src->nchannels[t], sizeof(*ch));
    g->channels[t] = ch;
    for (uint32_t i = 0; ch && i < src->nchannels[t]; i++) {
      ch[i].peer = ren(r, ch[i].peer);
      if (!ch[i].nranks) continue;
      ch[i].ranks = dup(r, ch[i].ranks, ch[i].nranks, sizeof(*ch[i].ranks));
      for (uint32_t k = 0; ch[i].ranks && k < ch[i].nranks; k++) ch[i].ranks[k] = ren(r, ch[i].ranks[k]);
    }
  }
  g->remote_buffers = dup(r, src->remote_buffers, src->nremote_buffers, sizeof(*g->remote_buffers));
  for (uint32_t i = 0; g->remote_buffers && i < src->nremote_buffers; i++)
    g->remote_buffers[i].rank = ren(r, g->remote_buffers[i].rank);
  g->threadblocks = dup(r, src->threadblocks, src->nthreadblocks, sizeof(*g->threadblocks));
  for (uint32_t b = 0; g->threadblocks && b < src->nthreadblocks; b++)
    g->threadblocks[b].ops = ops(r, src->threadblocks[b].ops, src->threadblocks[b].nops);
}

bool shunt_plan_rotatable(const struct shunt_plan* p, uint32_t shift) {
  uint32_t m = p->ranks_per_node;
  return m == 0 || m >= p->ngpus || shift % m == 0;
}

struct shunt_plan* shunt_plan_rotate(const struct shunt_plan* p, uint32_t shift) {
  struct rot r = {shunt_arena_new(), p->ngpus, p->ngpus ? shift % p->ngpus : 0, false};
  struct shunt_plan* q = r.a ? shunt_arena_calloc(r.a, 1, sizeof(*q)) : NULL;
  if (!q) {
    shunt_arena_free(r.a);
    return NULL;
  }
  *q = *p;
  q->arena_ = r.a;
  if (shunt_coll_rooted(p->coll) && r.n)
    q->root = (p->root + r.shift) % r.n; /* only a rooted collective's plan has one */
  q->gpus = dup(&r, p->gpus, p->ngpus, sizeof(*q->gpus));
  /* Plan rank k's part goes to communicator rank k + shift. */
  for (uint32_t k = 0; q->gpus && k < p->ngpus; k++) gpu(&r, &p->gpus[k], &q->gpus[(k + r.shift) % r.n]);
  if (r.oom) {
    shunt_arena_free(r.a);
    return NULL;
  }
  return q;
}
