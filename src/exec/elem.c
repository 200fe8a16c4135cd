/* The executor's element math, taken from the ops module (exec/ops/reduce.h), which defines
 * every reduction bit for bit as NCCL's kernels compute it. */
#include "exec/elem.h"

#include <string.h>

#include "exec/ops/reduce.h"
#include "exec/ops/reduce_loop.h"

bool shunt_elem_supported(enum shunt_dtype dt, enum shunt_redop op) {
  return shunt_dtype_valid(dt) && shunt_redop_computed(op);
}

enum shunt_redop shunt_elem_step_op(enum shunt_redop op) {
  return shunt_red_step_kind(op);
}

enum shunt_elem_scaling shunt_elem_scaling(enum shunt_dtype dt, enum shunt_redop op) {
  if (op == SHUNT_REDOP_PREMULSUM) return SHUNT_SCALE_PRE;
  if (op == SHUNT_REDOP_AVG) return shunt_dtype_is_float(dt) ? SHUNT_SCALE_PRE : SHUNT_SCALE_POSTDIV;
  return SHUNT_SCALE_NONE;
}

void shunt_elem_reduce(enum shunt_dtype dt, enum shunt_redop op, void* dst, const void* src, uint64_t n) {
  shunt_reduce_typed(dt, shunt_red_step_kind(op), (char*)dst, (const char*)src, (uint64_t)n * shunt_dtype_size(dt));
}

void shunt_elem_premul(enum shunt_dtype dt, void* dst, const void* src, uint64_t n, const void* scalar,
                       uint32_t nranks) {
  struct shunt_red r = {dt, SHUNT_REDOP_PREMULSUM, 0};
  r.arg = scalar ? shunt_dtype_load(scalar, dt) : shunt_avg_scalar(dt, (int)nranks);
  shunt_pre_buf(dst, src, (size_t)n * shunt_dtype_size(dt), &r);
}

void shunt_elem_postdiv(enum shunt_dtype dt, void* buf, uint64_t n, uint32_t nranks) {
  struct shunt_red r = {dt, SHUNT_REDOP_SUMPOSTDIV, nranks};
  shunt_post_buf(buf, buf, (size_t)n * shunt_dtype_size(dt), &r);
}
