/* Element arithmetic of every reduction, bit-identical to NCCL's device kernels (the ring/tree
 * kernels' FuncSum, FuncProd, FuncMinMax, FuncPreMulSum and FuncSumPostDiv on sm_90).
 *
 * Per element, for each type:
 * - integers: sum and product wrap (computed unsigned); min/max compare as signed or unsigned by
 *   type; the SUMPOSTDIV post step divides the wrapped sum, read as signed for signed types, by
 *   the divisor, truncating toward zero.
 * - half, bfloat16, float, double: sum and product are the exact result rounded once to nearest
 *   even in the type (__hadd/__hmul, x+y, x*y), overflow to infinity, subnormals kept.
 * - fp8 (e4m3, e5m2): NCCL computes in half: both operands widen to half (exact), the half sum or
 *   product is rounded to half, then narrowed to fp8 with saturation. So results round twice,
 *   infinities and out-of-range values saturate to the largest finite fp8, and an e5m2 infinity
 *   never survives an operation (it comes out as +-57344).
 * - min/max on floating types: a NaN operand yields the other operand, two NaNs a NaN (below);
 *   -0 is below +0 (fminf/fmaxf, __hmin/__hmax). fp8 min/max goes through half like the sum.
 * - NaN results: half, bfloat16, float and fp8 give their canonical NaN (SHUNT_*_NAN). Double keeps
 *   NaN payloads as the GPU's double unit does: a NaN operand comes out quieted, the second one
 *   when both are NaN (for min/max too), and an invalid operation gives SHUNT_F64_DEFAULT_NAN.
 * Every reduction is commutative bit for bit, except which of two different double NaNs survives,
 * where reduce(a, b) follows NCCL's reduce(accumulated, incoming) and keeps b's. Floating sums are
 * not associative: a plan's grouping of contributions decides the last bits, as NCCL's ring or
 * tree order decides them for NCCL.
 *
 * How an executor gets NCCL's result for a collective (allreduce, reduce-scatter, reduce), with a
 * plan that combines every rank's contribution exactly once:
 * 1. pre  (only PREMULSUM has one: x * scalar): applied once to each rank's own input element
 *         before, or as, it meets any other contribution, with the scalar of the rank that owns
 *         the input. avg on floating types is PREMULSUM by 1/nranks, the same scalar on every
 *         rank, so any rank may scale any rank's input; a user PreMulSum scalar may differ
 *         between ranks, so only the owner may scale its input (a plan that reads peers' raw
 *         inputs must otherwise fall back).
 *         NCCL's ring and tree kernels scale the local input where they read it and, when the
 *         same step adds a received partial result, the compiler fuses the two: acc + x*scalar
 *         is one fma, rounded once, for half, bfloat16, float and double (not fp8, whose product
 *         is rounded to fp8 first). So:
 *         - own input combined with a partial result: shunt_reduce_pre_elem / _buf (fused);
 *         - own input stored or sent on its own: shunt_pre_elem / shunt_pre_buf (rounded).
 *         Reads of scratch and output never apply pre.
 * 2. reduce (shunt_reduce_elem / shunt_reduce_buf): every other combination of two values
 *         (partial results, or inputs already scaled). For PREMULSUM and SUMPOSTDIV: the sum.
 * 3. post (only SUMPOSTDIV has one, i.e. avg on integers: shunt_post_elem / shunt_post_buf):
 *         applied exactly once to each fully-reduced element, after every contribution was
 *         added; e.g. one pass over the rank's own output once its plan has finished, never to
 *         a partial sum and never twice to a value a peer copied after dividing.
 * With one rank: output = post(pre(input)).
 *
 * On the device the arithmetic uses explicit add.rn/mul.rn/fma.rn instructions, which the
 * compiler never fuses or reorders, so results do not depend on nvcc's -fmad or -ftz. */
#ifndef SHUNT_EXEC_OPS_REDUCE_H
#define SHUNT_EXEC_OPS_REDUCE_H

#include "exec/ops/dtype.h"

#if !defined(__CUDACC__)
#include <math.h> /* fma: double PreMulSum on the host */
#endif

/* ---- Floating-point element operations (bit patterns in, bit patterns out) --------------------- */

SHUNT_HD uint32_t shunt_f32_canon(uint32_t u) {
  return shunt_f32_isnan(u) ? SHUNT_F32_NAN : u;
}

SHUNT_HD uint32_t shunt_add_f32(uint32_t a, uint32_t b) {
  float x = shunt_f32_from_bits(a), y = shunt_f32_from_bits(b), r;
#if SHUNT_OPS_DEV
  asm("add.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(x), "f"(y));
#else
  r = x + y;
#endif
  return shunt_f32_canon(shunt_f32_bits(r));
}

SHUNT_HD uint32_t shunt_mul_f32(uint32_t a, uint32_t b) {
  float x = shunt_f32_from_bits(a), y = shunt_f32_from_bits(b), r;
#if SHUNT_OPS_DEV
  asm("mul.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(x), "f"(y));
#else
  r = x * y;
#endif
  return shunt_f32_canon(shunt_f32_bits(r));
}

/* Double: NaN operands are handled before the arithmetic so that host and device agree whatever
 * the host's own NaN rules (x86 and Arm differ) or the compiler's operand order. */
SHUNT_HD uint64_t shunt_f64_result(double r) {
  uint64_t u = shunt_f64_bits(r);
  return shunt_f64_isnan(u) ? SHUNT_F64_DEFAULT_NAN : u;
}

SHUNT_HD uint64_t shunt_add_f64(uint64_t a, uint64_t b) {
  if (shunt_f64_isnan(b)) return shunt_f64_quiet(b);
  if (shunt_f64_isnan(a)) return shunt_f64_quiet(a);
  double x = shunt_f64_from_bits(a), y = shunt_f64_from_bits(b), r;
#if SHUNT_OPS_DEV
  asm("add.rn.f64 %0, %1, %2;" : "=d"(r) : "d"(x), "d"(y));
#else
  r = x + y;
#endif
  return shunt_f64_result(r);
}

SHUNT_HD uint64_t shunt_mul_f64(uint64_t a, uint64_t b) {
  if (shunt_f64_isnan(b)) return shunt_f64_quiet(b);
  if (shunt_f64_isnan(a)) return shunt_f64_quiet(a);
  double x = shunt_f64_from_bits(a), y = shunt_f64_from_bits(b), r;
#if SHUNT_OPS_DEV
  asm("mul.rn.f64 %0, %1, %2;" : "=d"(r) : "d"(x), "d"(y));
#else
  r = x * y;
#endif
  return shunt_f64_result(r);
}

/* a * b + c rounded once. A NaN operand comes out quieted, a's before c's before b's: what the
 * GPU's double fma does with its operands in this order (NCCL's kernels compute
 * scalar * input + partial). */
SHUNT_HD uint64_t shunt_fma_f64(uint64_t a, uint64_t b, uint64_t c) {
  if (shunt_f64_isnan(a)) return shunt_f64_quiet(a);
  if (shunt_f64_isnan(c)) return shunt_f64_quiet(c);
  if (shunt_f64_isnan(b)) return shunt_f64_quiet(b);
  double x = shunt_f64_from_bits(a), y = shunt_f64_from_bits(b), z = shunt_f64_from_bits(c), r;
#if SHUNT_OPS_DEV
  asm("fma.rn.f64 %0, %1, %2, %3;" : "=d"(r) : "d"(x), "d"(y), "d"(z));
#else
  r = fma(x, y, z);
#endif
  return shunt_f64_result(r);
}

/* Double arithmetic that no compiler fuses (device intrinsics round each step themselves). */
SHUNT_HD double shunt_dmul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
SHUNT_HD double shunt_dadd(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
SHUNT_HD double shunt_dsub(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dsub_rn(a, b);
#else
  return a - b;
#endif
}

/* x * y + z for x, y, z whose product is exact in double (half, bfloat16 and float operands),
 * rounded to double with round-to-odd: the sum is rounded to nearest, its exact error found by
 * TwoSum, and an inexact even result moved one step toward the exact value. One further rounding
 * to a format of at most 51 bits then equals rounding the exact x * y + z once. */
SHUNT_HD double shunt_fma_odd_sw(double x, double y, double z) {
  double p = shunt_dmul(x, y), r = shunt_dadd(p, z);
  uint64_t rb = shunt_f64_bits(r);
  if ((rb & 0x7ff0000000000000ull) == 0x7ff0000000000000ull) return r; /* inf or NaN: nothing to fix */
  double zr = shunt_dsub(r, p), pr = shunt_dsub(r, zr); /* the parts of r that came from z and from p */
  double e = shunt_dadd(shunt_dsub(p, pr), shunt_dsub(z, zr));
  uint64_t eb = shunt_f64_bits(e);
  if ((eb << 1) != 0 && !(rb & 1))
    rb = ((eb ^ rb) >> 63) ? rb - 1 : rb + 1; /* toward e: away from or to zero */
  return shunt_f64_from_bits(rb);
}

/* Half and bfloat16, portable form: the operands are exact in double, a product of two is exact
 * too, and a sum rounded to double first then to the narrow type equals the sum rounded once
 * (53 >= 2*11+2 bits, and no subnormal double can arise), so one rounding from double gives the
 * correctly rounded result. */
SHUNT_HD uint16_t shunt_add_f16_sw(uint16_t a, uint16_t b) {
  return shunt_f64_to_f16_sw((double)shunt_f16_to_f32_sw(a) + (double)shunt_f16_to_f32_sw(b));
}
SHUNT_HD uint16_t shunt_mul_f16_sw(uint16_t a, uint16_t b) {
  return shunt_f64_to_f16_sw((double)shunt_f16_to_f32_sw(a) * (double)shunt_f16_to_f32_sw(b));
}
SHUNT_HD uint16_t shunt_add_bf16_sw(uint16_t a, uint16_t b) {
  return shunt_f64_to_bf16_sw((double)shunt_bf16_to_f32_sw(a) + (double)shunt_bf16_to_f32_sw(b));
}
SHUNT_HD uint16_t shunt_mul_bf16_sw(uint16_t a, uint16_t b) {
  return shunt_f64_to_bf16_sw((double)shunt_bf16_to_f32_sw(a) * (double)shunt_bf16_to_f32_sw(b));
}

SHUNT_HD uint16_t shunt_add_f16(uint16_t a, uint16_t b) {
#if SHUNT_OPS_DEV && __CUDA_ARCH__ >= 530
  unsigned short r;
  asm("add.rn.f16 %0, %1, %2;" : "=h"(r) : "h"(a), "h"(b));
  return r;
#else
  return shunt_add_f16_sw(a, b);
#endif
}

SHUNT_HD uint16_t shunt_mul_f16(uint16_t a, uint16_t b) {
#if SHUNT_OPS_DEV && __CUDA_ARCH__ >= 530
  unsigned short r;
  asm("mul.rn.f16 %0, %1, %2;" : "=h"(r) : "h"(a), "h"(b));
  return r;
#else
  return shunt_mul_f16_sw(a, b);
#endif
}

/* bfloat16 on sm_80+: a + b as fma(a, 1, b) and a * b as fma(a, b, -0), each rounded once (the
 * -0 addend keeps the sign of a zero product). */
SHUNT_HD uint16_t shunt_add_bf16(uint16_t a, uint16_t b) {
#if SHUNT_OPS_DEV && __CUDA_ARCH__ >= 800
  unsigned short r, one = 0x3f80u;
  asm("fma.rn.bf16 %0, %1, %2, %3;" : "=h"(r) : "h"(a), "h"(one), "h"(b));
  return r;
#else
  return shunt_add_bf16_sw(a, b);
#endif
}

SHUNT_HD uint16_t shunt_mul_bf16(uint16_t a, uint16_t b) {
#if SHUNT_OPS_DEV && __CUDA_ARCH__ >= 800
  unsigned short r, mzero = 0x8000u;
  asm("fma.rn.bf16 %0, %1, %2, %3;" : "=h"(r) : "h"(a), "h"(b), "h"(mzero));
  return r;
#else
  return shunt_mul_bf16_sw(a, b);
#endif
}

/* a * b + c rounded once (what the fused PreMulSum combine computes). */
SHUNT_HD uint16_t shunt_fma_f16_sw(uint16_t a, uint16_t b, uint16_t c) {
  return shunt_f64_to_f16_sw(
      shunt_fma_odd_sw(shunt_f16_to_f32_sw(a), shunt_f16_to_f32_sw(b), shunt_f16_to_f32_sw(c)));
}
SHUNT_HD uint16_t shunt_fma_bf16_sw(uint16_t a, uint16_t b, uint16_t c) {
  return shunt_f64_to_bf16_sw(
      shunt_fma_odd_sw(shunt_bf16_to_f32_sw(a), shunt_bf16_to_f32_sw(b), shunt_bf16_to_f32_sw(c)));
}
SHUNT_HD uint32_t shunt_fma_f32_sw(uint32_t a, uint32_t b, uint32_t c) {
  double r = shunt_fma_odd_sw(shunt_f32_from_bits(a), shunt_f32_from_bits(b), shunt_f32_from_bits(c));
#if defined(__CUDA_ARCH__)
  float f = __double2float_rn(r);
#else
  float f = (float)r;
#endif
  return shunt_f32_canon(shunt_f32_bits(f));
}

SHUNT_HD uint16_t shunt_fma_f16(uint16_t a, uint16_t b, uint16_t c) {
#if SHUNT_OPS_DEV && __CUDA_ARCH__ >= 530
  unsigned short r;
  asm("fma.rn.f16 %0, %1, %2, %3;" : "=h"(r) : "h"(a), "h"(b), "h"(c));
  return r;
#else
  return shunt_fma_f16_sw(a, b, c);
#endif
}

SHUNT_HD uint16_t shunt_fma_bf16(uint16_t a, uint16_t b, uint16_t c) {
#if SHUNT_OPS_DEV && __CUDA_ARCH__ >= 800
  unsigned short r;
  asm("fma.rn.bf16 %0, %1, %2, %3;" : "=h"(r) : "h"(a), "h"(b), "h"(c));
  return r;
#else
  return shunt_fma_bf16_sw(a, b, c);
#endif
}

SHUNT_HD uint32_t shunt_fma_f32(uint32_t a, uint32_t b, uint32_t c) {
#if SHUNT_OPS_DEV
  float r;
  asm("fma.rn.f32 %0, %1, %2, %3;"
      : "=f"(r)
      : "f"(shunt_f32_from_bits(a)), "f"(shunt_f32_from_bits(b)), "f"(shunt_f32_from_bits(c)));
  return shunt_f32_canon(shunt_f32_bits(r));
#else
  return shunt_fma_f32_sw(a, b, c);
#endif
}

/* min/max of IEEE bit patterns `width` bits wide. Non-NaN values order by a key that maps the
 * sign-magnitude encoding onto unsigned order (-0 just below +0); this needs no floating compare,
 * so flush-to-zero settings cannot change it. */
SHUNT_HD uint64_t shunt_fkey(uint64_t u, int width) {
  uint64_t sb = 1ull << (width - 1), all = sb | (sb - 1);
  return (u & sb) ? (~u & all) : (u | sb);
}

SHUNT_HD uint64_t shunt_fminmax(uint64_t a, uint64_t b, int width, int a_nan, int b_nan, uint64_t nan,
                                int is_max) {
  if (a_nan) return b_nan ? nan : b;
  if (b_nan) return a;
  uint64_t ka = shunt_fkey(a, width), kb = shunt_fkey(b, width);
  return (is_max ? ka > kb : ka < kb) ? a : b;
}

SHUNT_HD uint16_t shunt_minmax_f16(uint16_t a, uint16_t b, int is_max) {
  return (uint16_t)shunt_fminmax(a, b, 16, shunt_f16_isnan(a), shunt_f16_isnan(b), SHUNT_F16_NAN, is_max);
}
SHUNT_HD uint16_t shunt_minmax_bf16(uint16_t a, uint16_t b, int is_max) {
  return (uint16_t)shunt_fminmax(a, b, 16, shunt_bf16_isnan(a), shunt_bf16_isnan(b), SHUNT_BF16_NAN, is_max);
}
SHUNT_HD uint32_t shunt_minmax_f32(uint32_t a, uint32_t b, int is_max) {
  return (uint32_t)shunt_fminmax(a, b, 32, shunt_f32_isnan(a), shunt_f32_isnan(b), SHUNT_F32_NAN, is_max);
}
SHUNT_HD uint64_t shunt_minmax_f64(uint64_t a, uint64_t b, int is_max) {
  return shunt_fminmax(a, b, 64, shunt_f64_isnan(a), shunt_f64_isnan(b), shunt_f64_quiet(b), is_max);
}

/* fp8: widen to half, operate in half, narrow with saturation. */
SHUNT_HD uint8_t shunt_add_fp8(uint8_t a, uint8_t b, int e5m2) {
  return shunt_f16_to_fp8(shunt_add_f16(shunt_fp8_to_f16(a, e5m2), shunt_fp8_to_f16(b, e5m2)), e5m2);
}
SHUNT_HD uint8_t shunt_mul_fp8(uint8_t a, uint8_t b, int e5m2) {
  return shunt_f16_to_fp8(shunt_mul_f16(shunt_fp8_to_f16(a, e5m2), shunt_fp8_to_f16(b, e5m2)), e5m2);
}
SHUNT_HD uint8_t shunt_minmax_fp8(uint8_t a, uint8_t b, int e5m2, int is_max) {
  return shunt_f16_to_fp8(shunt_minmax_f16(shunt_fp8_to_f16(a, e5m2), shunt_fp8_to_f16(b, e5m2), is_max),
                          e5m2);
}

/* ---- Integer element operations --------------------------------------------------------------- */

SHUNT_HD uint64_t shunt_int_mask(int width) {
  return width >= 64 ? ~0ull : ((1ull << width) - 1);
}

/* Integer reduce on `width`-bit patterns. min/max compare a ^ m with b ^ m as unsigned, with m
 * flipping the sign bit for signed types and every bit for max, as NCCL's FuncMinMax does. */
SHUNT_HD uint64_t shunt_int_reduce(enum shunt_redop kind, uint64_t a, uint64_t b, int width, int is_signed) {
  uint64_t all = shunt_int_mask(width);
  switch (kind) {
    case SHUNT_REDOP_PROD:
      return (a * b) & all;
    case SHUNT_REDOP_MAX:
    case SHUNT_REDOP_MIN: {
      uint64_t m = (is_signed ? (1ull << (width - 1)) : 0) ^ (kind == SHUNT_REDOP_MAX ? all : 0);
      return ((a ^ m) & all) < ((b ^ m) & all) ? a : b;
    }
    default:
      return (a + b) & all; /* SUM, PREMULSUM, SUMPOSTDIV */
  }
}

/* The SUMPOSTDIV post step: x / d, truncating toward zero, x read as signed when is_signed. */
SHUNT_HD uint64_t shunt_int_postdiv(uint64_t x, uint64_t d, int width, int is_signed) {
  uint64_t all = shunt_int_mask(width), sb = 1ull << (width - 1);
  x &= all;
  if (is_signed && (x & sb)) return (0 - ((0 - x) & all) / d) & all;
  return x / d;
}

/* ---- Elements of any type (bit patterns zero-extended in uint64_t) ----------------------------- */

/* op(a, b) at a reduce step. r must be valid (shunt_red_valid). */
SHUNT_HD uint64_t shunt_reduce_elem(const struct shunt_red* r, uint64_t a, uint64_t b) {
  enum shunt_redop k = r->kind;
  int is_max = k == SHUNT_REDOP_MAX, is_minmax = k == SHUNT_REDOP_MIN || k == SHUNT_REDOP_MAX;
  switch (r->ty) {
    case SHUNT_DT_INT8:
      return shunt_int_reduce(k, a, b, 8, 1);
    case SHUNT_DT_UINT8:
      return shunt_int_reduce(k, a, b, 8, 0);
    case SHUNT_DT_INT32:
      return shunt_int_reduce(k, a, b, 32, 1);
    case SHUNT_DT_UINT32:
      return shunt_int_reduce(k, a, b, 32, 0);
    case SHUNT_DT_INT64:
      return shunt_int_reduce(k, a, b, 64, 1);
    case SHUNT_DT_UINT64:
      return shunt_int_reduce(k, a, b, 64, 0);
    case SHUNT_DT_FLOAT16:
      if (is_minmax) return shunt_minmax_f16((uint16_t)a, (uint16_t)b, is_max);
      return k == SHUNT_REDOP_PROD ? shunt_mul_f16((uint16_t)a, (uint16_t)b)
                                 : shunt_add_f16((uint16_t)a, (uint16_t)b);
    case SHUNT_DT_BFLOAT16:
      if (is_minmax) return shunt_minmax_bf16((uint16_t)a, (uint16_t)b, is_max);
      return k == SHUNT_REDOP_PROD ? shunt_mul_bf16((uint16_t)a, (uint16_t)b)
                                 : shunt_add_bf16((uint16_t)a, (uint16_t)b);
    case SHUNT_DT_FLOAT32:
      if (is_minmax) return shunt_minmax_f32((uint32_t)a, (uint32_t)b, is_max);
      return k == SHUNT_REDOP_PROD ? shunt_mul_f32((uint32_t)a, (uint32_t)b)
                                 : shunt_add_f32((uint32_t)a, (uint32_t)b);
    case SHUNT_DT_FLOAT64:
      if (is_minmax) return shunt_minmax_f64(a, b, is_max);
      return k == SHUNT_REDOP_PROD ? shunt_mul_f64(a, b) : shunt_add_f64(a, b);
    case SHUNT_DT_FP8E4M3:
    case SHUNT_DT_FP8E5M2: {
      int e5m2 = SHUNT_FP8_IS_E5M2(r->ty);
      if (is_minmax) return shunt_minmax_fp8((uint8_t)a, (uint8_t)b, e5m2, is_max);
      return k == SHUNT_REDOP_PROD ? shunt_mul_fp8((uint8_t)a, (uint8_t)b, e5m2)
                                 : shunt_add_fp8((uint8_t)a, (uint8_t)b, e5m2);
    }
    default:
      return 0;
  }
}

/* The pre step of one input element: x * scalar for PREMULSUM (in the type; fp8 through half),
 * x itself for every other kind. */
SHUNT_HD uint64_t shunt_pre_elem(const struct shunt_red* r, uint64_t x) {
  if (r->kind != SHUNT_REDOP_PREMULSUM) return x;
  uint64_t s = r->arg;
  switch (r->ty) {
    case SHUNT_DT_INT8:
    case SHUNT_DT_UINT8:
      return (x * s) & 0xffu;
    case SHUNT_DT_INT32:
    case SHUNT_DT_UINT32:
      return (x * s) & 0xffffffffu;
    case SHUNT_DT_INT64:
    case SHUNT_DT_UINT64:
      return x * s;
    case SHUNT_DT_FLOAT16:
      return shunt_mul_f16((uint16_t)x, (uint16_t)s);
    case SHUNT_DT_BFLOAT16:
      return shunt_mul_bf16((uint16_t)x, (uint16_t)s);
    case SHUNT_DT_FLOAT32:
      return shunt_mul_f32((uint32_t)x, (uint32_t)s);
    case SHUNT_DT_FLOAT64:
      return shunt_mul_f64(x, s);
    case SHUNT_DT_FP8E4M3:
      return shunt_mul_fp8((uint8_t)x, (uint8_t)s, 0);
    case SHUNT_DT_FP8E5M2:
      return shunt_mul_fp8((uint8_t)x, (uint8_t)s, 1);
    default:
      return 0;
  }
}

/* NCCL's combine of this rank's raw input x with a partial result acc: acc + pre(x), fused into
 * one rounding (fma(x, scalar, acc)) for PREMULSUM on half, bfloat16, float and double; for every
 * other case exactly reduce(acc, pre(x)). */
SHUNT_HD uint64_t shunt_reduce_pre_elem(const struct shunt_red* r, uint64_t acc, uint64_t x) {
  if (r->kind == SHUNT_REDOP_PREMULSUM) {
    uint64_t s = r->arg;
    switch (r->ty) {
      case SHUNT_DT_FLOAT16:
        return shunt_fma_f16((uint16_t)x, (uint16_t)s, (uint16_t)acc);
      case SHUNT_DT_BFLOAT16:
        return shunt_fma_bf16((uint16_t)x, (uint16_t)s, (uint16_t)acc);
      case SHUNT_DT_FLOAT32:
        return shunt_fma_f32((uint32_t)x, (uint32_t)s, (uint32_t)acc);
      case SHUNT_DT_FLOAT64:
        return shunt_fma_f64(s, x, acc);
      default:
        break;
    }
  }
  return shunt_reduce_elem(r, acc, shunt_pre_elem(r, x));
}

/* The post step of one fully-reduced element: the division of SUMPOSTDIV, x itself otherwise. */
SHUNT_HD uint64_t shunt_post_elem(const struct shunt_red* r, uint64_t x) {
  if (r->kind != SHUNT_REDOP_SUMPOSTDIV) return x;
  int width = (int)shunt_dtype_size(r->ty) * 8;
  if (width == 0 || shunt_dtype_is_float(r->ty) || r->arg == 0) return x;
  return shunt_int_postdiv(x, r->arg, width, shunt_dtype_is_signed_int(r->ty));
}

/* ---- Buffers ------------------------------------------------------------------------------------
 * nbytes must be a whole number of elements; elements need no alignment. dst may be the same
 * buffer as a source (each element is read before it is written), but must not overlap one
 * partially. Each returns 0, or -1 (nothing written) for an invalid op or a partial element.
 * One thread, element by element: the host backend's form. A GPU block loads its own vectors and
 * calls the element (or packed-word) functions, which are the same code. */

SHUNT_HD int shunt_red_buf_ok(const struct shunt_red* r, size_t nbytes) {
  size_t sz = shunt_dtype_size(r->ty);
  return shunt_red_valid(r) && sz && nbytes % sz == 0;
}

/* dst[i] = reduce(a[i], b[i]). */
SHUNT_HD int shunt_reduce_buf(void* dst, const void* a, const void* b, size_t nbytes,
                              const struct shunt_red* r) {
  if (!shunt_red_buf_ok(r, nbytes)) return -1;
  size_t sz = shunt_dtype_size(r->ty);
  for (size_t i = 0; i < nbytes; i += sz) {
    uint64_t x = shunt_dtype_load((const char*)a + i, r->ty), y = shunt_dtype_load((const char*)b + i, r->ty);
    shunt_dtype_store((char*)dst + i, r->ty, shunt_reduce_elem(r, x, y));
  }
  return 0;
}

/* dst[i] = pre(src[i]): a plain copy when the op has no pre step. */
SHUNT_HD int shunt_pre_buf(void* dst, const void* src, size_t nbytes, const struct shunt_red* r) {
  if (!shunt_red_buf_ok(r, nbytes)) return -1;
  size_t sz = shunt_dtype_size(r->ty);
  for (size_t i = 0; i < nbytes; i += sz)
    shunt_dtype_store((char*)dst + i, r->ty, shunt_pre_elem(r, shunt_dtype_load((const char*)src + i, r->ty)));
  return 0;
}

/* dst[i] = post(src[i]): a plain copy when the op has no post step. */
SHUNT_HD int shunt_post_buf(void* dst, const void* src, size_t nbytes, const struct shunt_red* r) {
  if (!shunt_red_buf_ok(r, nbytes)) return -1;
  size_t sz = shunt_dtype_size(r->ty);
  for (size_t i = 0; i < nbytes; i += sz)
    shunt_dtype_store((char*)dst + i, r->ty, shunt_post_elem(r, shunt_dtype_load((const char*)src + i, r->ty)));
  return 0;
}

/* dst[i] = shunt_reduce_pre_elem(acc[i], x[i]): folds this rank's raw input x into a partial
 * result acc the way NCCL does (fused for PREMULSUM on half, bfloat16, float and double). */
SHUNT_HD int shunt_reduce_pre_buf(void* dst, const void* acc, const void* x, size_t nbytes,
                                  const struct shunt_red* r) {
  if (!shunt_red_buf_ok(r, nbytes)) return -1;
  size_t sz = shunt_dtype_size(r->ty);
  for (size_t i = 0; i < nbytes; i += sz) {
    uint64_t u = shunt_dtype_load((const char*)acc + i, r->ty), v = shunt_dtype_load((const char*)x + i, r->ty);
    shunt_dtype_store((char*)dst + i, r->ty, shunt_reduce_pre_elem(r, u, v));
  }
  return 0;
}

/* Byte copy; dst and src must not overlap. */
SHUNT_HD void shunt_copy_buf(void* dst, const void* src, size_t nbytes) {
#if defined(__CUDA_ARCH__)
  for (size_t i = 0; i < nbytes; i++) ((char*)dst)[i] = ((const char*)src)[i];
#else
  if (nbytes) memcpy(dst, src, nbytes);
#endif
}

/* ---- Packed words (16-byte vectors, packet payloads) -------------------------------------------
 * A 4- or 8-byte word as loaded from memory holds size/elem elements in memory order. The element
 * type must not be wider than the word (an 8-byte type cannot live in an LL8 payload). */

SHUNT_HD uint32_t shunt_reduce_w32(const struct shunt_red* r, uint32_t a, uint32_t b) {
  unsigned char x[4], y[4];
  memcpy(x, &a, 4);
  memcpy(y, &b, 4);
  if (shunt_dtype_size(r->ty) > 4 || shunt_reduce_buf(x, x, y, 4, r) != 0) return 0;
  uint32_t out;
  memcpy(&out, x, 4);
  return out;
}

SHUNT_HD uint64_t shunt_reduce_w64(const struct shunt_red* r, uint64_t a, uint64_t b) {
  unsigned char x[8], y[8];
  memcpy(x, &a, 8);
  memcpy(y, &b, 8);
  if (shunt_reduce_buf(x, x, y, 8, r) != 0) return 0;
  uint64_t out;
  memcpy(&out, x, 8);
  return out;
}

SHUNT_HD uint64_t shunt_pre_w64(const struct shunt_red* r, uint64_t a) {
  unsigned char x[8];
  memcpy(x, &a, 8);
  if (shunt_pre_buf(x, x, 8, r) != 0) return 0;
  uint64_t out;
  memcpy(&out, x, 8);
  return out;
}

#endif
