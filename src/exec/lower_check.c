/* Whether a plan serves a call shape (docs/plan-format.md §4.1, §9; docs/decisions.md D12-D16), with
 * the reason. */
#include <inttypes.h>
#include <stdio.h>

#include "exec/lower_internal.h"

uint64_t shunt_lower_chunk_bytes(const struct shunt_plan* plan, uint64_t in_bytes, uint64_t out_bytes) {
  if (!plan->ngpus) return 0;
  const struct shunt_plan_gpu* g = &plan->gpus[0];
  if (g->input_chunks) return in_bytes / g->input_chunks;
  if (g->output_chunks) return out_bytes / g->output_chunks;
  return 0;
}

static bool op_supported(const struct shunt_plan* plan, enum shunt_redop op, char* reason, size_t len) {
  if (!shunt_redop_computed(op))
    SHUNT_REFUSE("reduction op %u is not computed by the executor", (unsigned)shunt_redop_code(op));
  enum shunt_plan_redop named = plan->reduce_op;
  if (named == SHUNT_PLAN_REDOP_NONE || named == SHUNT_PLAN_REDOP_SUM) return true;
  if (shunt_plan_redop_for(op) != named)
    SHUNT_REFUSE("the plan's reduce ops are '%s': it serves only that reduction",
                 shunt_plan_redop_name(named));
  return true;
}

bool shunt_lower_check_shape(const struct shunt_plan* plan, const struct shunt_call_shape* s, char* reason,
                             size_t len) {
  if (!plan || !plan->ngpus) SHUNT_REFUSE("plan has no GPUs");
  uint64_t a = plan->buffer_alignment;
  if (a == 0) SHUNT_REFUSE("buffer_alignment is 0");
  const struct shunt_plan_gpu* g = &plan->gpus[0];
  uint32_t ic = g->input_chunks, oc = g->output_chunks;
  if (ic == 0 && oc == 0) SHUNT_REFUSE("plan has neither input nor output chunks");
  uint64_t in = s->in_bytes, out = s->out_bytes;
  enum shunt_coll_layout layout = shunt_coll_layout(plan->coll);
  if (s->out_stride && layout == SHUNT_LAYOUT_SCATTER) {
    /* The mirror for reducescatter: input slices wider than the plan's output; the input is
     * checked as ranks x out_bytes, which the plan addresses. */
    if (s->out_stride <= out || in != s->out_stride * plan->ngpus)
      SHUNT_REFUSE("input stride %" PRIu64 " does not fit %u slices of %" PRIu64 " bytes in %" PRIu64,
                   s->out_stride, plan->ngpus, out, in);
    if (!oc || ic != oc * plan->ngpus)
      SHUNT_REFUSE("a strided input needs input_chunks = ranks x output_chunks (%u vs %u x %u)", ic,
                   plan->ngpus, oc);
    if (!s->part && !s->any_size && (in < plan->min_message_size || in > plan->max_message_size))
      SHUNT_REFUSE("%" PRIu64 " bytes is outside the plan's range [%" PRIu64 ", %" PRIu64 "]", in,
                   plan->min_message_size, plan->max_message_size);
    struct shunt_call_shape flat = *s;
    flat.in_bytes = out * plan->ngpus;
    flat.out_stride = 0;
    flat.part = true; /* the range was checked on the real size */
    return shunt_lower_check_shape(plan, &flat, reason, len);
  }
  if (s->out_stride && layout == SHUNT_LAYOUT_BLOCKS) {
    /* An alltoall head: both buffers keep their blocks (in_bytes / ranks apart) and the plan
     * runs on the first out_stride bytes of each; checked as ranks x out_stride, which the
     * plan addresses. */
    uint32_t n = plan->ngpus;
    if (in != out || in % n || s->out_stride >= in / n)
      SHUNT_REFUSE("alltoall head of %" PRIu64 " bytes per block does not fit %u blocks in %" PRIu64
                   "/%" PRIu64 " bytes",
                   s->out_stride, n, in, out);
    if (!ic || !oc || ic % n || oc % n)
      SHUNT_REFUSE(
          "a strided alltoall needs chunk counts that are nonzero multiples of the ranks (%u and %u for %u)",
          ic, oc, n);
    if (!s->part && !s->any_size && (in < plan->min_message_size || in > plan->max_message_size))
      SHUNT_REFUSE("%" PRIu64 " bytes is outside the plan's range [%" PRIu64 ", %" PRIu64 "]", in,
                   plan->min_message_size, plan->max_message_size);
    struct shunt_call_shape flat = *s;
    flat.in_bytes = flat.out_bytes = s->out_stride * n;
    flat.out_stride = 0;
    flat.part = true; /* the range was checked on the real size */
    return shunt_lower_check_shape(plan, &flat, reason, len);
  }
  if (s->out_stride) {
    /* A head run of an allgather whose slices are wider than the plan's input (exec/split.h):
     * the output is checked as if it were ranks x in_bytes, which the plan addresses. */
    if (layout != SHUNT_LAYOUT_GATHER)
      SHUNT_REFUSE("a slice stride is for allgather, reducescatter and alltoall only");
    if (s->out_stride <= in || out != s->out_stride * plan->ngpus)
      SHUNT_REFUSE("output stride %" PRIu64 " does not fit %u slices of %" PRIu64 " bytes in %" PRIu64,
                   s->out_stride, plan->ngpus, in, out);
    if (!ic || oc != ic * plan->ngpus)
      SHUNT_REFUSE("a strided output needs output_chunks = ranks x input_chunks (%u vs %u x %u)", oc,
                   plan->ngpus, ic);
    uint64_t sz = out; /* the call's real size is what the range holds */
    if (!s->part && !s->any_size && (sz < plan->min_message_size || sz > plan->max_message_size))
      SHUNT_REFUSE("%" PRIu64 " bytes is outside the plan's range [%" PRIu64 ", %" PRIu64 "]", sz,
                   plan->min_message_size, plan->max_message_size);
    out = in * plan->ngpus;
    struct shunt_call_shape flat = *s;
    flat.out_bytes = out;
    flat.out_stride = 0;
    flat.part = true; /* the range was checked on the real size */
    return shunt_lower_check_shape(plan, &flat, reason, len);
  }
  if (in % a || out % a)
    SHUNT_REFUSE("buffer sizes %" PRIu64 "/%" PRIu64 " are not multiples of buffer_alignment %" PRIu64, in,
                 out, a);
  if (ic && (in / a) % ic)
    SHUNT_REFUSE("input of %" PRIu64 " bytes does not split into %u chunks of whole %" PRIu64 "-byte units",
                 in, ic, a);
  if (oc && (out / a) % oc)
    SHUNT_REFUSE("output of %" PRIu64 " bytes does not split into %u chunks of whole %" PRIu64 "-byte units",
                 out, oc, a);
  if (ic && oc && in / ic != out / oc)
    SHUNT_REFUSE("chunk sizes differ: input %" PRIu64 "/%u, output %" PRIu64 "/%u", in, ic, out, oc);
  uint64_t sz = shunt_coll_size(plan->coll, in, out);
  if (!s->part && !s->any_size && (sz < plan->min_message_size || sz > plan->max_message_size))
    SHUNT_REFUSE("%" PRIu64 " bytes is outside the plan's range [%" PRIu64 ", %" PRIu64 "]", sz,
                 plan->min_message_size, plan->max_message_size);
  if (sz == 0) SHUNT_REFUSE("empty message");
  if (shunt_coll_served(plan->coll) &&
      !shunt_coll_sizes_fit(plan->coll, plan->collective, plan->ngpus, in, out, reason, len))
    return false;
  if (s->pkt != 0 && s->pkt != SHUNT_PKT_LL16 && s->pkt != SHUNT_PKT_LL8)
    SHUNT_REFUSE("unknown packet type %d", s->pkt);
  if (!shunt_dtype_valid(s->dtype)) SHUNT_REFUSE("unknown data type %u", (unsigned)shunt_dtype_code(s->dtype));
  uint32_t es = shunt_dtype_size(s->dtype);
  if (!es || shunt_lower_chunk_bytes(plan, in, out) % es)
    SHUNT_REFUSE("chunks are not whole %s elements", es ? "dtype" : "known");
  /* Only a collective that reduces asks the plan's reduce ops (every other call's op is sum). */
  if (shunt_coll_reduces(plan->coll) && !op_supported(plan, s->op, reason, len)) return false;
  return true;
}

uint64_t shunt_lower_scratch_need(const struct shunt_plan* plan, uint64_t in_bytes, uint64_t out_bytes) {
  uint64_t chunk = shunt_lower_chunk_bytes(plan, in_bytes, out_bytes), need = 0;
  for (uint32_t r = 0; r < plan->ngpus; r++) {
    uint64_t n =
        chunk * plan->gpus[r].scratch_chunks * (plan->ll ? 2 : 1) * (plan->use_double_scratch_buffer ? 2 : 1);
    if (n > need) need = n;
  }
  /* Both parts of the world's scratch: packet plans' and the others' (packet.h). */
  return 2 * need;
}
