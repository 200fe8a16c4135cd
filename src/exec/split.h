/* How a call of any size runs on a plan.
 *
 * A plan's chunk rule (plan-format.md §4.1-4.2) takes only sizes that split into its chunk
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

struct shunt_split {
  uint64_t quantum; /* per-rank input bytes the plan's rule needs a multiple of */
  uint64_t head;    /* per-rank input bytes run on the user's buffers (0: no head run) */
  uint64_t rest;    /* per-rank input bytes run padded to `quantum` (0: no tail run) */
  struct shunt_call_shape head_shape, tail_shape;
};

/* Splits a call of `call` (its real sizes) for `plan`. Returns false, with a reason, when no
 * size suits the plan's chunk counts (the plan can serve no call then). */
bool shunt_split_call(const struct shunt_plan* plan, const struct shunt_call_shape* call,
                      struct shunt_split* s, char* reason, size_t len);

/* Whether every rank can run both parts (a full lowering of each, as shunt_lower_check). */
bool shunt_split_check(const struct shunt_plan* plan, const struct shunt_call_shape* call, char* reason,
                       size_t len);

/* What a world must hold to run both parts: scratch bytes (both halves) and staging sizes. */
void shunt_split_needs(const struct shunt_plan* plan, const struct shunt_split* s, uint64_t* scratch,
                       uint64_t* in, uint64_t* out);

/* The tail's staging, one buffer of shunt_split_tail_bytes for both backends: the padded output
 * (ranks x quantum for allgather, else quantum) at offset 0, the padded input at
 * shunt_split_tail_in: after the output, or, in place, at this rank's view inside it. Slice k of
 * the tail's output (k < shunt_split_slices) goes back to byte k x in_bytes + head of the user's
 * output; shunt_split_tail_in of the user's input is where the tail's input comes from. */
uint64_t shunt_split_tail_bytes(const struct shunt_plan* plan, const struct shunt_split* s);
uint64_t shunt_split_tail_in(const struct shunt_plan* plan, const struct shunt_split* s, uint32_t rank,
                             bool inplace);
uint32_t shunt_split_slices(const struct shunt_plan* plan);
/* Alltoall: both buffers have ranks slices (shunt_split_slices = shunt_split_in_slices = ranks);
 * the padded input follows the padded output, or is it, in place.
 * Reducescatter, the mirror: its tail input (ranks x quantum: input slice k's rest at slice k)
 * comes first, at shunt_split_tail_in = 0, and its output (quantum) follows it, or, in place,
 * lies at this rank's view inside it: shunt_split_tail_out (0 for the other collectives).
 * shunt_split_in_slices: the input's slices (ranks for reducescatter, else 1). */
uint64_t shunt_split_tail_out(const struct shunt_plan* plan, const struct shunt_split* s, uint32_t rank,
                              bool inplace);
uint32_t shunt_split_in_slices(const struct shunt_plan* plan);

/* Whether p lies inside [base, base + bytes). */
static inline bool shunt_split_inside(const void* p, const void* base, uint64_t bytes) {
  return (const char*)p >= (const char*)base && (const char*)p < (const char*)base + bytes;
}

#endif
