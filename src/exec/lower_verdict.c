/* Whether every rank's program of a plan lowers for a call shape (lower.h:
 * shunt_lower_check_call), remembered per plan text: the answer is a full lowering, which
 * depends only on the plan and the shape. Kept apart from the shape checks (lower_check.c),
 * which lowering itself uses, so that the two do not call each other. */
#include <pthread.h>
#include <stdio.h>

#include "exec/lower_internal.h"

bool shunt_lower_check(const struct shunt_plan* plan, int rank, uint64_t in_bytes, uint64_t out_bytes,
                       enum shunt_dtype dtype, enum shunt_redop op, char* reason, size_t len) {
  struct shunt_call_shape s = {in_bytes, out_bytes, dtype, op, SHUNT_PKT_LL16, 0, false, false};
  return shunt_lower_check_call(plan, rank, &s, reason, len);
}

/* Shapes for which every rank's program lowered, per plan text. Every collective asks; a full
 * lowering of every rank costs microseconds per op, while the answer depends only on the plan's
 * text (its hash) and the shape. Process-wide behind a lock: communicators share plans. Plans
 * made in memory (hash 0) are not remembered. */
#define MEMO_SLOTS 64
struct memo {
  const struct shunt_plan* plan;
  uint64_t hash, used;
  struct shunt_call_shape s;
};
static pthread_mutex_t memo_mu = PTHREAD_MUTEX_INITIALIZER;
static struct memo memo[MEMO_SLOTS];
static uint64_t memo_clock;

bool shunt_call_shape_same(const struct shunt_call_shape* a, const struct shunt_call_shape* b) {
  enum shunt_pkt_type pa = a->pkt ? a->pkt : SHUNT_PKT_LL16, pb = b->pkt ? b->pkt : SHUNT_PKT_LL16;
  return a->in_bytes == b->in_bytes && a->out_bytes == b->out_bytes && a->dtype == b->dtype &&
         a->op == b->op && pa == pb && a->out_stride == b->out_stride && a->part == b->part &&
         a->any_size == b->any_size;
}

static bool memo_has(const struct shunt_plan* plan, const struct shunt_call_shape* s) {
  bool hit = false;
  pthread_mutex_lock(&memo_mu);
  for (uint32_t i = 0; i < MEMO_SLOTS && !hit; i++)
    if (memo[i].used && memo[i].plan == plan && memo[i].hash == plan->content_hash &&
        shunt_call_shape_same(&memo[i].s, s)) {
      memo[i].used = ++memo_clock;
      hit = true;
    }
  pthread_mutex_unlock(&memo_mu);
  return hit;
}

static void memo_add(const struct shunt_plan* plan, const struct shunt_call_shape* s) {
  pthread_mutex_lock(&memo_mu);
  uint32_t slot = 0;
  for (uint32_t i = 1; i < MEMO_SLOTS; i++)
    if (memo[i].used < memo[slot].used) slot = i;
  memo[slot] = (struct memo){plan, plan->content_hash, ++memo_clock, *s};
  pthread_mutex_unlock(&memo_mu);
}

bool shunt_lower_check_call(const struct shunt_plan* plan, int rank, const struct shunt_call_shape* sp,
                            char* reason, size_t len) {
  struct shunt_call_shape s = *sp;
  if (!shunt_lower_check_shape(plan, &s, reason, len)) return false;
  uint32_t lo = rank < 0 ? 0 : (uint32_t)rank, hi = rank < 0 ? plan->ngpus : (uint32_t)rank + 1;
  if (hi > plan->ngpus) SHUNT_REFUSE("rank %d is outside the plan's %u ranks", rank, plan->ngpus);
  bool remember = rank < 0 && plan->content_hash;
  if (remember && memo_has(plan, &s)) return true;
  /* The device encoding limits depend on every op: a full lowering is the check. */
  for (uint32_t r = lo; r < hi; r++) {
    struct shunt_program* p = shunt_lower(plan, r, &s, reason, len);
    if (!p) return false;
    shunt_program_free(p);
  }
  if (remember) memo_add(plan, &s);
  return true;
}
