/* The ops headers on a GPU: device results against CUDA's intrinsics written as NCCL's kernels write
 * them (__hadd, __hmul, __hmin/__hmax, fminf/fmaxf, the fp8 conversions through half), exhaustively
 * where the domain allows (every float for the conversions, every pair of 16-bit patterns for half
 * and bfloat16 arithmetic, every fp8 pair and scalar); and device results against the host build
 * of the same functions on random elements of every type and op. Exits 77 without a GPU. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <vector>

#include "exec/ops/dtype.h"
#include "exec/ops/packet.h"
#include "exec/ops/reduce.h"

enum {
  K_F32_F16,
  K_F32_F16_SW,
  K_F32_BF16,
  K_F32_BF16_SW,
  K_F32_E4M3,
  K_F32_E4M3_SW,
  K_F32_E5M2,
  K_F32_E5M2_SW,
  K_F16_F32,
  K_F16_F32_SW,
  K_BF16_F32,
  K_FP8_F16,
  K_FP8_F16_SW,
  K_F16_FP8,
  K_F16_FP8_SW,
  K_F16_ADD,
  K_F16_MUL,
  K_F16_MIN,
  K_F16_MAX,
  K_F16_ADD_SW,
  K_F16_MUL_SW,
  K_BF16_ADD,
  K_BF16_MUL,
  K_BF16_MIN,
  K_BF16_MAX,
  K_BF16_ADD_SW,
  K_BF16_MUL_SW,
  K_FP8_SUM,
  K_FP8_PROD,
  K_FP8_MIN,
  K_FP8_MAX,
  K_FP8_PRE,
  K_F32_ADD,
  K_F32_MUL,
  K_F32_MIN,
  K_F32_MAX,
  K_F64_ADD,
  K_F64_MUL,
  K_F64_MIN,
  K_F64_MAX,
  K_F16_FMA,
  K_F16_FMA_SW,
  K_BF16_FMA,
  K_BF16_FMA_SW,
  K_F32_FMA,
  K_F32_FMA_SW,
  K_F64_FMA,
  K_AVG_SCALAR,
  K_PACKETS,
  K_COUNT
};
static const char* kname[K_COUNT] = {
    "f32->f16",     "f32->f16 sw", "f32->bf16",   "f32->bf16 sw", "f32->e4m3",   "f32->e4m3 sw", "f32->e5m2",
    "f32->e5m2 sw", "f16->f32",    "f16->f32 sw", "bf16->f32",    "fp8->f16",    "fp8->f16 sw",  "f16->fp8",
    "f16->fp8 sw",  "f16 add",     "f16 mul",     "f16 min",      "f16 max",     "f16 add sw",   "f16 mul sw",
    "bf16 add",     "bf16 mul",    "bf16 min",    "bf16 max",     "bf16 add sw", "bf16 mul sw",  "fp8 sum",
    "fp8 prod",     "fp8 min",     "fp8 max",     "fp8 premul",   "f32 add",     "f32 mul",      "f32 min",
    "f32 max",      "f64 add",     "f64 mul",     "f64 min",      "f64 max",     "f16 fma",      "f16 fma sw",
    "bf16 fma",     "bf16 fma sw", "f32 fma",     "f32 fma sw",   "f64 fma",     "avg scalar",   "packets"};

struct Report {
  unsigned long long bad[K_COUNT];
  unsigned long long ex[K_COUNT][4][4]; /* a, b, got, want */
};

__device__ void note(Report* r, int k, uint64_t a, uint64_t b, uint64_t got, uint64_t want) {
  if (got == want) return;
  unsigned long long n = atomicAdd(&r->bad[k], 1ull);
  if (n < 4) {
    r->ex[k][n][0] = a;
    r->ex[k][n][1] = b;
    r->ex[k][n][2] = got;
    r->ex[k][n][3] = want;
  }
}

__device__ uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

__device__ uint16_t hb(__half h) {
  return __half_as_ushort(h);
}
__device__ __half hh(uint16_t u) {
  return __ushort_as_half(u);
}
__device__ uint16_t bb(__nv_bfloat16 h) {
  return __bfloat16_as_ushort(h);
}
__device__ __nv_bfloat16 bh(uint16_t u) {
  return __ushort_as_bfloat16(u);
}

/* Every float bit pattern. */
__global__ void k_narrow(Report* r) {
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < (1ull << 32);
       i += (uint64_t)gridDim.x * blockDim.x) {
    float x = __uint_as_float((uint32_t)i);
    uint16_t h = hb(__float2half_rn(x)), b = bb(__float2bfloat16_rn(x));
    uint8_t e4 = __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3),
            e5 = __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2);
    note(r, K_F32_F16, i, 0, shunt_f32_to_f16(x), h);
    note(r, K_F32_F16_SW, i, 0, shunt_f32_to_f16_sw(x), h);
    note(r, K_F32_BF16, i, 0, shunt_f32_to_bf16(x), b);
    note(r, K_F32_BF16_SW, i, 0, shunt_f32_to_bf16_sw(x), b);
    note(r, K_F32_E4M3, i, 0, shunt_f32_to_fp8(x, 0), e4);
    note(r, K_F32_E4M3_SW, i, 0, shunt_f32_to_e4m3_sw(x), e4);
    note(r, K_F32_E5M2, i, 0, shunt_f32_to_fp8(x, 1), e5);
    note(r, K_F32_E5M2_SW, i, 0, shunt_f32_to_e5m2_sw(x), e5);
  }
}

/* Every 16-bit pattern (and every fp8 one). */
__global__ void k_widen(Report* r) {
  uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= 0x10000) return;
  uint16_t u = (uint16_t)i;
  uint32_t want = __float_as_uint(__half2float(hh(u)));
  note(r, K_F16_F32, i, 0, __float_as_uint(shunt_f16_to_f32(u)), want);
  note(r, K_F16_F32_SW, i, 0, __float_as_uint(shunt_f16_to_f32_sw(u)), want);
  note(r, K_BF16_F32, i, 0, __float_as_uint(shunt_bf16_to_f32(u)), __float_as_uint(__bfloat162float(bh(u))));
  for (int e5 = 0; e5 < 2; e5++) {
    __nv_fp8_interpretation_t fm = e5 ? __NV_E5M2 : __NV_E4M3;
    uint8_t want8 = __nv_cvt_halfraw_to_fp8(__half_raw(hh(u)), __NV_SATFINITE, fm);
    note(r, K_F16_FP8, i | (e5 << 16), 0, shunt_f16_to_fp8(u, e5), want8);
    float fu = shunt_f16_to_f32_sw(u);
    note(r, K_F16_FP8_SW, i | (e5 << 16), 0, e5 ? shunt_f32_to_e5m2_sw(fu) : shunt_f32_to_e4m3_sw(fu), want8);
    if (i < 256) {
      uint16_t wh = __half_raw(__nv_cvt_fp8_to_halfraw((uint8_t)i, fm)).x;
      note(r, K_FP8_F16, i | (e5 << 16), 0, shunt_fp8_to_f16((uint8_t)i, e5), wh);
      note(r, K_FP8_F16_SW, i | (e5 << 16), 0,
           e5 ? shunt_e5m2_to_f16_sw((uint8_t)i) : shunt_e4m3_to_f16_sw((uint8_t)i), wh);
    }
  }
}

/* Every pair of 16-bit patterns, as half and as bfloat16. */
__global__ void k_pairs16(Report* r) {
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < (1ull << 32);
       i += (uint64_t)gridDim.x * blockDim.x) {
    uint16_t a = (uint16_t)(i >> 16), b = (uint16_t)i;
    __half x = hh(a), y = hh(b);
    uint16_t add = hb(__hadd(x, y)), mul = hb(__hmul(x, y));
    note(r, K_F16_ADD, a, b, shunt_add_f16(a, b), add);
    note(r, K_F16_MUL, a, b, shunt_mul_f16(a, b), mul);
    note(r, K_F16_MIN, a, b, shunt_minmax_f16(a, b, 0), hb(__hmin(x, y)));
    note(r, K_F16_MAX, a, b, shunt_minmax_f16(a, b, 1), hb(__hmax(x, y)));
    note(r, K_F16_ADD_SW, a, b, shunt_add_f16_sw(a, b), add);
    note(r, K_F16_MUL_SW, a, b, shunt_mul_f16_sw(a, b), mul);
    __nv_bfloat16 p = bh(a), q = bh(b);
    uint16_t badd = bb(__hadd(p, q)), bmul = bb(__hmul(p, q));
    note(r, K_BF16_ADD, a, b, shunt_add_bf16(a, b), badd);
    note(r, K_BF16_MUL, a, b, shunt_mul_bf16(a, b), bmul);
    note(r, K_BF16_MIN, a, b, shunt_minmax_bf16(a, b, 0), bb(__hmin(p, q)));
    note(r, K_BF16_MAX, a, b, shunt_minmax_bf16(a, b, 1), bb(__hmax(p, q)));
    note(r, K_BF16_ADD_SW, a, b, shunt_add_bf16_sw(a, b), badd);
    note(r, K_BF16_MUL_SW, a, b, shunt_mul_bf16_sw(a, b), bmul);
  }
}

/* fp8 as NCCL's sm_90 kernels compute it: through half. Every pair, and every (element, scalar)
 * for the PreMulSum pre step. */
template <typename T>
__device__ void fp8_pair(Report* r, enum shunt_dtype ty, uint8_t a, uint8_t b) {
  __nv_fp8_interpretation_t fm = ty == SHUNT_DT_FP8E5M2 ? __NV_E5M2 : __NV_E4M3;
  T x, y;
  x.__x = a;
  y.__x = b;
  struct shunt_red red;
  uint64_t tag = (uint64_t)ty << 16;
  shunt_red_init(&red, SHUNT_REDOP_SUM, ty, 1);
  note(r, K_FP8_SUM, tag | a, b, shunt_reduce_elem(&red, a, b), T(__hadd(__half(x), __half(y))).__x);
  shunt_red_init(&red, SHUNT_REDOP_PROD, ty, 1);
  note(r, K_FP8_PROD, tag | a, b, shunt_reduce_elem(&red, a, b), T(__hmul(__half(x), __half(y))).__x);
  shunt_red_init(&red, SHUNT_REDOP_MIN, ty, 1);
  note(r, K_FP8_MIN, tag | a, b, shunt_reduce_elem(&red, a, b), T(__hmin(__half(x), __half(y))).__x);
  shunt_red_init(&red, SHUNT_REDOP_MAX, ty, 1);
  note(r, K_FP8_MAX, tag | a, b, shunt_reduce_elem(&red, a, b), T(__hmax(__half(x), __half(y))).__x);
  /* b as the PreMulSum scalar */
  shunt_red_init_premulsum(&red, ty, &b);
  __half s = __half(__nv_cvt_fp8_to_halfraw(b, fm));
  note(r, K_FP8_PRE, tag | a, b, shunt_pre_elem(&red, a), T(__hmul(__half(x), s)).__x);
}

__global__ void k_fp8(Report* r) {
  uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= 0x10000) return;
  fp8_pair<__nv_fp8_e4m3>(r, SHUNT_DT_FP8E4M3, (uint8_t)(i >> 8), (uint8_t)i);
  fp8_pair<__nv_fp8_e5m2>(r, SHUNT_DT_FP8E5M2, (uint8_t)(i >> 8), (uint8_t)i);
}

/* A wide-type operand: raw bits, a special value, or a value near the other operand. */
__device__ uint64_t pick64(uint64_t h, uint64_t other, const uint64_t* sp, int nsp, uint64_t mask) {
  switch (h & 3) {
    case 0:
      return sp[(h >> 8) % nsp];
    case 1:
      return (other ^ ((h >> 8) & 0xffffffull)) & mask;
    default:
      return (h >> 2) & mask;
  }
}

__constant__ uint64_t sp32[] = {0x0,        0x80000000, 0x1,        0x80000001, 0x7fffff,
                                0x800000,   0x3f800000, 0xbf800000, 0x7f7fffff, 0xff7fffff,
                                0x7f800000, 0xff800000, 0x7f800001, 0x7fc00000, 0xffc00000,
                                0x7fffffff, 0xffbfffff, 0x33800000, 0x4b800000};
__constant__ uint64_t sp64[] = {0x0,
                                0x8000000000000000ull,
                                0x1,
                                0x8000000000000001ull,
                                0x000fffffffffffffull,
                                0x0010000000000000ull,
                                0x3ff0000000000000ull,
                                0xbff0000000000000ull,
                                0x7fefffffffffffffull,
                                0xffefffffffffffffull,
                                0x7ff0000000000000ull,
                                0xfff0000000000000ull,
                                0x7ff0000000000001ull,
                                0x7ff8000000000000ull,
                                0xfff8000000000000ull,
                                0x7fffffffffffffffull,
                                0x3ca0000000000000ull};

__global__ void k_wide(Report* r, uint64_t n) {
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
       i += (uint64_t)gridDim.x * blockDim.x) {
    uint64_t h1 = mix(i), h2 = mix(i ^ 0x5555555555555555ull);
    uint32_t a = (uint32_t)pick64(h1, 0, sp32, 19, 0xffffffffu),
             b = (uint32_t)pick64(h2, a, sp32, 19, 0xffffffffu);
    float x = __uint_as_float(a), y = __uint_as_float(b);
    note(r, K_F32_ADD, a, b, shunt_add_f32(a, b), __float_as_uint(x + y));
    note(r, K_F32_MUL, a, b, shunt_mul_f32(a, b), __float_as_uint(x * y));
    note(r, K_F32_MIN, a, b, shunt_minmax_f32(a, b, 0), __float_as_uint(fminf(x, y)));
    note(r, K_F32_MAX, a, b, shunt_minmax_f32(a, b, 1), __float_as_uint(fmaxf(x, y)));
    uint64_t c = pick64(mix(h1), 0, sp64, 17, ~0ull), d = pick64(mix(h2), c, sp64, 17, ~0ull);
    double u = __longlong_as_double((long long)c), v = __longlong_as_double((long long)d);
    note(r, K_F64_ADD, c, d, shunt_add_f64(c, d), (uint64_t)__double_as_longlong(u + v));
    note(r, K_F64_MUL, c, d, shunt_mul_f64(c, d), (uint64_t)__double_as_longlong(u * v));
    note(r, K_F64_MIN, c, d, shunt_minmax_f64(c, d, 0), (uint64_t)__double_as_longlong(fmin(u, v)));
    note(r, K_F64_MAX, c, d, shunt_minmax_f64(c, d, 1), (uint64_t)__double_as_longlong(fmax(u, v)));
  }
}

/* The fused PreMulSum combine x * s + acc against the hardware fma NCCL's kernels end up with
 * (HFMA2, HFMA2.BF16, FFMA, DFMA; the double one with NCCL's operand order s * x + acc). */
__device__ uint64_t pick16(uint64_t h, uint64_t other) {
  switch (h & 3) {
    case 0:
      return (h >> 8) & 0xffff;
    case 1:
      return (other ^ ((h >> 8) & 0xff)) & 0xffff;
    case 2:
      return (h >> 8) & 0x80ff; /* tiny */
    default:
      return ((other ^ 0x8000) ^ ((h >> 8) & 3)) & 0xffff; /* cancels */
  }
}

__global__ void k_fma(Report* r, uint64_t n) {
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
       i += (uint64_t)gridDim.x * blockDim.x) {
    uint64_t h1 = mix(i), h2 = mix(h1), h3 = mix(h2);
    uint16_t x = (uint16_t)(h1 >> 16), s = (uint16_t)pick16(h2, x);
    uint16_t p = shunt_mul_f16(x, s), c = (uint16_t)pick16(h3, p);
    uint16_t want = hb(__hfma(hh(x), hh(s), hh(c)));
    note(r, K_F16_FMA, ((uint64_t)x << 16) | s, c, shunt_fma_f16(x, s, c), want);
    note(r, K_F16_FMA_SW, ((uint64_t)x << 16) | s, c, shunt_fma_f16_sw(x, s, c), want);
    p = shunt_mul_bf16(x, s);
    c = (uint16_t)pick16(h3, p);
    want = bb(__hfma(bh(x), bh(s), bh(c)));
    note(r, K_BF16_FMA, ((uint64_t)x << 16) | s, c, shunt_fma_bf16(x, s, c), want);
    note(r, K_BF16_FMA_SW, ((uint64_t)x << 16) | s, c, shunt_fma_bf16_sw(x, s, c), want);

    uint32_t a = (uint32_t)pick64(h1, 0, sp32, 19, 0xffffffffu),
             b = (uint32_t)pick64(h2, a, sp32, 19, 0xffffffffu);
    uint32_t pf = shunt_mul_f32(a, b), cf;
    switch ((h3 >> 40) & 3) {
      case 0:
        cf = (uint32_t)pick64(h3, 0, sp32, 19, 0xffffffffu);
        break;
      case 1:
        cf = (pf ^ 0x80000000u) ^ (uint32_t)((h3 >> 8) & 0xff);
        break;
      case 2:
        cf = (uint32_t)(h3 >> 8) & 0x800000ffu;
        break;
      default:
        cf = pf ^ (uint32_t)((h3 >> 8) & 0xffff);
        break;
    }
    uint32_t wf = __float_as_uint(__fmaf_rn(__uint_as_float(a), __uint_as_float(b), __uint_as_float(cf)));
    note(r, K_F32_FMA, a, b, shunt_fma_f32(a, b, cf), wf);
    note(r, K_F32_FMA_SW, a, b, shunt_fma_f32_sw(a, b, cf), wf);

    uint64_t da = pick64(mix(h1 + 7), 0, sp64, 17, ~0ull), db = pick64(mix(h2 + 7), da, sp64, 17, ~0ull);
    uint64_t dp = shunt_mul_f64(da, db), dc;
    switch ((h3 >> 44) & 3) {
      case 0:
        dc = pick64(mix(h3), 0, sp64, 17, ~0ull);
        break;
      case 1:
        dc = (dp ^ 0x8000000000000000ull) ^ ((h3 >> 8) & 0xff);
        break;
      case 2:
        dc = (h3 >> 8) & 0x80000000000000ffull;
        break;
      default:
        dc = dp ^ ((h3 >> 8) & 0xffffff);
        break;
    }
    double w = __fma_rn(__longlong_as_double((long long)da), __longlong_as_double((long long)db),
                        __longlong_as_double((long long)dc));
    note(r, K_F64_FMA, da, db, shunt_fma_f64(da, db, dc), (uint64_t)__double_as_longlong(w));
  }
}

/* avg's scalar as NCCL's host code converts it (float(1.0/n), then to the type). */
__global__ void k_avg(Report* r) {
  int n = blockIdx.x * blockDim.x + threadIdx.x + 1;
  if (n > 65536) return;
  float f = float(1.0 / n);
  struct shunt_red red;
  shunt_red_init(&red, SHUNT_REDOP_AVG, SHUNT_DT_FLOAT16, n);
  note(r, K_AVG_SCALAR, n, SHUNT_DT_FLOAT16, red.arg, hb(__float2half(f)));
  shunt_red_init(&red, SHUNT_REDOP_AVG, SHUNT_DT_BFLOAT16, n);
  note(r, K_AVG_SCALAR, n, SHUNT_DT_BFLOAT16, red.arg, bb(__float2bfloat16(f)));
  shunt_red_init(&red, SHUNT_REDOP_AVG, SHUNT_DT_FP8E4M3, n);
  note(r, K_AVG_SCALAR, n, SHUNT_DT_FP8E4M3, red.arg, __nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E4M3));
  shunt_red_init(&red, SHUNT_REDOP_AVG, SHUNT_DT_FP8E5M2, n);
  note(r, K_AVG_SCALAR, n, SHUNT_DT_FP8E5M2, red.arg, __nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E5M2));
  shunt_red_init(&red, SHUNT_REDOP_AVG, SHUNT_DT_FLOAT32, n);
  note(r, K_AVG_SCALAR, n, SHUNT_DT_FLOAT32, red.arg, __float_as_uint(f));
}

/* LL packets through the device's volatile vector accesses: every thread writes one LL16 and one
 * LL8 packet, then reads its neighbour's; the layout is the one of docs/plan-format.md §7.1. */
__global__ void k_packets(Report* r, struct shunt_ll16* p16, struct shunt_ll8* p8, uint32_t flag) {
  uint32_t i = threadIdx.x, j = (i + 1) % blockDim.x;
  shunt_ll16_put(p16 + i, mix(i), flag);
  shunt_ll8_put(p8 + i, (uint32_t)mix(i), flag);
  __syncthreads();
  uint64_t v = 0;
  uint32_t u = 0;
  note(r, K_PACKETS, j, 0, shunt_ll16_wait(p16 + j, flag, 1000, &v) ? v : ~0ull, mix(j));
  note(r, K_PACKETS, j, 1, shunt_ll8_wait(p8 + j, flag, 1000, &u) ? u : ~0ull, (uint32_t)mix(j));
  note(r, K_PACKETS, j, 2, (uint64_t)shunt_ll16_try(p16 + j, flag + 1, &v), 0);
  note(r, K_PACKETS, j, 3, (uint64_t)shunt_ll8_try(p8 + j, flag - 1, &u), 0);
  const volatile uint32_t* w = (const volatile uint32_t*)(p16 + j);
  note(r, K_PACKETS, j, 4, ((uint64_t)w[2] << 32) | w[0], mix(j));
  note(r, K_PACKETS, j, 5, ((uint64_t)w[3] << 32) | w[1], ((uint64_t)flag << 32) | flag);
}

/* Device and host builds of the generic entry points on the same inputs. */
struct Case {
  struct shunt_red red;
  uint64_t a, b;
};

#define NOUT 4
__host__ __device__ void eval_case(const Case& c, uint64_t out[NOUT]) {
  out[0] = shunt_reduce_elem(&c.red, c.a, c.b);
  out[1] = shunt_pre_elem(&c.red, c.a);
  out[2] = shunt_post_elem(&c.red, c.b);
  out[3] = shunt_reduce_pre_elem(&c.red, c.b, c.a);
}

__global__ void k_cases(const Case* cs, uint64_t* out, uint64_t n) {
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
       i += (uint64_t)gridDim.x * blockDim.x)
    eval_case(cs[i], out + NOUT * i);
}

/* Behaviour worth stating, measured on this device. */
__global__ void k_facts(uint64_t* f) {
  volatile float pz = 0.0f, nz = -0.0f, qn = __uint_as_float(0x7fc00001u), one = 1.0f;
  volatile double dqn = __longlong_as_double(0x7ff8000000000001ll), done = 1.0;
  f[0] = __float_as_uint(fminf(pz, nz));
  f[1] = __float_as_uint(fminf(nz, pz));
  f[2] = __float_as_uint(fmaxf(nz, pz));
  f[3] = 0;
  f[4] = __float_as_uint(qn + one);
  f[5] = (uint64_t)__double_as_longlong(dqn + done);
  f[6] = __float_as_uint(__half2float(hh(0x7c01)));
  f[7] = hb(__float2half_rn(__uint_as_float(0xffc00001u)));
  f[8] = __nv_cvt_float_to_fp8(__uint_as_float(0x7f800000u), __NV_SATFINITE, __NV_E5M2);
  f[9] = (uint64_t)__double_as_longlong(fmin((double)nz, (double)pz));
}

#define CU(x)                                                                             \
  do {                                                                                    \
    cudaError_t e_ = (x);                                                                 \
    if (e_ != cudaSuccess) {                                                              \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(1);                                                                            \
    }                                                                                     \
  } while (0)

static uint64_t host_rng = 0x243f6a8885a308d3ull;
static uint64_t hrand() {
  host_rng ^= host_rng >> 12;
  host_rng ^= host_rng << 25;
  host_rng ^= host_rng >> 27;
  return host_rng * 0x2545f4914f6cdd1dull;
}

int main() {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    printf("no GPU: skipped\n");
    return 77;
  }
  cudaDeviceProp prop;
  CU(cudaGetDeviceProperties(&prop, 0));
  printf("device: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
  int cc = prop.major * 10 + prop.minor;

  Report* r;
  CU(cudaMallocManaged(&r, sizeof(Report)));
  memset(r, 0, sizeof(Report));
  k_widen<<<256, 256>>>(r);
  k_fp8<<<256, 256>>>(r);
  k_avg<<<256, 256>>>(r);
  k_narrow<<<4096, 256>>>(r);
  k_pairs16<<<4096, 256>>>(r);
  k_wide<<<4096, 256>>>(r, 1ull << 30);
  k_fma<<<4096, 256>>>(r, 1ull << 30);
  struct shunt_ll16* p16;
  struct shunt_ll8* p8;
  CU(cudaMalloc(&p16, 1024 * sizeof(struct shunt_ll16)));
  CU(cudaMalloc(&p8, 1024 * sizeof(struct shunt_ll8)));
  CU(cudaMemset(p16, 0, 1024 * sizeof(struct shunt_ll16)));
  CU(cudaMemset(p8, 0, 1024 * sizeof(struct shunt_ll8)));
  k_packets<<<1, 1024>>>(r, p16, p8, shunt_pkt_flag_for_epoch(41));
  CU(cudaGetLastError());
  CU(cudaDeviceSynchronize());

  uint64_t* facts;
  CU(cudaMallocManaged(&facts, 16 * sizeof(uint64_t)));
  k_facts<<<1, 1>>>(facts);
  CU(cudaDeviceSynchronize());
  printf("fminf(+0,-0)=%08llx fminf(-0,+0)=%08llx fmaxf(-0,+0)=%08llx\n", (unsigned long long)facts[0],
         (unsigned long long)facts[1], (unsigned long long)facts[2]);
  printf(
      "f32 NaN(0x7fc00001)+1=%08llx f64 NaN(..01)+1=%016llx half2float(0x7c01)=%08llx "
      "float2half(-NaN)=%04llx\n",
      (unsigned long long)facts[4], (unsigned long long)facts[5], (unsigned long long)facts[6],
      (unsigned long long)facts[7]);
  printf("e5m2(+inf, satfinite)=%02llx fmin(-0.0,+0.0)=%016llx\n", (unsigned long long)facts[8],
         (unsigned long long)facts[9]);

  int failed = 0;
  for (int k = 0; k < K_COUNT; k++) {
    /* fp8 conversions are hardware only from sm_89, and NCCL computes fp8 only from sm_90; the
     * bfloat16 arithmetic intrinsics are exact from sm_80. */
    if (r->bad[k]) {
      failed = 1;
      printf("FAIL %-14s %llu mismatches\n", kname[k], r->bad[k]);
      for (int e = 0; e < 4 && (unsigned long long)e < r->bad[k]; e++)
        printf("     a=%llx b=%llx got=%llx want=%llx\n", r->ex[k][e][0], r->ex[k][e][1], r->ex[k][e][2],
               r->ex[k][e][3]);
    } else {
      printf("ok   %s\n", kname[k]);
    }
  }

  /* Device vs host on random cases of every type and reduction. */
  const uint64_t n = 1 << 22;
  std::vector<Case> cs(n);
  for (uint64_t i = 0; i < n; i++) {
    enum shunt_dtype ty = shunt_dtype_from_code((uint32_t)(i % SHUNT_DT_COUNT));
    enum shunt_redop op = shunt_redop_from_code((uint32_t)((i / SHUNT_DT_COUNT) % 6));
    uint64_t m = shunt_dtype_size(ty) == 8 ? ~0ull : ((1ull << (8 * shunt_dtype_size(ty))) - 1);
    Case& c = cs[i];
    c.a = hrand() & m;
    c.b = (hrand() & 1) ? (c.a ^ (hrand() & 0xff)) & m : hrand() & m;
    if (op != SHUNT_REDOP_PREMULSUM) {
      shunt_red_init(&c.red, op, ty, (int)(hrand() % 64) + 1);
    } else {
      uint64_t s = hrand() & m;
      shunt_red_init_premulsum(&c.red, ty, &s);
    }
  }
  Case* dcs;
  uint64_t* dout;
  CU(cudaMalloc(&dcs, n * sizeof(Case)));
  CU(cudaMalloc(&dout, NOUT * n * sizeof(uint64_t)));
  CU(cudaMemcpy(dcs, cs.data(), n * sizeof(Case), cudaMemcpyHostToDevice));
  k_cases<<<1024, 256>>>(dcs, dout, n);
  CU(cudaGetLastError());
  std::vector<uint64_t> out(NOUT * n);
  CU(cudaMemcpy(out.data(), dout, NOUT * n * sizeof(uint64_t), cudaMemcpyDeviceToHost));
  uint64_t mism = 0;
  for (uint64_t i = 0; i < n; i++) {
    uint64_t h[NOUT];
    eval_case(cs[i], h);
    for (int j = 0; j < NOUT; j++)
      if (h[j] != out[NOUT * i + j] && mism++ < 8)
        printf("     host/device: %s kind %s arg %llx a=%llx b=%llx part %d: host %llx device %llx\n",
               shunt_dtype_name(cs[i].red.ty), shunt_redop_name(cs[i].red.kind), (unsigned long long)cs[i].red.arg,
               (unsigned long long)cs[i].a, (unsigned long long)cs[i].b, j, (unsigned long long)h[j],
               (unsigned long long)out[NOUT * i + j]);
  }
  printf("%s host vs device (%llu cases): %llu mismatches\n", mism ? "FAIL" : "ok  ", (unsigned long long)n,
         (unsigned long long)mism);
  if (mism) failed = 1;
  if (cc < 90) printf("note: fp8 results are NCCL's only from sm_90 (NCCL computes no fp8 below it)\n");
  return failed;
}
