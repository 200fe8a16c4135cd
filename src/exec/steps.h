/* What a backend does around a plan, decided once for all three executors (the host backend,
 * the GPU backend, the kernel compiled for the CPU); each moves the bytes its own way (memcpy
 * and the element math on the host, stream copies and kernels on the GPU, memcpy and host
 * threads in the CPU build), so all bind buffers, scale, split and pad alike.
 *
 * Promises:
 * - shunt_steps_plan fills the steps of one run of a program, in the order they run, each empty
 *   when its byte or element count is 0:
 *   1. seed:    copy the user's output into the staging output (an aliased call that is staged);
 *   2. pre:     scale the input into the plan's input (PreMulSum, floating avg), or
 *      copy_in: copy it there (a staged input);
 *   3. the plan on (in, out), with alias for an in-place call (one buffer a view into the other:
 *      exec/program.h, the input in the output or, for reducescatter, the output in the input,
 *      whose view is then copied back when the input was staged);
 *   4. post:    divide the result (integer avg);
 *   5. back:    copy the staging output to the user's output.
 *   It returns NULL, or why the run cannot be done (nothing is to be run then). The binding
 *   itself is exec/bind.h's; avg and PreMulSum reach NCCL's result with a plan that sums each
 *   contribution once (exec/elem.h).
 * - shunt_parts_plan fills the parts of one call split as exec/split.h splits it: the head on
 *   the user's buffers, then the tail: its staging zeroed, each input slice's rest copied into
 *   it, the tail run, each output slice's rest copied back. Every rank plans the same parts.
 * - shunt_parts_run_host runs those parts where both buffers and the tail staging are host
 *   memory. */
#ifndef SHUNT_EXEC_STEPS_H
#define SHUNT_EXEC_STEPS_H

#include <stdbool.h>
#include <stdint.h>

#include "exec/lower.h"
#include "exec/ops/dtype.h"
#include "exec/program.h"
#include "exec/split.h"

struct shunt_steps {
  char* seed_dst;
  const char* seed_src;
  uint64_t seed_bytes;
  char* pre_dst;
  const char* pre_src;
  uint64_t pre_n; /* elements */
  struct shunt_red pre_red;
  /* A device-resident PreMulSum scalar (one element of the dtype), loaded by the pre kernel
   * when it runs, over pre_red.arg; NULL: pre_red.arg is the scalar. */
  const void* pre_scalar;
  char* copy_in_dst;
  const char* copy_in_src;
  uint64_t copy_in_bytes;
  char* in; /* the plan's input and output */
  char* out;
  bool alias;      /* in place: every rank's view lies in its other buffer (exec/bind.h) */
  uint64_t post_n; /* elements of out */
  struct shunt_red post_red;
  char* back_dst;
  const char* back_src;
  uint64_t back_bytes;
  bool zc_in, zc_out; /* peers reach the user's input / output themselves (zero-copy) */
};

/* The user's buffers and the staging a run of a program binds; user_out NULL: the rank has no
 * output (a reduce's other ranks), the plan writes the staging output and nothing is copied out.
 * zc_in / zc_out: every rank agreed
 * that peers reach the call's input / output in place (zero-copy, exec/gpu/gpu_reg.h); used only
 * where no scaling comes first (steps.zc_in / zc_out say which are used). scalar_on_device: the
 * PreMulSum scalar is device memory (ncclScalarDevice), never read here: the pre kernel reads it
 * when it runs, so a graph replay sees the value of its own time. */
struct shunt_steps_bufs {
  const void* user_in;
  void* user_out;
  const void* premul_scalar; /* PREMULSUM: one element of the dtype */
  bool scalar_on_device;
  char* stage_in;
  char* stage_out;
  uint64_t in_cap, out_cap;
  bool zc_in, zc_out;
};

const char* shunt_steps_plan(const struct shunt_program* p, uint32_t nranks, const struct shunt_steps_bufs* b,
                             struct shunt_steps* s);

/* n copies of `bytes` each, the k-th from src + k x src_stride to dst + k x dst_stride. */
struct shunt_copies {
  char* dst;
  const char* src;
  uint64_t dst_stride, src_stride, bytes;
  uint32_t n;
};

/* One run of a plan on (in, out); shape NULL: no such run. */
struct shunt_part {
  const struct shunt_call_shape* shape;
  const void* in;
  void* out;
};

struct shunt_parts {
  struct shunt_part head;
  /* The tail (tail.shape NULL: none): zero [zero, zero + zero_bytes), copy tail_in, run tail,
   * copy tail_out. */
  char* zero;
  uint64_t zero_bytes;
  struct shunt_copies tail_in;
  struct shunt_part tail;
  struct shunt_copies tail_out;
};

/* The parts of a call split as `s` (exec/split.h: the call's shape, computed once) on rank
 * `rank`, from the user's buffers `in` and `out` (NULL: none, nothing copied out), the tail
 * staged in `tail` (s->tail_bytes of it). In place when s->inplace says the call is: the tail then runs in
 * place too, so an in-place plan sees the layout it was written for. */
void shunt_parts_plan(const struct shunt_plan* plan, const struct shunt_split* s, uint32_t rank,
                      const void* in, void* out, char* tail, struct shunt_parts* parts);

/* One part run by a host-memory backend: the head (tail = false) on the user's buffers, or the
 * tail on the staging; 0 or the backend's error code, which stops the call. */
typedef int (*shunt_part_fn)(void* ctx, const struct shunt_call_shape* part, bool tail, const void* in,
                             void* out);

/* Runs the parts of shunt_parts_plan in host memory (memset and memcpy around each run). Returns
 * the first nonzero part result. */
int shunt_parts_run_host(const struct shunt_plan* plan, const struct shunt_split* s, uint32_t rank,
                         const void* in, void* out, char* tail, shunt_part_fn run, void* ctx);

#endif
