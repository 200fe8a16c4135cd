/* The executor's element math, taken from the ops module (exec/ops/reduce.h), which defines
 * every reduction bit for bit as NCCL's kernels compute it. */
#include "exec/elem.h"

#include <string.h>

#include "exec/ops/reduce.h"

static bool is_float(enum shunt_dtype dt) {
  return dt == SHUNT_DT_FLOAT16 || dt == SHUNT_DT_FLOAT32 || dt == SHUNT_DT_FLOAT64 ||
         dt == SHUNT_DT_BFLOAT16 || dt == SHUNT_DT_FP8E4M3 || dt == SHUNT_DT_FP8E5M2;
}

bool shunt_elem_supported(enum shunt_dtype dt, enum shunt_redop op) {
  return (unsigned)dt < SHUNT_DT_COUNT && op <= SHUNT_REDOP_PREMULSUM;
}

enum shunt_redop shunt_elem_step_op(enum shunt_redop op) {
  return (op == SHUNT_REDOP_AVG || op == SHUNT_REDOP_PREMULSUM) ? SHUNT_REDOP_SUM : op;
}

enum shunt_elem_scaling shunt_elem_scaling(enum shunt_dtype dt, enum shunt_redop op) {
  if (op == SHUNT_REDOP_PREMULSUM) return SHUNT_SCALE_PRE;
  if (op == SHUNT_REDOP_AVG) return is_float(dt) ? SHUNT_SCALE_PRE : SHUNT_SCALE_POSTDIV;
  return SHUNT_SCALE_NONE;
}

/* One loop per (type, op), with both known to the compiler: the element functions of
 * exec/ops/reduce.h are inlined without their switches, several times faster than the generic
 * shunt_reduce_buf over large buffers, and the same bits, being the same functions. */
static inline __attribute__((always_inline)) void reduce_fixed(int ty, int kind, char* dst, const char* src,
                                                               size_t nbytes) {
  struct shunt_red r = {ty, kind, 0};
  size_t sz = shunt_ty_size(ty);
  for (size_t i = 0; i < nbytes; i += sz)
    shunt_ty_store(dst + i, ty,
                   shunt_reduce_elem(&r, shunt_ty_load(dst + i, ty), shunt_ty_load(src + i, ty)));
}

#define REDUCE_FN(TY, K)                                                                              \
  static __attribute__((flatten)) void reduce_##TY##_##K(char* dst, const char* src, size_t nbytes) { \
    reduce_fixed(SHUNT_TY_##TY, SHUNT_RED_##K, dst, src, nbytes);                                     \
  }
#define REDUCE_TY(TY) REDUCE_FN(TY, SUM) REDUCE_FN(TY, PROD) REDUCE_FN(TY, MAX) REDUCE_FN(TY, MIN)
REDUCE_TY(INT8)
REDUCE_TY(UINT8)
REDUCE_TY(INT32)
REDUCE_TY(UINT32)
REDUCE_TY(INT64)
REDUCE_TY(UINT64)
REDUCE_TY(FLOAT16)
REDUCE_TY(FLOAT32)
REDUCE_TY(FLOAT64)
REDUCE_TY(BFLOAT16)
REDUCE_TY(FP8E4M3)
REDUCE_TY(FP8E5M2)

typedef void (*reduce_fn)(char*, const char*, size_t);
#define REDUCE_ROW(TY) \
  [SHUNT_TY_##TY] = {reduce_##TY##_SUM, reduce_##TY##_PROD, reduce_##TY##_MAX, reduce_##TY##_MIN}
/* Indexed by type, then by SHUNT_RED_SUM, _PROD, _MAX, _MIN (0..3). */
static const reduce_fn fixed[SHUNT_TY_COUNT][4] = {
    REDUCE_ROW(INT8),    REDUCE_ROW(UINT8),    REDUCE_ROW(INT32),   REDUCE_ROW(UINT32),
    REDUCE_ROW(INT64),   REDUCE_ROW(UINT64),   REDUCE_ROW(FLOAT16), REDUCE_ROW(FLOAT32),
    REDUCE_ROW(FLOAT64), REDUCE_ROW(BFLOAT16), REDUCE_ROW(FP8E4M3), REDUCE_ROW(FP8E5M2)};

/* enum shunt_dtype and enum shunt_redop share NCCL's values with SHUNT_TY_* / SHUNT_RED_*. */
void shunt_elem_reduce(enum shunt_dtype dt, enum shunt_redop op, void* dst, const void* src, uint64_t n) {
  int kind = (int)shunt_elem_step_op(op);
  size_t nbytes = (size_t)n * shunt_ty_size((int)dt);
  if ((unsigned)dt < SHUNT_TY_COUNT && kind >= SHUNT_RED_SUM && kind <= SHUNT_RED_MIN) {
    fixed[dt][kind]((char*)dst, (const char*)src, nbytes);
    return;
  }
  struct shunt_red r = {(int)dt, kind, 0};
  shunt_reduce_buf(dst, dst, src, nbytes, &r);
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
