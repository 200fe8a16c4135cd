/* Binding a call's buffers to a Program, decided once for both backends (each then moves the
 * bytes its own way: memcpy on the host, stream copies and kernels on the GPU).
 *
 * Promises: the decision depends only on the program, the user's two pointers and the
 * scaling that the backend applies before the plan (PreMulSum, floating avg):
 * - in-place calls (the input inside the output) alias: the plan's input IS a view into its
 *   output, on this rank and, for the peers that reach it, on every rank (every rank of an
 *   in-place call aliases, so each places its peers' input views by shunt_bind_in_view). A
 *   plan may write results through its input (MSCCL++'s in-place plans do); they land in the
 *   output. So an aliased call never stages the input apart from the output;
 * - a buffer that peers reach (program.remote_access) is staged in the rank's registered
 *   memory (for an aliased call: the output, holding the input view); so is the input when it
 *   must be scaled and is not aliased (the user's input is never written), and the output
 *   when an aliased input must be scaled;
 * - reducescatter mirrors all of this (SHUNT_PROG_OUT_IN_INPUT): in place, its output is a
 *   view into its input (SHUNT_PROG_OUT_VIEW), the input is staged when peers reach either or
 *   it must be scaled, and the output is never staged apart from it;
 * - it refuses (with a reason) buffers larger than the staging capacity, and an input that
 *   already lies in the staging region when it would have to be scaled into it.
 * C and CUDA (host code). */
#ifndef SHUNT_EXEC_BIND_H
#define SHUNT_EXEC_BIND_H

#include <stdbool.h>
#include <stdint.h>

#include "exec/program.h"

struct shunt_bind {
  bool alias;     /* in place: the input lies in the output (reducescatter: the output in the input) */
  bool stage_in;  /* the plan reads its input from the staging input */
  bool stage_out; /* the plan writes the staging output, copied out afterwards */
};

static inline bool shunt_bind_inside(const void* p, const void* base, uint64_t bytes) {
  return (const char*)p >= (const char*)base && (const char*)p < (const char*)base + bytes;
}

/* Fills *b; returns NULL, or why the call cannot be bound. zc_in / zc_out: peers reach this
 * rank's user input / output themselves (registered zero-copy buffers; never with pre_scale,
 * which peers must see scaled), so reaching them needs no staging. */
static inline const char* shunt_bind_decide_zc(const struct shunt_program* p, const void* user_in,
                                               const void* user_out, bool pre_scale, const void* stage_in,
                                               uint64_t in_cap, uint64_t out_cap, bool zc_in, bool zc_out,
                                               struct shunt_bind* b) {
  if (SHUNT_PROG_OUT_IN_INPUT(p)) {
    /* Reducescatter, the mirror: in place, the output is a view into the input, so the input
     * is what peers reach (staged when they do, or when it must be scaled: the user's input is
     * never scaled where it lies), and the output is never staged apart from it. */
    b->alias = shunt_bind_inside(user_out, user_in, p->in_bytes);
    if (b->alias) {
      b->stage_out = false;
      b->stage_in = (p->remote_access != 0 && !zc_in) || pre_scale;
    } else {
      b->stage_out = (p->remote_access & SHUNT_PROG_REMOTE_OUTPUT) != 0 && !zc_out;
      b->stage_in = ((p->remote_access & SHUNT_PROG_REMOTE_INPUT) != 0 && !zc_in) || pre_scale;
    }
  } else if ((b->alias = user_in != user_out ? shunt_bind_inside(user_in, user_out, p->out_bytes)
                                             : p->in_bytes > 0)) {
    b->stage_in = false;
    b->stage_out = (p->remote_access != 0 && !zc_out) || pre_scale;
  } else {
    b->stage_out = (p->remote_access & SHUNT_PROG_REMOTE_OUTPUT) != 0 && !zc_out;
    b->stage_in = ((p->remote_access & SHUNT_PROG_REMOTE_INPUT) != 0 && !zc_in) || pre_scale;
  }
  if ((b->stage_out && p->out_bytes > out_cap) || (b->stage_in && p->in_bytes > in_cap))
    return "the call's buffers exceed the world's staging capacity";
  if (pre_scale && b->stage_in && user_in == stage_in)
    return "scaled reductions need the input outside the staging region";
  return NULL;
}

static inline const char* shunt_bind_decide(const struct shunt_program* p, const void* user_in,
                                            const void* user_out, bool pre_scale, const void* stage_in,
                                            uint64_t in_cap, uint64_t out_cap, struct shunt_bind* b) {
  return shunt_bind_decide_zc(p, user_in, user_out, pre_scale, stage_in, in_cap, out_cap, false, false, b);
}

/* Where rank r's input view starts inside its output in an aliased (in-place) call: NCCL's
 * in-place rule (allreduce: the same buffer; allgather: the rank's slice). */
static inline uint64_t shunt_bind_in_view(const struct shunt_program* p, uint32_t rank) {
  return SHUNT_PROG_IN_VIEW(p, rank);
}

#endif
