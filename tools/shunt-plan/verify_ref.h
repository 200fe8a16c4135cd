/* The inputs shunt-plan verify gives every rank and the reference result it compares with,
 * the same for every backend it runs (the host backend, the GPU kernel's CPU build).
 *
 * Promises: inputs are small integers placed by rank, index and seed, so every summation
 * order is exact in every dtype (fp8 included) and a result read from the wrong execution
 * differs; the reference allreduce scales each contribution once (floating avg, PreMulSum
 * with the scalar verify_premul_scalar gives), sums in rank order with the host backend's
 * element math (exec/elem.h), and divides integer avg at the end, as NCCL does. */
#ifndef SHUNT_TOOLS_PLAN_VERIFY_REF_H
#define SHUNT_TOOLS_PLAN_VERIFY_REF_H

#include <stdbool.h>
#include <stdint.h>

#include "exec/ops/dtype.h"
#include "plan/planset.h"

#define VERIFY_NOPS 6
extern const char* const verify_dt_names[SHUNT_DT_COUNT];
extern const char* const verify_op_names[VERIFY_NOPS];

/* `bytes` of rank's input from byte `at` on (allreduce: at is a multiple of the element size). */
void verify_fill_input(char* buf, uint64_t at, uint64_t bytes, uint32_t rank, uint32_t nranks, unsigned seed,
                       enum shunt_dtype dt, enum shunt_redop op, bool reduce);
/* PreMulSum's scalar: one element of dt. */
void verify_premul_scalar(enum shunt_dtype dt, void* out);
/* Bytes [at, at + bytes) of the reference allreduce output; tmp holds `bytes`. */
void verify_expected_allreduce(char* exp, char* tmp, uint64_t at, uint64_t bytes, uint32_t nranks,
                               unsigned seed, enum shunt_dtype dt, enum shunt_redop op);

/* A call of `total` bytes (the size a plan's range counts) as input and output bytes. */
void verify_in_out(const struct shunt_plan* p, uint64_t total, uint64_t* in, uint64_t* out);
/* The buffers rank's run binds in this mode (util/coll_traits.h: NCCL's in-place rule), from a
 * buffer for the input and one for the output, for a call of in/out bytes. *user_out is NULL
 * where the rank has no output (a reduce's other ranks, as the API binds them; *inplace then
 * false); every other rank runs in the mode asked for. */
void verify_bind(const struct shunt_plan* p, uint32_t rank, uint64_t in, uint64_t out, char* in_buf,
                 char* out_buf, char** user_in, char** user_out, bool* inplace);

#endif
