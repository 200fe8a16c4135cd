/* Balance checks: signals vs waits per channel pair, acquires vs releases per semaphore,
 * barrier participation. Counted per execution; ops inside a pipeline are counted under the
 * pipeline's shape (unit_size, num_chunks), which fixes their iteration count on every rank
 * (every rank shares one chunk unit, see check_chunks). */
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "plan/check_internal.h"

enum ev_kind { EV_CHAN = 0, EV_SEM = 1, EV_BARRIER = 2 };

struct ev {
  uint32_t kind;
  uint32_t a, b; /* CHAN: sender, receiver; SEM: rank, semaphore; BARRIER: rank, barrier id */
  uint32_t type; /* CHAN: channel type */
  uint32_t k;    /* CHAN: ordinal of the pair; BARRIER: threadblock */
  uint64_t unit; /* pipeline shape, 0/0 outside pipelines */
  uint32_t nchunks;
  int32_t plus, minus; /* CHAN: signals, waits; SEM: releases, acquires; BARRIER: num_threadblocks */
  struct oppos at;
};

struct evs {
  struct ev* v;
  size_t n, cap;
  bool oom;
};

static void push(struct evs* e, const struct ev* x) {
  if (e->n == e->cap) {
    size_t cap = e->cap ? e->cap * 2 : 64;
    struct ev* v = realloc(e->v, cap * sizeof(*v));
    if (!v) {
      e->oom = true;
      return;
    }
    e->v = v;
    e->cap = cap;
  }
  e->v[e->n++] = *x;
}

static void collect(struct cctx* c, const struct oppos* at, const struct shunt_plan_op* o,
                    const struct shunt_plan_op* pipe, void* arg) {
  struct evs* e = arg;
  const struct shunt_plan_gpu* g = &c->p->gpus[at->r];
  struct ev x = {.at = *at, .unit = pipe ? pipe->unit_size : 0, .nchunks = pipe ? pipe->num_chunks : 0};
  bool sig = o->type == SHUNT_OP_SIGNAL || o->type == SHUNT_OP_RLXSIGNAL || o->type == SHUNT_OP_PWS ||
             o->type == SHUNT_OP_PWSF;
  bool wait = o->type == SHUNT_OP_WAIT || o->type == SHUNT_OP_RLXWAIT;
  if ((sig || wait) && (o->channel_type == SHUNT_CHAN_MEMORY || o->channel_type == SHUNT_CHAN_PORT)) {
    for (uint32_t i = 0; i < o->nchannel_ids; i++) {
      if (o->channel_global[i] < 0) continue;
      const struct shunt_plan_channel* ch = &g->channels[o->channel_type][o->channel_global[i]];
      if (ch->peer < 0 || (uint32_t)ch->peer >= c->p->ngpus || (uint32_t)ch->peer == at->r) continue;
      x.kind = EV_CHAN;
      x.type = o->channel_type;
      x.k = ch->peer_ordinal;
      x.a = sig ? at->r : (uint32_t)ch->peer;
      x.b = sig ? (uint32_t)ch->peer : at->r;
      x.plus = sig;
      x.minus = wait;
      push(e, &x);
    }
  }
  if (o->type == SHUNT_OP_SEM_ACQUIRE || o->type == SHUNT_OP_SEM_RELEASE) {
    for (uint32_t i = 0; i < o->nsemaphore_ids; i++) {
      if (o->semaphore_ids[i] >= g->nsemaphores) continue;
      x.kind = EV_SEM;
      x.a = at->r;
      x.b = o->semaphore_ids[i];
      x.plus = o->type == SHUNT_OP_SEM_RELEASE;
      x.minus = o->type == SHUNT_OP_SEM_ACQUIRE;
      push(e, &x);
    }
  }
  if (o->type == SHUNT_OP_BARRIER && o->has_barrier && o->num_threadblocks > 1 &&
      o->barrier_id < SHUNT_PLAN_MAX_BARRIERS) {
    x.kind = EV_BARRIER;
    x.a = at->r;
    x.b = o->barrier_id;
    x.k = at->b;
    x.plus = (int32_t)(o->num_threadblocks > INT32_MAX ? INT32_MAX : o->num_threadblocks);
    x.unit = 0; /* a barrier must be met the same number of times by every block */
    x.nchunks = 0;
    push(e, &x);
  }
}

#define CMP(f) \
  if (x->f != y->f) return x->f < y->f ? -1 : 1
static int cmp_group(const struct ev* x, const struct ev* y) {
  CMP(kind);
  CMP(a);
  CMP(b);
  if (x->kind == EV_CHAN) {
    CMP(type);
    CMP(k);
  }
  if (x->kind != EV_BARRIER) {
    CMP(unit);
    CMP(nchunks);
  }
  return 0;
}
static int cmp_ev(const void* p, const void* q) {
  const struct ev *x = p, *y = q;
  int r = cmp_group(x, y);
  if (r) return r;
  if (x->kind == EV_BARRIER) CMP(k);
  CMP(at.r);
  CMP(at.b);
  CMP(at.i);
  CMP(at.j);
  return 0;
}
#undef CMP

static void report_chan(struct cctx* c, const struct ev* first, int64_t s, int64_t w) {
  const char* t = shunt_chan_type_name((enum shunt_chan_type)first->type);
  char where[96] = "";
  if (first->unit)
    snprintf(where, sizeof(where), " inside pipelines of unit_size %llu", (unsigned long long)first->unit);
  operr(c, &first->at, ".channel_ids",
        "%s channel pair #%u from rank %u to rank %u: %lld signal(s) but %lld wait(s) per execution%s", t,
        first->k, first->a, first->b, (long long)s, (long long)w, where);
}

static void check_barrier_group(struct cctx* c, const struct ev* v, size_t n) {
  uint32_t blocks = 0;
  size_t per_block = 0, run = 0;
  bool uneven = false;
  for (size_t i = 0; i < n; i++) {
    if (v[i].plus != v[0].plus) {
      operr(c, &v[i].at, ".num_threadblocks", "barrier %u: num_threadblocks %d here but %d in another block",
            v[0].b, v[i].plus, v[0].plus);
      return;
    }
    run++;
    if (i + 1 == n || v[i + 1].k != v[i].k) {
      blocks++;
      if (per_block && run != per_block) uneven = true;
      per_block = run;
      run = 0;
    }
  }
  if ((int32_t)blocks != v[0].plus)
    operr(c, &v[0].at, ".num_threadblocks",
          "barrier %u expects %d threadblocks but %u blocks of rank %u use it", v[0].b, v[0].plus, blocks,
          v[0].a);
  else if (uneven)
    operr(c, &v[0].at, ".barrier_id", "barrier %u is met a different number of times by different blocks",
          v[0].b);
}

void check_balance(struct cctx* c) {
  struct evs e = {0};
  visit_ops(c, collect, &e);
  if (e.oom) {
    cerr(c, "", "out of memory checking signal/wait balance");
    free(e.v);
    return;
  }
  if (e.n) qsort(e.v, e.n, sizeof(*e.v), cmp_ev);
  for (size_t i = 0; i < e.n;) {
    size_t j = i;
    int64_t plus = 0, minus = 0;
    while (j < e.n && cmp_group(&e.v[i], &e.v[j]) == 0) {
      plus += e.v[j].plus;
      minus += e.v[j].minus;
      j++;
    }
    const struct ev* f = &e.v[i];
    if (f->kind == EV_CHAN && plus != minus) report_chan(c, f, plus, minus);
    if (f->kind == EV_SEM && plus != minus)
      operr(c, &f->at, ".semaphore_ids",
            "semaphore %u of rank %u: %lld acquire(s) but %lld release(s) per execution", f->b, f->a,
            (long long)minus, (long long)plus);
    if (f->kind == EV_BARRIER) check_barrier_group(c, f, j - i);
    i = j;
  }
  free(e.v);
}
