/* The one reduction loop of every executor: the host backend (exec/elem.c), the GPU kernel and
 * its CPU build (exec/gpu/gpu_xctx.cuh) all reduce through shunt_reduce_typed, over the element
 * functions of exec/ops/reduce.h, so they compute the same bits by the same code.
 *
 * Promises:
 * - shunt_red_step_kind: the op applied where a plan reduces two values: avg, PreMulSum and
 *   SUMPOSTDIV are sums (their scaling is a step of its own, exec/steps.h); the others are
 *   themselves.
 * - shunt_reduce_typed(ty, kind, dst, src, n): dst = dst (+) src over n bytes, a whole number of
 *   elements of ty, for kind SUM, PROD, MAX or MIN (any other kind reduces as SUM). The dtype and
 *   op are dispatched once per call, not per element: each (type, op) pair is its own loop in
 *   which the element math's switches fold at compile time (several times faster than the
 *   generic shunt_reduce_buf over large buffers). A type it does not know leaves dst as it is.
 * - Header only, for C and CUDA/C++ alike. It is inlined where it is called: each executor calls
 *   it from one function of its own, so one copy of the 48 loops serves each. */
#ifndef SHUNT_EXEC_OPS_REDUCE_LOOP_H
#define SHUNT_EXEC_OPS_REDUCE_LOOP_H

#include "exec/ops/reduce.h"

/* A loop of one (type, op) pair is a function of its own, flattened on the host: the element
 * functions inline into it whole and each small loop is optimized alone (one large flattened
 * dispatch measured 10-30 % slower for half and bfloat16; a loop bound of `i + es <= n`, 20 %
 * slower for float). On the device every call inlines. */
#if defined(__CUDACC__)
#define SHUNT_LOOP_FN __host__ __device__ __forceinline__
#define SHUNT_PAIR_FN __host__ __device__ __forceinline__
#else
#define SHUNT_LOOP_FN static inline __attribute__((always_inline))
#define SHUNT_PAIR_FN static __attribute__((flatten, noinline, unused))
#endif

SHUNT_HD enum shunt_redop shunt_red_step_kind(enum shunt_redop redop) {
  return (redop == SHUNT_REDOP_AVG || redop == SHUNT_REDOP_PREMULSUM || redop == SHUNT_REDOP_SUMPOSTDIV)
             ? SHUNT_REDOP_SUM
             : redop;
}

/* One (type, op) pair: called with constants only, so the element functions inline without
 * their switches. */
SHUNT_LOOP_FN void shunt_reduce_loop(enum shunt_dtype ty, enum shunt_redop kind, char* dst, const char* src, uint64_t n) {
  const struct shunt_red r = {ty, kind, 0};
  const uint64_t es = shunt_dtype_size(ty);
  for (uint64_t i = 0; i < n; i += es)
    shunt_dtype_store(dst + i, ty,
                   shunt_reduce_elem(&r, shunt_dtype_load(dst + i, ty), shunt_dtype_load(src + i, ty)));
}

#define SHUNT_REDUCE_PAIR_(TY, K)                                                      \
  SHUNT_PAIR_FN void shunt_reduce_##TY##_##K(char* dst, const char* src, uint64_t n) { \
    shunt_reduce_loop(SHUNT_DT_##TY, SHUNT_REDOP_##K, dst, src, n);                      \
  }
#define SHUNT_REDUCE_TY_(TY)  \
  SHUNT_REDUCE_PAIR_(TY, SUM) \
  SHUNT_REDUCE_PAIR_(TY, PROD) SHUNT_REDUCE_PAIR_(TY, MAX) SHUNT_REDUCE_PAIR_(TY, MIN)
SHUNT_REDUCE_TY_(INT8)
SHUNT_REDUCE_TY_(UINT8)
SHUNT_REDUCE_TY_(INT32)
SHUNT_REDUCE_TY_(UINT32)
SHUNT_REDUCE_TY_(INT64)
SHUNT_REDUCE_TY_(UINT64)
SHUNT_REDUCE_TY_(FLOAT16)
SHUNT_REDUCE_TY_(FLOAT32)
SHUNT_REDUCE_TY_(FLOAT64)
SHUNT_REDUCE_TY_(BFLOAT16)
SHUNT_REDUCE_TY_(FP8E4M3)
SHUNT_REDUCE_TY_(FP8E5M2)

#define SHUNT_REDUCE_KINDS_(TY)                                   \
  switch (kind) {                                                 \
    case SHUNT_REDOP_PROD:                                          \
      shunt_reduce_##TY##_PROD(dst, src, n);                      \
      return;                                                     \
    case SHUNT_REDOP_MAX:                                           \
      shunt_reduce_##TY##_MAX(dst, src, n);                       \
      return;                                                     \
    case SHUNT_REDOP_MIN:                                           \
      shunt_reduce_##TY##_MIN(dst, src, n);                       \
      return;                                                     \
    default: /* sum: also the reduce step of avg and PreMulSum */ \
      shunt_reduce_##TY##_SUM(dst, src, n);                       \
      return;                                                     \
  }

SHUNT_HD void shunt_reduce_typed(enum shunt_dtype ty, enum shunt_redop kind, char* dst, const char* src, uint64_t n) {
  switch (ty) {
    case SHUNT_DT_INT8:
      SHUNT_REDUCE_KINDS_(INT8)
    case SHUNT_DT_UINT8:
      SHUNT_REDUCE_KINDS_(UINT8)
    case SHUNT_DT_INT32:
      SHUNT_REDUCE_KINDS_(INT32)
    case SHUNT_DT_UINT32:
      SHUNT_REDUCE_KINDS_(UINT32)
    case SHUNT_DT_INT64:
      SHUNT_REDUCE_KINDS_(INT64)
    case SHUNT_DT_UINT64:
      SHUNT_REDUCE_KINDS_(UINT64)
    case SHUNT_DT_FLOAT16:
      SHUNT_REDUCE_KINDS_(FLOAT16)
    case SHUNT_DT_FLOAT32:
      SHUNT_REDUCE_KINDS_(FLOAT32)
    case SHUNT_DT_FLOAT64:
      SHUNT_REDUCE_KINDS_(FLOAT64)
    case SHUNT_DT_BFLOAT16:
      SHUNT_REDUCE_KINDS_(BFLOAT16)
    case SHUNT_DT_FP8E4M3:
      SHUNT_REDUCE_KINDS_(FP8E4M3)
    case SHUNT_DT_FP8E5M2:
      SHUNT_REDUCE_KINDS_(FP8E5M2)
    default:
      return;
  }
}

#undef SHUNT_REDUCE_KINDS_
#undef SHUNT_REDUCE_TY_
#undef SHUNT_REDUCE_PAIR_
#undef SHUNT_PAIR_FN
#undef SHUNT_LOOP_FN

#endif
