/* How a call of any size runs on a plan.
 *
 * A plan's chunk rule (docs/plan-format.md §4.1-4.2) takes only sizes that split into its chunk
 * counts in whole alignment units. A call of any other size runs in two parts, on every rank
 * alike (the split depends only on the plan and the call's size):
 * - the head: the largest part the rule takes (per rank for allgather and reducescatter),
 *   run on the user's buffers, with offsets exactly MSCCL++'s for that size; an allgather head
 *   keeps the output's real layout (rank slices `in_bytes` apart, exec/lower.h out_stride), a
 *   reducescatter head the input's (rank slices `out_bytes` apart), an alltoall head both
 *   (one block per rank, `in_bytes / ranks` apart, the head the first bytes of every block);
 * - the tail: the rest, fewer bytes than one quantum per rank, run once more padded with
 *   zeros to one quantum through small staging buffers, its results copied out.
 * Every op of the format is element-wise in position (copies, reductions, packets, slices
 * and pipelines move byte k of a chunk to byte k of another), so each part computes its own
 * elements exactly as a whole run would, and padding lanes only ever meet padding lanes.
 * Sizes the rule takes run as one head, as before. */
#ifndef SHUNT_EXEC_SPLIT_H
#define SHUNT_EXEC_SPLIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "exec/lower.h"

/* A call's shape on its plan, computed once where the call is selected and carried down to the
 * backend's run: nothing below recomputes a size from the plan. */
struct shunt_split {
  struct shunt_call_shape call; /* the call's real sizes */
  uint64_t unit;                /* per-rank bytes: the stride of the rank-sliced buffer (allgather's output,
                                   reducescatter's input, both of alltoall's), else the input */
  uint64_t quantum;             /* per-rank bytes the plan's rule needs a multiple of */
  uint64_t head;                /* per-rank bytes run on the user's buffers (0: no head run) */
  uint64_t rest;                /* per-rank bytes run padded to `quantum` (0: no tail run) */
  struct shunt_call_shape head_shape, tail_shape;
  uint32_t in_slices, out_slices; /* rank slices of the input / output (ranks or 1) */
  /* What a world must hold to run both parts: scratch bytes (both halves), staging input and
   * output bytes, and the tail's staging (0: no tail). */
  uint64_t scratch, in_need, out_need, tail_bytes;
  /* The call's buffers are in place by NCCL's rule (plan/planset.h: shunt_select_inplace), as
   * selection decided it: false from shunt_split_call, set by whoever knows the buffers. The tail
   * then runs in place too. */
  bool inplace;
};

/* Splits a call of `call` (its real sizes) for `plan` and sizes both parts. Returns false, with
 * a reason, when no size suits the plan's chunk counts (the plan can serve no call then). */
bool shunt_split_call(const struct shunt_plan* plan, const struct shunt_call_shape* call,
                      struct shunt_split* s, char* reason, size_t len);

/* shunt_split_call, then whether the call lies in the plan's range and every rank can run both
 * parts (a full lowering of each, as shunt_lower_check). */
bool shunt_split_check(const struct shunt_plan* plan, const struct shunt_call_shape* call,
                       struct shunt_split* s, char* reason, size_t len);

/* The tail's staging, one buffer of s->tail_bytes for every backend: the padded output
 * (out_slices x quantum) at offset 0, the padded input at shunt_split_tail_in: after the output,
 * or, in place, at this rank's view inside it. Slice k of the tail's output (k < out_slices) goes
 * back to byte k x unit + head of the user's output; input slice k's rest (k < in_slices, from
 * byte k x unit + head) goes to slice k of the padded input.
 * Alltoall: both buffers have ranks slices; the padded input follows the padded output, or is
 * it, in place.
 * Reducescatter, the mirror: its tail input (ranks x quantum: input slice k's rest at slice k)
 * comes first, at shunt_split_tail_in = 0, and its output (quantum) follows it, or, in place,
 * lies at this rank's view inside it: shunt_split_tail_out (0 for the other collectives). */
uint64_t shunt_split_tail_in(const struct shunt_plan* plan, const struct shunt_split* s, uint32_t rank,
                             bool inplace);
uint64_t shunt_split_tail_out(const struct shunt_plan* plan, const struct shunt_split* s, uint32_t rank,
                              bool inplace);

/* Whether p lies inside [base, base + bytes). */
static inline bool shunt_split_inside(const void* p, const void* base, uint64_t bytes) {
  return (const char*)p >= (const char*)base && (const char*)p < (const char*)base + bytes;
}

#endif
