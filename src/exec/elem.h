/* Element math the executor needs, over contiguous arrays of one dtype: combine two
 * arrays with a reduction op, scale contributions (avg on floating types, PreMulSum), divide
 * (avg on integer types). The element-level definitions are those of the ops module
 * (exec/ops/); this is the executor's narrow view of it. */
#ifndef SHUNT_EXEC_ELEM_H
#define SHUNT_EXEC_ELEM_H

#include <stdbool.h>
#include <stdint.h>

#include "util/vocab.h"

/* Whether the executor computes (dtype, op) exactly. */
bool shunt_elem_supported(enum shunt_dtype dt, enum shunt_redop op);
/* dst[i] = dst[i] op src[i] for n elements; op is SUM, PROD, MIN or MAX. */
void shunt_elem_reduce(enum shunt_dtype dt, enum shunt_redop op, void* dst, const void* src, uint64_t n);
/* How an op reaches NCCL's result with a plan that sums each contribution once. */
enum shunt_elem_scaling { SHUNT_SCALE_NONE = 0, SHUNT_SCALE_PRE, SHUNT_SCALE_POSTDIV };
enum shunt_elem_scaling shunt_elem_scaling(enum shunt_dtype dt, enum shunt_redop op);
/* The op applied at reduce steps: SUM for AVG and PREMULSUM. */
enum shunt_redop shunt_elem_step_op(enum shunt_redop op);
/* dst[i] = src[i] * scalar (PRE): scalar is one element of dt (PREMULSUM), or NULL for avg's
 * 1/nranks converted to dt. */
void shunt_elem_premul(enum shunt_dtype dt, void* dst, const void* src, uint64_t n, const void* scalar,
                       uint32_t nranks);
/* buf[i] /= nranks (POSTDIV, integer avg). */
void shunt_elem_postdiv(enum shunt_dtype dt, void* buf, uint64_t n, uint32_t nranks);

#endif
