/* Lowering: Plan + rank + call shape -> Program (exec/program.h).
 *
 * Promises:
 * - shunt_lower_check answers at selection time whether a plan can serve a call shape, with
 *   a reason when it cannot: alignment and chunk divisibility (docs/plan-format.md §4.1), the
 *   plan's size range (inclusive; allgather on output bytes), buffer sizes that fit the
 *   collective, dtype/op support (a plan naming a reduce_op other than sum serves only that
 *   op), the device encoding's ranges (offsets and sizes below 2^32, pipeline iterations
 *   below 2^16, no empty pipeline windows) and packet alignment. A shape it accepts always
 *   lowers, so nothing fails at run time for these reasons.
 * - shunt_lower computes every size in 64 bits; the result is immutable plain data.
 * - The cache is keyed by (plan identity, rank, sizes, dtype, op, packet type), bounded, and
 *   safe to use from several threads; a program obtained from it stays valid until released
 *   even when the cache evicts it.
 * - Only the plan's static checks (plan/check.h) are assumed: lowering an unchecked plan
 *   may refuse it but never reads out of bounds. */
#ifndef SHUNT_EXEC_LOWER_H
#define SHUNT_EXEC_LOWER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "exec/program.h"
#include "plan/plan.h"
#include "plan/planset.h"

struct shunt_call_shape {
  uint64_t in_bytes, out_bytes; /* the executor's sendBuffSize / recvBuffSize (§4.1) */
  enum shunt_dtype dtype;
  enum shunt_redop op;     /* allgather: ignored */
  enum shunt_pkt_type pkt; /* 0 means LL16 */
  /* Set in a head run only (0 otherwise), and named for allgather; for the other collectives
   * it is not the output's stride. Allgather: the rank slices of the output lie out_stride
   * bytes apart (out_bytes = ranks x out_stride, out_stride > in_bytes); the plan runs on the
   * first in_bytes of each slice. Reducescatter, the mirror: the stride of the input, whose
   * slices lie out_stride apart (in_bytes = ranks x out_stride, out_stride > out_bytes); the
   * plan runs on the first out_bytes of each. Alltoall: no stride at all: both buffers keep
   * their real layout, one block per rank in_bytes / ranks apart, and this field holds the
   * bytes of each block the plan runs on (< in_bytes / ranks). How a call of any size runs on
   * a plan (exec/split.h). */
  uint64_t out_stride;
  /* A part of a larger call (exec/split.h), whose own size the plan's range was checked
   * against: the range is not applied to this shape. */
  bool part;
  /* A call that in-job tuning runs on the plan whatever its size range (api/tune.h): ranges
   * choose among plans, they are not limits of what a plan computes. */
  bool any_size;
};

/* Whether two shapes are the same call shape, field by field (pkt 0 and LL16 taken as one). */
bool shunt_call_shape_same(const struct shunt_call_shape* a, const struct shunt_call_shape* b);

/* rank < 0: check every rank. Returns true when the plan serves the shape; else false with
 * the reason in reason[0..len). */
bool shunt_lower_check(const struct shunt_plan* plan, int rank, uint64_t in_bytes, uint64_t out_bytes,
                       enum shunt_dtype dtype, enum shunt_redop op, char* reason, size_t len);

/* As shunt_lower_check, for a whole shape (out_stride included). */
bool shunt_lower_check_call(const struct shunt_plan* plan, int rank, const struct shunt_call_shape* s,
                            char* reason, size_t len);

/* Lowers one rank. NULL with a reason when shunt_lower_check would refuse (or memory ran out). */
struct shunt_program* shunt_lower(const struct shunt_plan* plan, uint32_t rank,
                                  const struct shunt_call_shape* s, char* reason, size_t len);
void shunt_program_free(struct shunt_program* p);

/* Scratch bytes the world needs per rank for the plan at a shape: both halves of a double
 * scratch, and as much again, since packet plans and the others use separate parts of it
 * (exec/ops/packet.h: shunt_scratch_at; §4.3, sized from the message, never an allocation
 * range). */
uint64_t shunt_lower_scratch_need(const struct shunt_plan* plan, uint64_t in_bytes, uint64_t out_bytes);

/* Bounded, thread-safe cache of programs. */
struct shunt_lower_cache;
struct shunt_lower_cache* shunt_lower_cache_create(uint32_t capacity);
void shunt_lower_cache_destroy(struct shunt_lower_cache* c); /* programs still held stay valid */
/* A program for the shape, lowered on a miss; release it with shunt_lower_cache_release. */
const struct shunt_program* shunt_lower_cache_get(struct shunt_lower_cache* c, const struct shunt_plan* plan,
                                                  uint32_t rank, const struct shunt_call_shape* s,
                                                  char* reason, size_t len);
void shunt_lower_cache_release(struct shunt_lower_cache* c, const struct shunt_program* p);

#endif
