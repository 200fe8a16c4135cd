#include "exec/split.h"

#include <inttypes.h>
#include <stdio.h>

#include "exec/lower_internal.h"

/* The input is cut in rank slices and the output is not (reducescatter's layout). */
static bool is_rs(const struct shunt_plan* p) {
  return shunt_coll_layout(p->coll) == SHUNT_LAYOUT_SCATTER;
}

/* Both buffers hold one block per rank (alltoall's layout); the split cuts every block alike. */
static bool is_a2a(const struct shunt_plan* p) {
  return shunt_coll_layout(p->coll) == SHUNT_LAYOUT_BLOCKS;
}

/* The output is cut in rank slices and the input is not (allgather's layout). */
static bool is_ag(const struct shunt_plan* p) {
  return shunt_coll_layout(p->coll) == SHUNT_LAYOUT_GATHER;
}

/* The per-rank unit of a call: one rank's input (allgather, allreduce) or output
 * (reducescatter), or one peer's block (alltoall); the split cuts this unit into head and
 * tail. */
static uint64_t unit_of(const struct shunt_plan* p, const struct shunt_call_shape* call) {
  return shunt_coll_unit(p->coll, p->ngpus, call->in_bytes, call->out_bytes);
}

/* The flat (unstrided) shape of a run of `u` bytes per rank. */
static struct shunt_call_shape flat(const struct shunt_plan* p, const struct shunt_call_shape* call,
                                    uint64_t u) {
  struct shunt_call_shape s = *call;
  s.part = false;
  s.in_bytes = u * shunt_coll_in_units(p->coll, p->ngpus);
  s.out_bytes = u * shunt_coll_out_units(p->coll, p->ngpus);
  s.out_stride = 0;
  return s;
}

/* The chunk rule alone, whatever the plan's size range. */
static bool rule_takes(const struct shunt_plan* p, const struct shunt_call_shape* s) {
  struct shunt_call_shape t = *s;
  t.part = true;
  char why[8];
  return shunt_lower_check_shape(p, &t, why, sizeof(why));
}

/* What a world must hold to run both parts. A strided head addresses ranks x its unit of the
 * sliced buffer: that is what its scratch follows. */
static void size_parts(const struct shunt_plan* plan, struct shunt_split* s) {
  const struct shunt_call_shape* h = &s->head_shape;
  const struct shunt_call_shape* t = &s->tail_shape;
  uint64_t sh = !s->head       ? 0
                : is_a2a(plan) ? shunt_lower_scratch_need(plan, s->head * plan->ngpus, s->head * plan->ngpus)
                : is_rs(plan)  ? shunt_lower_scratch_need(plan, h->out_bytes * plan->ngpus, h->out_bytes)
                               : shunt_lower_scratch_need(plan, h->in_bytes, h->in_bytes * s->out_slices);
  uint64_t st = s->rest ? shunt_lower_scratch_need(plan, t->in_bytes, t->out_bytes) : 0;
  s->scratch = sh > st ? sh : st;
  s->in_need = s->head ? h->in_bytes : 0;
  s->out_need = s->head ? h->out_bytes : 0;
  if (s->rest && t->in_bytes > s->in_need) s->in_need = t->in_bytes;
  if (s->rest && t->out_bytes > s->out_need) s->out_need = t->out_bytes;
  s->tail_bytes = s->rest ? s->quantum * s->out_slices + s->quantum * s->in_slices : 0;
}

bool shunt_split_call(const struct shunt_plan* plan, const struct shunt_call_shape* call,
                      struct shunt_split* s, char* reason, size_t len) {
  if (!plan || !plan->ngpus) SHUNT_REFUSE("plan has no GPUs");
  const struct shunt_plan_gpu* g = &plan->gpus[0];
  uint64_t a = plan->buffer_alignment ? plan->buffer_alignment : 16;
  uint32_t n = plan->ngpus;
  uint64_t in = unit_of(plan, call);
  s->call = *call;
  s->inplace = false;
  s->unit = in;
  s->out_slices = (uint32_t)shunt_coll_out_units(plan->coll, n);
  s->in_slices = (uint32_t)shunt_coll_in_units(plan->coll, n);
  uint32_t es = shunt_dtype_size(call->dtype);
  if (!es) SHUNT_REFUSE("unknown data type %u", (unsigned)shunt_dtype_code(call->dtype));
  if (in == 0) SHUNT_REFUSE("empty message");
  if (in % es) SHUNT_REFUSE("%" PRIu64 " bytes are not whole %u-byte elements", in, es);
  if (call->in_bytes != in * s->in_slices || call->out_bytes != in * s->out_slices)
    SHUNT_REFUSE("output of %" PRIu64 " bytes does not fit an input of %" PRIu64, call->out_bytes,
                 call->in_bytes);
  /* The smallest per-rank size the rule takes: a multiple of alignment x the per-rank side's
   * chunks (input, or reducescatter's output; the other side's share when the plan names
   * none), tried up to a bound. */
  uint32_t own = is_rs(plan) ? g->output_chunks : is_a2a(plan) ? 0 : g->input_chunks;
  uint32_t other = is_rs(plan) ? g->input_chunks : g->output_chunks;
  /* Alltoall: a block's share of the chunks, which both sides split alike. */
  if (is_a2a(plan) && g->input_chunks > other) other = g->input_chunks;
  bool sliced = shunt_coll_layout(plan->coll) != SHUNT_LAYOUT_FLAT;
  uint64_t base = own ? a * own : sliced && n ? a * ((other + n - 1) / n) : a * other;
  s->quantum = 0;
  for (uint64_t k = 1; k <= 64 && base; k++) {
    struct shunt_call_shape t = flat(plan, call, base * k);
    if (rule_takes(plan, &t)) {
      s->quantum = base * k;
      break;
    }
  }
  if (!s->quantum) SHUNT_REFUSE("no size splits into the plan's chunk counts");
  s->head = in / s->quantum * s->quantum;
  s->rest = in - s->head;
  s->head_shape = flat(plan, call, s->head);
  if (s->rest) {
    s->head_shape.part = true;
    if (is_ag(plan) && s->head) {
      s->head_shape.out_bytes = call->out_bytes;
      s->head_shape.out_stride = in;
    }
    if (is_rs(plan) && s->head) {
      s->head_shape.in_bytes = call->in_bytes;
      s->head_shape.out_stride = in;
    }
    if (is_a2a(plan) && s->head) {
      /* Both buffers keep their real layout (blocks `in` apart); the field carries the head's
       * bytes of each block (exec/lower.h). */
      s->head_shape.in_bytes = call->in_bytes;
      s->head_shape.out_bytes = call->out_bytes;
      s->head_shape.out_stride = s->head;
    }
  }
  s->tail_shape = flat(plan, call, s->rest ? s->quantum : 0);
  s->tail_shape.part = true;
  size_parts(plan, s);
  return true;
}

bool shunt_split_check(const struct shunt_plan* plan, const struct shunt_call_shape* call,
                       struct shunt_split* s, char* reason, size_t len) {
  if (!shunt_split_call(plan, call, s, reason, len)) return false;
  uint64_t real = shunt_coll_size(plan->coll, call->in_bytes, call->out_bytes); /* §4.1 */
  if (!call->any_size && (real < plan->min_message_size || real > plan->max_message_size))
    SHUNT_REFUSE("%" PRIu64 " bytes is outside the plan's range [%" PRIu64 ", %" PRIu64 "]", real,
                 plan->min_message_size, plan->max_message_size);
  if (s->head && !shunt_lower_check_call(plan, -1, &s->head_shape, reason, len)) return false;
  if (s->rest && !shunt_lower_check_call(plan, -1, &s->tail_shape, reason, len)) return false;
  return true;
}

uint64_t shunt_split_tail_in(const struct shunt_plan* plan, const struct shunt_split* s, uint32_t rank,
                             bool inplace) {
  if (is_rs(plan)) return 0; /* reducescatter's input comes first: its output may be a view in it */
  if (!inplace) return s->quantum * s->out_slices;
  return shunt_coll_view_at(plan->coll, rank, s->quantum);
}

uint64_t shunt_split_tail_out(const struct shunt_plan* plan, const struct shunt_split* s, uint32_t rank,
                              bool inplace) {
  if (!is_rs(plan)) return 0;
  return inplace ? (uint64_t)rank * s->quantum : s->quantum * plan->ngpus;
}
