/* Element types, conversions and reduction operators with the numerics of NCCL's kernels.
 *
 * Promises:
 * - Types and ops are util/vocab.h's enum shunt_dtype and enum shunt_redop, the ones every layer
 *   below the API uses; nothing here has an encoding of its own.
 * - Narrowing conversions round to nearest, ties to even, and treat NaN, infinities, overflow and
 *   subnormals as the CUDA device conversions do: __float2half_rn (cvt.rn.f16.f32),
 *   __float2bfloat16_rn (cvt.rn.bf16.f32) and __nv_cvt_float_to_fp8(x, __NV_SATFINITE, ...)
 *   (cvt.rn.satfinite.{e4m3,e5m2}x2): half and bfloat16 overflow to infinity, fp8 saturates to its
 *   largest finite value (infinities too), and every NaN becomes the canonical NaN of the target.
 * - struct shunt_red describes one reduction the way NCCL's device op does (ncclDevRedOpFull): avg
 *   becomes PreMulSum by 1/nranks (floating types) or a sum divided by nranks at the end (integers).
 * - Everything is compiled by a C11 compiler for the host and by nvcc for host and device. On the
 *   device, an instruction with the same results replaces the portable code where the architecture
 *   has one; the portable forms (*_sw) stay callable everywhere so the two can be compared.
 *
 * Needs IEEE binary32/binary64 arithmetic evaluated in its own precision (FLT_EVAL_METHOD 0) and
 * no contraction of a*b+c into one fma on the host (ISO C mode, e.g. -std=c11, or -ffp-contract=off).
 * Device arithmetic goes through explicit round-to-nearest instructions, so nvcc's -fmad and -ftz
 * settings do not change results. */
#ifndef SHUNT_EXEC_OPS_DTYPE_H
#define SHUNT_EXEC_OPS_DTYPE_H

#include <float.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "util/vocab.h"

#if defined(__CUDACC__)
#define SHUNT_HD __host__ __device__ inline
#else
#define SHUNT_HD static inline
#endif

/* Device code uses hardware conversions and arithmetic unless SHUNT_OPS_SOFT asks for the
 * portable code everywhere. */
#if defined(__CUDA_ARCH__) && !defined(SHUNT_OPS_SOFT)
#define SHUNT_OPS_DEV 1
#else
#define SHUNT_OPS_DEV 0
#endif

#if !defined(__CUDA_ARCH__) && defined(FLT_EVAL_METHOD) && FLT_EVAL_METHOD != 0
#error "exec/ops needs float and double arithmetic evaluated in their own precision (FLT_EVAL_METHOD 0)"
#endif
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "exec/ops assumes little-endian memory (packet words and packed elements)"
#endif

/* ---- Bit patterns ------------------------------------------------------------------------------ */

/* The NaN that half, bfloat16, float and fp8 operations return, whatever NaN went in (all payload
 * bits set, sign clear). Double precision differs: NaN operands propagate, quieted, and an invalid
 * operation (inf - inf, 0 * inf) gives SHUNT_F64_DEFAULT_NAN, as the GPU's double unit does. */
#define SHUNT_F16_NAN 0x7fffu
#define SHUNT_BF16_NAN 0x7fffu
#define SHUNT_F32_NAN 0x7fffffffu
#define SHUNT_FP8_NAN 0x7fu
#define SHUNT_F64_DEFAULT_NAN 0xfff8000000000000ull

SHUNT_HD uint32_t shunt_f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
#endif
}

SHUNT_HD float shunt_f32_from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
#endif
}

SHUNT_HD uint64_t shunt_f64_bits(double d) {
#if defined(__CUDA_ARCH__)
  return (uint64_t)__double_as_longlong(d);
#else
  uint64_t u;
  memcpy(&u, &d, sizeof u);
  return u;
#endif
}

SHUNT_HD double shunt_f64_from_bits(uint64_t u) {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double((long long)u);
#else
  double d;
  memcpy(&d, &u, sizeof d);
  return d;
#endif
}

SHUNT_HD int shunt_f16_isnan(uint32_t h) {
  return (h & 0x7fffu) > 0x7c00u;
}
SHUNT_HD int shunt_bf16_isnan(uint32_t h) {
  return (h & 0x7fffu) > 0x7f80u;
}
SHUNT_HD int shunt_f32_isnan(uint32_t u) {
  return (u & 0x7fffffffu) > 0x7f800000u;
}
SHUNT_HD int shunt_f64_isnan(uint64_t u) {
  return (u & 0x7fffffffffffffffull) > 0x7ff0000000000000ull;
}
SHUNT_HD uint64_t shunt_f64_quiet(uint64_t u) {
  return u | 0x0008000000000000ull;
}
SHUNT_HD int shunt_e4m3_isnan(uint32_t x) {
  return (x & 0x7fu) == 0x7fu;
}
SHUNT_HD int shunt_e5m2_isnan(uint32_t x) {
  return (x & 0x7fu) > 0x7cu;
}

/* ---- Narrowing: one rounding routine for every narrow format ----------------------------------- */

/* Rounds the double with bits d to a format of `width` bits with `m` stored mantissa bits and
 * exponent bias `bias`, to nearest, ties to even. Encodings above maxfin (the largest finite one)
 * become `ovf` (infinity, or maxfin itself for saturating formats); NaN becomes `nan`. The double
 * carries every float exactly, so float sources are rounded once. */
SHUNT_HD uint32_t shunt_narrow_from_f64_sw(uint64_t d, int m, int bias, int width, uint32_t maxfin,
                                           uint32_t ovf, uint32_t nan) {
  uint32_t sign = (uint32_t)(d >> 63) << (width - 1);
  uint64_t ad = d & 0x7fffffffffffffffull;
  if (ad > 0x7ff0000000000000ull) return nan;
  if (ad == 0x7ff0000000000000ull) return sign | ovf;
  int be = (int)(ad >> 52);
  /* Double subnormals lie far below half of every narrow format's smallest step. */
  if (be == 0) return sign;
  int e = be - 1023;
  uint64_t mant = (ad & 0xfffffffffffffull) | 0x10000000000000ull; /* value = mant * 2^(e-52) */
  int te = e > 1 - bias ? e : 1 - bias;                            /* exponent of the target step */
  int s = 52 - m + (te - e);                                       /* bits that fall below the step */
  uint64_t k = 0;
  if (s < 54) { /* from s == 54 on, mant < 2^53 is below half a step */
    uint64_t rem = mant & ((1ull << s) - 1), halfstep = 1ull << (s - 1);
    k = mant >> s;
    if (rem > halfstep || (rem == halfstep && (k & 1))) k++;
  }
  /* Subnormal targets have te + bias - 1 == 0; a carry out of the mantissa moves into the
   * exponent field by itself. */
  uint64_t enc = ((uint64_t)(te + bias - 1) << m) + k;
  if (enc > maxfin) return sign | ovf;
  return sign | (uint32_t)enc;
}

SHUNT_HD uint16_t shunt_f64_to_f16_sw(double x) {
  return (uint16_t)shunt_narrow_from_f64_sw(shunt_f64_bits(x), 10, 15, 16, 0x7bffu, 0x7c00u, SHUNT_F16_NAN);
}
SHUNT_HD uint16_t shunt_f64_to_bf16_sw(double x) {
  return (uint16_t)shunt_narrow_from_f64_sw(shunt_f64_bits(x), 7, 127, 16, 0x7f7fu, 0x7f80u, SHUNT_BF16_NAN);
}
SHUNT_HD uint8_t shunt_f64_to_e4m3_sw(double x) {
  return (uint8_t)shunt_narrow_from_f64_sw(shunt_f64_bits(x), 3, 7, 8, 0x7eu, 0x7eu, SHUNT_FP8_NAN);
}
SHUNT_HD uint8_t shunt_f64_to_e5m2_sw(double x) {
  return (uint8_t)shunt_narrow_from_f64_sw(shunt_f64_bits(x), 2, 15, 8, 0x7bu, 0x7bu, SHUNT_FP8_NAN);
}

SHUNT_HD uint16_t shunt_f32_to_f16_sw(float x) {
  return shunt_f64_to_f16_sw((double)x);
}
SHUNT_HD uint16_t shunt_f32_to_bf16_sw(float x) {
  return shunt_f64_to_bf16_sw((double)x);
}
SHUNT_HD uint8_t shunt_f32_to_e4m3_sw(float x) {
  return shunt_f64_to_e4m3_sw((double)x);
}
SHUNT_HD uint8_t shunt_f32_to_e5m2_sw(float x) {
  return shunt_f64_to_e5m2_sw((double)x);
}

/* ---- Widening (exact) -------------------------------------------------------------------------- */

SHUNT_HD float shunt_f16_to_f32_sw(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, bits;
  if (e == 0x1f) {
    bits = m ? SHUNT_F32_NAN : (sign | 0x7f800000u);
  } else if (e != 0) {
    bits = sign | ((e + 112u) << 23) | (m << 13);
  } else {
    /* Zero or subnormal: m * 2^-24, a normal float, so one exact multiplication. */
    bits = sign | shunt_f32_bits((float)m * 5.9604644775390625e-8f);
  }
  return shunt_f32_from_bits(bits);
}

SHUNT_HD float shunt_bf16_to_f32_sw(uint16_t h) {
  return shunt_f32_from_bits((uint32_t)h << 16);
}

/* fp8 -> half is exact. NaN becomes the canonical half NaN (sign dropped); e5m2 infinities stay. */
SHUNT_HD uint16_t shunt_e4m3_to_f16_sw(uint8_t x) {
  if ((x & 0x7fu) == 0x7fu) return SHUNT_F16_NAN;
  uint32_t sign = (uint32_t)(x & 0x80u) << 8, e = (x >> 3) & 0xfu, m = x & 7u;
  if (e != 0) return (uint16_t)(sign | ((e + 8u) << 10) | (m << 7));
  if (m == 0) return (uint16_t)sign;
  /* Subnormal m * 2^-9: shift the leading one into the implicit position. */
  uint32_t he = 9;
  while (!(m & 8u)) {
    m <<= 1;
    he--;
  }
  return (uint16_t)(sign | (he << 10) | ((m & 7u) << 7));
}

SHUNT_HD uint16_t shunt_e5m2_to_f16_sw(uint8_t x) {
  uint16_t h = (uint16_t)((uint32_t)x << 8);
  return shunt_f16_isnan(h) ? (uint16_t)SHUNT_F16_NAN : h;
}

/* ---- Dispatch: hardware on the device where it matches, portable code elsewhere ---------------- */

SHUNT_HD float shunt_f16_to_f32(uint16_t h) {
#if SHUNT_OPS_DEV
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
#else
  return shunt_f16_to_f32_sw(h);
#endif
}

SHUNT_HD uint16_t shunt_f32_to_f16(float x) {
#if SHUNT_OPS_DEV
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
  return h;
#else
  return shunt_f32_to_f16_sw(x);
#endif
}

SHUNT_HD float shunt_bf16_to_f32(uint16_t h) {
  return shunt_bf16_to_f32_sw(h);
}

SHUNT_HD uint16_t shunt_f32_to_bf16(float x) {
#if SHUNT_OPS_DEV && __CUDA_ARCH__ >= 800
  unsigned short h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(x));
  return h;
#else
  return shunt_f32_to_bf16_sw(x);
#endif
}

/* fp8 format selector for the generic forms below. */
#define SHUNT_FP8_IS_E5M2(ty) ((ty) == SHUNT_DT_FP8E5M2)

SHUNT_HD uint16_t shunt_fp8_to_f16(uint8_t x, int e5m2) {
#if SHUNT_OPS_DEV && __CUDA_ARCH__ >= 890
  unsigned int h2;
  unsigned short in = x;
  if (e5m2)
    asm("cvt.rn.f16x2.e5m2x2 %0, %1;" : "=r"(h2) : "h"(in));
  else
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"(in));
  return (uint16_t)(h2 & 0xffffu);
#else
  return e5m2 ? shunt_e5m2_to_f16_sw(x) : shunt_e4m3_to_f16_sw(x);
#endif
}

SHUNT_HD float shunt_fp8_to_f32(uint8_t x, int e5m2) {
  return shunt_f16_to_f32(shunt_fp8_to_f16(x, e5m2));
}

SHUNT_HD uint8_t shunt_f32_to_fp8(float x, int e5m2) {
#if SHUNT_OPS_DEV && __CUDA_ARCH__ >= 890
  unsigned short r;
  /* The second source lands in the low byte. */
  if (e5m2)
    asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(r) : "f"(0.0f), "f"(x));
  else
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(0.0f), "f"(x));
  return (uint8_t)(r & 0xffu);
#else
  return e5m2 ? shunt_f32_to_e5m2_sw(x) : shunt_f32_to_e4m3_sw(x);
#endif
}

/* half -> fp8, one rounding (what __nv_fp8_e4m3(__half) and __nv_fp8_e5m2(__half) do). */
SHUNT_HD uint8_t shunt_f16_to_fp8(uint16_t h, int e5m2) {
#if SHUNT_OPS_DEV && __CUDA_ARCH__ >= 890
  unsigned short r;
  unsigned int in = h;
  if (e5m2)
    asm("cvt.rn.satfinite.e5m2x2.f16x2 %0, %1;" : "=h"(r) : "r"(in));
  else
    asm("cvt.rn.satfinite.e4m3x2.f16x2 %0, %1;" : "=h"(r) : "r"(in));
  return (uint8_t)(r & 0xffu);
#else
  float f = shunt_f16_to_f32_sw(h);
  return e5m2 ? shunt_f32_to_e5m2_sw(f) : shunt_f32_to_e4m3_sw(f);
#endif
}

/* ---- Reduction operators ----------------------------------------------------------------------- */

/* kind is never AVG (it becomes PREMULSUM or SUMPOSTDIV) nor OTHER. */
struct shunt_red {
  enum shunt_dtype ty;
  enum shunt_redop kind;
  uint64_t arg; /* PREMULSUM: the scalar's bit pattern in ty (zero-extended); SUMPOSTDIV: the divisor */
};

/* Reads one element of ty from memory as its zero-extended bit pattern. */
SHUNT_HD uint64_t shunt_dtype_load(const void* p, enum shunt_dtype ty) {
  switch (shunt_dtype_size(ty)) {
    case 1: {
      uint8_t v;
      memcpy(&v, p, 1);
      return v;
    }
    case 2: {
      uint16_t v;
      memcpy(&v, p, 2);
      return v;
    }
    case 4: {
      uint32_t v;
      memcpy(&v, p, 4);
      return v;
    }
    case 8: {
      uint64_t v;
      memcpy(&v, p, 8);
      return v;
    }
    default:
      return 0;
  }
}

SHUNT_HD void shunt_dtype_store(void* p, enum shunt_dtype ty, uint64_t bits) {
  switch (shunt_dtype_size(ty)) {
    case 1: {
      uint8_t v = (uint8_t)bits;
      memcpy(p, &v, 1);
      break;
    }
    case 2: {
      uint16_t v = (uint16_t)bits;
      memcpy(p, &v, 2);
      break;
    }
    case 4: {
      uint32_t v = (uint32_t)bits;
      memcpy(p, &v, 4);
      break;
    }
    case 8:
      memcpy(p, &bits, 8);
      break;
    default:
      break;
  }
}

/* avg's scalar as NCCL computes it on the host: 1/nranks in double, rounded to float, then to the
 * type (double keeps the double quotient; half, bfloat16 and fp8 round twice, as NCCL does). */
SHUNT_HD uint64_t shunt_avg_scalar(enum shunt_dtype ty, int nranks) {
  double inv = 1.0 / (double)nranks;
  float finv = (float)inv;
  switch (ty) {
    case SHUNT_DT_FLOAT64:
      return shunt_f64_bits(inv);
    case SHUNT_DT_FLOAT32:
      return shunt_f32_bits(finv);
    case SHUNT_DT_FLOAT16:
      return shunt_f32_to_f16(finv);
    case SHUNT_DT_BFLOAT16:
      return shunt_f32_to_bf16(finv);
    case SHUNT_DT_FP8E4M3:
      return shunt_f32_to_fp8(finv, 0);
    case SHUNT_DT_FP8E5M2:
      return shunt_f32_to_fp8(finv, 1);
    default:
      return 0;
  }
}

/* Builds the reduction for a call's op SUM, PROD, MAX, MIN or AVG on ty in a communicator of
 * nranks ranks (a PreMulSum takes shunt_red_init_premulsum). Returns 0, or -1 (op left zeroed) for an unknown type or op, or
 * avg with nranks < 1. */
SHUNT_HD int shunt_red_init(struct shunt_red* r, enum shunt_redop op, enum shunt_dtype ty, int nranks) {
  r->ty = ty;
  r->kind = SHUNT_REDOP_SUM;
  r->arg = 0;
  if (!shunt_dtype_valid(ty)) return -1;
  switch (op) {
    case SHUNT_REDOP_SUM:
    case SHUNT_REDOP_PROD:
    case SHUNT_REDOP_MAX:
    case SHUNT_REDOP_MIN:
      r->kind = op;
      return 0;
    case SHUNT_REDOP_AVG:
      if (nranks < 1) return -1;
      if (shunt_dtype_is_float(ty)) {
        r->kind = SHUNT_REDOP_PREMULSUM;
        r->arg = shunt_avg_scalar(ty, nranks);
      } else {
        r->kind = SHUNT_REDOP_SUMPOSTDIV;
        r->arg = (uint64_t)nranks;
      }
      return 0;
    default:
      return -1;
  }
}

/* PreMulSum (ncclRedOpCreatePreMulSum): scalar points at one element of ty, as the caller gave it
 * (the value behind a device-resident scalar must be fetched first). Returns 0, or -1 for an
 * unknown type. */
SHUNT_HD int shunt_red_init_premulsum(struct shunt_red* r, enum shunt_dtype ty, const void* scalar) {
  r->ty = ty;
  r->kind = SHUNT_REDOP_SUM;
  r->arg = 0;
  if (!shunt_dtype_valid(ty) || !scalar) return -1;
  r->kind = SHUNT_REDOP_PREMULSUM;
  /* Byte by byte (little-endian): the scalar may be an object of exactly the type's size. */
  for (size_t i = shunt_dtype_size(ty); i-- > 0;) r->arg = r->arg << 8 | ((const unsigned char*)scalar)[i];
  return 0;
}

/* Whether r is a reduction the functions of reduce.h compute. */
SHUNT_HD int shunt_red_valid(const struct shunt_red* r) {
  if (!shunt_dtype_valid(r->ty)) return 0;
  switch (r->kind) {
    case SHUNT_REDOP_SUM:
    case SHUNT_REDOP_PROD:
    case SHUNT_REDOP_MAX:
    case SHUNT_REDOP_MIN:
    case SHUNT_REDOP_PREMULSUM:
      return 1;
    case SHUNT_REDOP_SUMPOSTDIV:
      return !shunt_dtype_is_float(r->ty) && r->arg >= 1 && r->arg <= 0x7fffffffu;
    default:
      return 0;
  }
}

SHUNT_HD int shunt_red_has_pre(const struct shunt_red* r) {
  return r->kind == SHUNT_REDOP_PREMULSUM;
}
SHUNT_HD int shunt_red_has_post(const struct shunt_red* r) {
  return r->kind == SHUNT_REDOP_SUMPOSTDIV;
}

#endif
