/* Intra-threadblock races (plan-format.md §5.5): there is no implicit barrier between ops, so
 * data written by one op may not be complete, in other threads of the block, when the next
 * op starts. Reported: an op reading (or sending) chunks an earlier op wrote, a signal or
 * sem_release published after writes, and a data op right after a wait or sem_acquire, each
 * with no nop or barrier in between. Packet reads are exempt from the first rule: readers
 * spin on each packet's flag. Chunk ranges ignore tbg slicing (conservative). */
#include <stdio.h>
#include <stdlib.h>

#include "plan/check_internal.h"

struct wr {
  int space; /* 0..2 local buffer type, 3 + remote buffer id */
  uint64_t lo, hi;
  struct oppos at;
};

struct tbstate {
  struct wr* w;
  size_t n, cap;
  bool after_wait;
  struct oppos wait_at;
};

static int space_of(const struct shunt_plan_ref* r) {
  if (r->kind == SHUNT_REF_REMOTE) return r->global < 0 ? -1 : 3 + r->global;
  if (r->kind == SHUNT_REF_SWITCH && r->global < 0) return -1;
  return (int)r->type; /* a multicast store also writes the GPU's own bound buffer */
}

static bool packet_read(enum shunt_op_type t, uint32_t i) {
  switch (t) {
    case SHUNT_OP_UPKT:
    case SHUNT_OP_RPPKT:
    case SHUNT_OP_GSTOREPKT:
      return i == 0;
    case SHUNT_OP_REPKT:
    case SHUNT_OP_RESPKT:
    case SHUNT_OP_RECPKT:
    case SHUNT_OP_RECSPKT:
      return i >= 1;
    default:
      return false;
  }
}

static void opname(const struct oppos* at, char* buf, size_t len) {
  if (at->j >= 0)
    snprintf(buf, len, "ops[%u].ops[%d]", at->i, at->j);
  else
    snprintf(buf, len, "ops[%u]", at->i);
}

static void step(struct cctx* c, struct tbstate* s, const struct oppos* at, const struct shunt_plan_op* o) {
  char w[48];
  if (o->nsrc > SHUNT_PLAN_MAX_ENTRIES_PER_OP || o->ndst > SHUNT_PLAN_MAX_ENTRIES_PER_OP) return;
  switch (o->type) {
    case SHUNT_OP_NOP:
    case SHUNT_OP_BARRIER:
      s->n = 0;
      s->after_wait = false;
      return;
    case SHUNT_OP_WAIT:
    case SHUNT_OP_RLXWAIT:
    case SHUNT_OP_SEM_ACQUIRE:
      s->after_wait = true;
      s->wait_at = *at;
      return;
    case SHUNT_OP_PIPELINE:
    case SHUNT_OP_FLUSH:
    case SHUNT_OP_RLXSIGNAL:
      return;
    default:
      break;
  }
  bool publishes = o->type == SHUNT_OP_SIGNAL || o->type == SHUNT_OP_SEM_RELEASE || o->type == SHUNT_OP_PWS ||
                   o->type == SHUNT_OP_PWSF;
  if (publishes && s->n) {
    opname(&s->w[s->n - 1].at, w, sizeof(w));
    operr(c, at, "", "race: %s publishes data that %s wrote, with no nop or barrier in between",
          shunt_op_name(o->type), w);
  }
  if (shunt_op_is_sync(o->type)) return;
  if (s->after_wait) {
    opname(&s->wait_at, w, sizeof(w));
    operr(c, at, "", "race: %s runs right after the %s at %s with no nop or barrier in between",
          shunt_op_name(o->type), "wait", w);
    s->after_wait = false;
  }
  for (uint32_t i = 0; i < o->nsrc; i++) {
    if (packet_read(o->type, i)) continue;
    int sp = space_of(&o->src[i]);
    uint64_t lo = o->src[i].index, hi = lo + o->src[i].size;
    for (size_t k = 0; k < s->n; k++)
      if (s->w[k].space == sp && lo < s->w[k].hi && s->w[k].lo < hi) {
        char sfx[32];
        snprintf(sfx, sizeof(sfx), ".src_buff[%u]", i);
        opname(&s->w[k].at, w, sizeof(w));
        operr(c, at, sfx, "race: reads chunks that %s wrote, with no nop or barrier in between", w);
        break;
      }
  }
  for (uint32_t i = 0; i < o->ndst; i++) {
    int sp = space_of(&o->dst[i]);
    if (sp < 0) continue;
    if (s->n == s->cap) {
      size_t cap = s->cap ? s->cap * 2 : 16;
      struct wr* v = realloc(s->w, cap * sizeof(*v));
      if (!v) return;
      s->w = v;
      s->cap = cap;
    }
    s->w[s->n++] = (struct wr){sp, o->dst[i].index, (uint64_t)o->dst[i].index + o->dst[i].size, *at};
  }
}

unsigned shunt_plan_check_races(const struct shunt_plan* p, struct shunt_plan_errors* errs) {
  struct cctx c = {.p = p, .errs = errs};
  struct tbstate s = {0};
  for (uint32_t r = 0; r < p->ngpus; r++)
    for (uint32_t b = 0; b < p->gpus[r].nthreadblocks; b++) {
      const struct shunt_plan_threadblock* tb = &p->gpus[r].threadblocks[b];
      /* Blocks beyond the encoding limits are rejected by shunt_plan_check; skipping them
       * keeps this check linear in the size of any input. */
      if (tb->nops_flat > SHUNT_PLAN_MAX_OPS_PER_BLOCK) continue;
      s.n = 0;
      s.after_wait = false;
      for (uint32_t i = 0; i < tb->nops; i++) {
        struct oppos at = {r, b, i, -1};
        step(&c, &s, &at, &tb->ops[i]);
        for (uint32_t j = 0; j < tb->ops[i].nops; j++) {
          struct oppos in = {r, b, i, (int32_t)j};
          step(&c, &s, &in, &tb->ops[i].ops[j]);
        }
      }
    }
  free(s.w);
  check_cross_races(&c);
  return c.nerr;
}
