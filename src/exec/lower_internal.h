/* Helpers shared by the lowering files. */
#ifndef SHUNT_EXEC_LOWER_INTERNAL_H
#define SHUNT_EXEC_LOWER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "exec/lower.h"
#include "util/status.h"

/* split(X, k, g) of docs/plan-format.md §4.2 in units of a. */
uint64_t shunt_lower_split(uint64_t x, uint64_t k, uint64_t g, uint64_t a);
/* The chunk unit R/C (§4.2); 0 when both chunk counts are 0. Assumes the shape checks passed. */
uint64_t shunt_lower_chunk_bytes(const struct shunt_plan* plan, uint64_t in_bytes, uint64_t out_bytes);
/* The checks that need no lowering: sizes, range, collective, dtype/op. */
bool shunt_lower_check_shape(const struct shunt_plan* plan, const struct shunt_call_shape* s, char* reason,
                             size_t len);
bool shunt_lower_is_packet_ref(enum shunt_op_type t, enum shunt_chan_type ct, bool src, uint32_t i);

#endif
