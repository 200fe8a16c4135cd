/* The executor's element math, taken from the ops module (exec/ops/reduce.h), which defines
 * every reduction bit for bit as NCCL's kernels compute it. */
#include "exec/elem.h"

#include <string.h>

#include "exec/ops/reduce.h"
#include "exec/ops/reduce_loop.h"

static bool is_float(enum shunt_dtype dt) {
  return dt == SHUNT_DT_FLOAT16 || dt == SHUNT_DT_FLOAT32 || dt == SHUNT_DT_FLOAT64 ||
         dt == SHUNT_DT_BFLOAT16 || dt == SHUNT_DT_FP8E4M3 || dt == SHUNT_DT_FP8E5M2;
}

bool shunt_elem_supported(enum shunt_dtype dt, enum shunt_redop op) {
  return (unsigned)dt < SHUNT_DT_COUNT && op <= SHUNT_REDOP_PREMULSUM;
}

enum shunt_redop shunt_elem_step_op(enum shunt_redop op) {
  return (enum shunt_redop)shunt_red_step_kind((int)op);
}

enum shunt_elem_scaling shunt_elem_scaling(enum shunt_dtype dt, enum shunt_redop op) {
  if (op == SHUNT_REDOP_PREMULSUM) return SHUNT_SCALE_PRE;
  if (op == SHUNT_REDOP_AVG) return is_float(dt) ? SHUNT_SCALE_PRE : SHUNT_SCALE_POSTDIV;
  return SHUNT_SCALE_NONE;
}

/* enum shunt_dtype and enum shunt_redop share NCCL's values with SHUNT_TY_* / SHUNT_RED_*. */
void shunt_elem_reduce(enum shunt_dtype dt, enum shunt_redop op, void* dst, const void* src, uint64_t n) {
  shunt_reduce_typed((int)dt, shunt_red_step_kind((int)op), (char*)dst, (const char*)src,
                     (uint64_t)n * shunt_ty_size((int)dt));
}

void shunt_elem_premul(enum shunt_dtype dt, void* dst, const void* src, uint64_t n, const void* scalar,
                       uint32_t nranks) {
  struct shunt_red r = {(int)dt, SHUNT_RED_PREMULSUM, 0};
  r.arg = scalar ? shunt_ty_load(scalar, (int)dt) : shunt_avg_scalar((int)dt, (int)nranks);
  shunt_pre_buf(dst, src, (size_t)n * shunt_ty_size((int)dt), &r);
}

void shunt_elem_postdiv(enum shunt_dtype dt, void* buf, uint64_t n, uint32_t nranks) {
  struct shunt_red r = {(int)dt, SHUNT_RED_SUMPOSTDIV, nranks};
  shunt_post_buf(buf, buf, (size_t)n * shunt_ty_size((int)dt), &r);
}
