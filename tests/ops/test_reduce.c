/* Reductions of src/exec/ops/reduce.h against the reference, for every type and op: exhaustive
 * for fp8, special values and random pairs for the wider types, whole multi-rank reductions with
 * the pre and post steps through the buffer API. */
#include <stdio.h>

#include "common/check.h"
#include "exec/ops/reduce.h"
#include "ops/ref.h"
#include "ops/test_ops.h"

/* ---- Reference per type (kind: SUM, PROD, MAX, MIN) -------------------------------------------- */

static uint64_t ref_int(int ty, int kind, uint64_t a, uint64_t b) {
  switch (ty) {
    case SHUNT_DT_INT8: {
      int x = (int8_t)(uint8_t)a, y = (int8_t)(uint8_t)b; /* sign-extend */
      int r = kind == SHUNT_REDOP_SUM    ? x + y
              : kind == SHUNT_REDOP_PROD ? x * y
              : kind == SHUNT_REDOP_MAX  ? (x > y ? x : y)
                                       : (x < y ? x : y);
      return (uint64_t)(uint32_t)r & 0xffu;
    }
    case SHUNT_DT_INT32: {
      int64_t x = (int32_t)(uint32_t)a, y = (int32_t)(uint32_t)b;
      int64_t r = kind == SHUNT_REDOP_SUM    ? x + y
                  : kind == SHUNT_REDOP_PROD ? x * y
                  : kind == SHUNT_REDOP_MAX  ? (x > y ? x : y)
                                           : (x < y ? x : y);
      return (uint64_t)r & 0xffffffffu;
    }
    case SHUNT_DT_INT64: {
      int64_t x, y;
      memcpy(&x, &a, 8);
      memcpy(&y, &b, 8);
      if (kind == SHUNT_REDOP_MAX) return (uint64_t)(x > y ? x : y);
      if (kind == SHUNT_REDOP_MIN) return (uint64_t)(x < y ? x : y);
#if defined(__SIZEOF_INT128__)
      __int128 r = kind == SHUNT_REDOP_SUM ? (__int128)x + y : (__int128)x * y;
      return (uint64_t)(unsigned __int128)r;
#else
      return kind == SHUNT_REDOP_SUM ? a + b : a * b;
#endif
    }
    case SHUNT_DT_UINT8:
    case SHUNT_DT_UINT32:
    case SHUNT_DT_UINT64: {
      uint64_t mask = ty == SHUNT_DT_UINT8 ? 0xffu : ty == SHUNT_DT_UINT32 ? 0xffffffffu : ~0ull;
      if (kind == SHUNT_REDOP_MAX) return a > b ? a : b;
      if (kind == SHUNT_REDOP_MIN) return a < b ? a : b;
      return (kind == SHUNT_REDOP_SUM ? a + b : a * b) & mask;
    }
    default:
      return 0;
  }
}

static uint64_t ref_elem(int ty, int kind, uint64_t a, uint64_t b) {
  int prod = kind == SHUNT_REDOP_PROD, is_max = kind == SHUNT_REDOP_MAX,
      mm = kind == SHUNT_REDOP_MAX || kind == SHUNT_REDOP_MIN;
  switch (ty) {
    case SHUNT_DT_FLOAT16:
      return mm ? ref_narrow_minmax(&ref_f16, is_max, (uint32_t)a, (uint32_t)b)
                : ref_narrow_op(&ref_f16, prod, (uint32_t)a, (uint32_t)b);
    case SHUNT_DT_BFLOAT16:
      return mm ? ref_narrow_minmax(&ref_bf16, is_max, (uint32_t)a, (uint32_t)b)
                : ref_narrow_op(&ref_bf16, prod, (uint32_t)a, (uint32_t)b);
    case SHUNT_DT_FP8E4M3:
      return mm ? ref_fp8_minmax(&ref_e4m3, is_max, (uint32_t)a, (uint32_t)b)
                : ref_fp8_op(&ref_e4m3, prod, (uint32_t)a, (uint32_t)b);
    case SHUNT_DT_FP8E5M2:
      return mm ? ref_fp8_minmax(&ref_e5m2, is_max, (uint32_t)a, (uint32_t)b)
                : ref_fp8_op(&ref_e5m2, prod, (uint32_t)a, (uint32_t)b);
    case SHUNT_DT_FLOAT32:
      return ref_f32_op(kind, (uint32_t)a, (uint32_t)b);
    case SHUNT_DT_FLOAT64:
      return ref_f64_op(kind, a, b);
    default:
      return ref_int(ty, kind, a, b);
  }
}

/* avg's and PreMulSum's reference: pre multiplies in the type, post divides integer sums. */
static uint64_t ref_pre(int ty, uint64_t scalar, uint64_t x) {
  return ref_elem(ty, SHUNT_REDOP_PROD, x, scalar);
}

static uint64_t ref_post(int ty, uint64_t n, uint64_t x) {
  switch (ty) {
    case SHUNT_DT_INT8:
      return (uint64_t)(uint32_t)((int8_t)(uint8_t)x / (int)n) & 0xffu;
    case SHUNT_DT_INT32:
      return (uint64_t)((int64_t)(int32_t)(uint32_t)x / (int64_t)n) & 0xffffffffu;
    case SHUNT_DT_INT64: {
      int64_t v;
      memcpy(&v, &x, 8);
      return (uint64_t)(v / (int64_t)n);
    }
    default:
      return x / n; /* unsigned */
  }
}

static uint64_t ref_avg_scalar(int ty, int n) {
  float f = (float)(1.0 / n);
  switch (ty) {
    case SHUNT_DT_FLOAT64:
      return ref_f64_bits(1.0 / n);
    case SHUNT_DT_FLOAT32:
      return ref_f32_bits(f);
    case SHUNT_DT_FLOAT16:
      return ref_round(&ref_f16, f);
    case SHUNT_DT_BFLOAT16:
      return ref_round(&ref_bf16, f);
    case SHUNT_DT_FP8E4M3:
      return ref_round(&ref_e4m3, f);
    case SHUNT_DT_FP8E5M2:
      return ref_round(&ref_e5m2, f);
    default:
      return 0;
  }
}

/* NCCL's fused PreMulSum combine acc + x * s (one rounding) for half, bfloat16, float, double. */
static int ref_fusable(int ty) {
  return ty == SHUNT_DT_FLOAT16 || ty == SHUNT_DT_BFLOAT16 || ty == SHUNT_DT_FLOAT32 ||
         ty == SHUNT_DT_FLOAT64;
}

static uint64_t ref_fused(int ty, uint64_t x, uint64_t s, uint64_t acc) {
#if REF_HAVE_WIDE
  switch (ty) {
    case SHUNT_DT_FLOAT16:
      return ref_fma_narrow(&ref_f16, (uint32_t)x, (uint32_t)s, (uint32_t)acc);
    case SHUNT_DT_BFLOAT16:
      return ref_fma_narrow(&ref_bf16, (uint32_t)x, (uint32_t)s, (uint32_t)acc);
    case SHUNT_DT_FLOAT32:
      return ref_fma_narrow(&ref_f32fmt, (uint32_t)x, (uint32_t)s, (uint32_t)acc);
    default:
      return ref_fma_f64(s, x, acc);
  }
#else
  /* No 113-bit type: trust the implementation here (the GPU test checks it against hardware). */
  struct shunt_red r = {ty, SHUNT_REDOP_PREMULSUM, s};
  return shunt_reduce_pre_elem(&r, acc, x);
#endif
}

/* ---- Test values ---------------------------------------------------------------------------------- */

static uint64_t mask_of(int ty) {
  size_t sz = shunt_dtype_size(ty);
  return sz == 8 ? ~0ull : ((1ull << (8 * sz)) - 1);
}

/* Special bit patterns per width: zeros, smallest and largest subnormals and normals, ones,
 * infinities, NaNs of both signs and payloads, and values whose sums round at a tie. */
static const uint16_t specials16_f16[] = {
    0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x0400, 0x3c00, 0xbc00, 0x3c01, 0x3bff, 0x1400, 0x1000, 0x7bff,
    0xfbff, 0x7c00, 0xfc00, 0x7c01, 0x7e00, 0xfe00, 0x7fff, 0x5bff, 0x6800, 0x0200, 0x3555, 0x4248, 0xc248};
static const uint16_t specials16_bf16[] = {0x0000, 0x8000, 0x0001, 0x8001, 0x007f, 0x0080, 0x3f80, 0xbf80,
                                           0x3f81, 0x3f7f, 0x3b80, 0x7f7f, 0xff7f, 0x7f80, 0xff80, 0x7f81,
                                           0x7fc0, 0xffc0, 0x7fff, 0x4b80, 0x3eab, 0x0040, 0x4049, 0xc049};
static const uint32_t specials32[] = {
    0x00000000u, 0x80000000u, 0x00000001u, 0x80000001u, 0x007fffffu, 0x00800000u, 0x3f800000u, 0xbf800000u,
    0x3f800001u, 0x3f7fffffu, 0x33800000u, 0x34000000u, 0x7f7fffffu, 0xff7fffffu, 0x7f800000u, 0xff800000u,
    0x7f800001u, 0x7fc00000u, 0xffc00000u, 0x7fffffffu, 0x4b800000u, 0x3eaaaaabu, 0x00400000u, 0x40490fdbu};
static const uint64_t specials64[] = {0x0ull,
                                      0x8000000000000000ull,
                                      0x1ull,
                                      0x8000000000000001ull,
                                      0x000fffffffffffffull,
                                      0x0010000000000000ull,
                                      0x3ff0000000000000ull,
                                      0xbff0000000000000ull,
                                      0x3ff0000000000001ull,
                                      0x3fefffffffffffffull,
                                      0x3ca0000000000000ull,
                                      0x7fefffffffffffffull,
                                      0xffefffffffffffffull,
                                      0x7ff0000000000000ull,
                                      0xfff0000000000000ull,
                                      0x7ff0000000000001ull,
                                      0x7ff8000000000000ull,
                                      0xfff8000000000000ull,
                                      0x4340000000000000ull,
                                      0x3fd5555555555555ull,
                                      0x400921fb54442d18ull};
static const uint64_t specials_int[] = {0,
                                        1,
                                        2,
                                        3,
                                        0x7f,
                                        0x80,
                                        0xff,
                                        0x7fffffff,
                                        0x80000000u,
                                        0xffffffffu,
                                        0x7fffffffffffffffull,
                                        0x8000000000000000ull,
                                        ~0ull,
                                        0xfe,
                                        0xfffffffeu,
                                        0x12345678u,
                                        0x9abcdef012345678ull};

/* A random element: raw bits half the time; otherwise a value near another random one (same
 * sign and exponent region), so sums cancel and round at interesting places. */
static uint64_t rand_elem(int ty, uint64_t near) {
  uint64_t m = mask_of(ty), r = ref_rand();
  if (!shunt_dtype_is_float(ty) || (r & 1)) return (r >> 1) & m;
  int bits = (int)shunt_dtype_size(ty) * 8;
  return (near ^ ((r >> 8) & ((1ull << (bits / 2)) - 1))) & m;
}

static int elem_failures;

static void check_elem(int ty, int kind, uint64_t a, uint64_t b) {
  struct shunt_red r;
  if (shunt_red_init(&r, kind, ty, 1) != 0) {
    CHECK(0);
    return;
  }
  uint64_t got = shunt_reduce_elem(&r, a, b), want = ref_elem(ty, kind, a, b);
  uint64_t swapped = shunt_reduce_elem(&r, b, a);
  /* Commutative, except which of two double NaNs survives (the second). */
  int two_nans = ty == SHUNT_DT_FLOAT64 && shunt_f64_isnan(a) && shunt_f64_isnan(b);
  if (got != want || (swapped != got && !two_nans)) {
    if (elem_failures++ < 12)
      fprintf(stderr, "%s kind %d: 0x%llx op 0x%llx = 0x%llx (swapped 0x%llx), want 0x%llx\n",
              shunt_dtype_name(ty), kind, (unsigned long long)a, (unsigned long long)b, (unsigned long long)got,
              (unsigned long long)swapped, (unsigned long long)want);
    check_failures++;
  }
}

static void test_fp8_exhaustive(void) {
  elem_failures = 0;
  for (int ty = SHUNT_DT_FP8E4M3; ty <= SHUNT_DT_FP8E5M2; ty++)
    for (int kind = 0; kind < 4; kind++)
      for (uint32_t a = 0; a < 256; a++)
        for (uint32_t b = 0; b < 256; b++) check_elem(ty, kind, a, b);
  /* PreMulSum pre step: every element times every scalar. */
  int bad = 0;
  for (int ty = SHUNT_DT_FP8E4M3; ty <= SHUNT_DT_FP8E5M2; ty++)
    for (uint32_t s = 0; s < 256; s++) {
      struct shunt_red r;
      uint8_t sc = (uint8_t)s;
      CHECK_EQ_INT(shunt_red_init_premulsum(&r, ty, &sc), 0);
      for (uint32_t x = 0; x < 256; x++)
        if (shunt_pre_elem(&r, x) != ref_pre(ty, s, x) && bad++ < 5)
          fprintf(stderr, "%s pre 0x%02x * 0x%02x\n", shunt_dtype_name(ty), (unsigned)x, (unsigned)s);
    }
  CHECK_EQ_INT(bad, 0);
}

static void test_pairs(void) {
  elem_failures = 0;
  for (int kind = 0; kind < 4; kind++) {
    for (size_t i = 0; i < sizeof specials16_f16 / 2; i++)
      for (size_t j = 0; j < sizeof specials16_f16 / 2; j++)
        check_elem(SHUNT_DT_FLOAT16, kind, specials16_f16[i], specials16_f16[j]);
    for (size_t i = 0; i < sizeof specials16_bf16 / 2; i++)
      for (size_t j = 0; j < sizeof specials16_bf16 / 2; j++)
        check_elem(SHUNT_DT_BFLOAT16, kind, specials16_bf16[i], specials16_bf16[j]);
    for (size_t i = 0; i < sizeof specials32 / 4; i++)
      for (size_t j = 0; j < sizeof specials32 / 4; j++)
        check_elem(SHUNT_DT_FLOAT32, kind, specials32[i], specials32[j]);
    for (size_t i = 0; i < sizeof specials64 / 8; i++)
      for (size_t j = 0; j < sizeof specials64 / 8; j++)
        check_elem(SHUNT_DT_FLOAT64, kind, specials64[i], specials64[j]);
    for (int ty = SHUNT_DT_INT8; ty <= SHUNT_DT_UINT64; ty++)
      for (size_t i = 0; i < sizeof specials_int / 8; i++)
        for (size_t j = 0; j < sizeof specials_int / 8; j++)
          check_elem(ty, kind, specials_int[i] & mask_of(ty), specials_int[j] & mask_of(ty));
  }
  /* Random pairs for every non-fp8 type. */
  for (int ty = 0; ty < SHUNT_DT_COUNT; ty++) {
    if (ty == SHUNT_DT_FP8E4M3 || ty == SHUNT_DT_FP8E5M2) continue;
    int n = (ty == SHUNT_DT_FLOAT16 || ty == SHUNT_DT_BFLOAT16) ? 400000 : 100000;
    for (int i = 0; i < n; i++) {
      uint64_t a = rand_elem(ty, 0), b = rand_elem(ty, a);
      for (int kind = 0; kind < 4; kind++) check_elem(ty, kind, a, b);
    }
  }
}

/* The fused combine on random and special triples, and on products that sit exactly on a
 * rounding tie where only a tiny addend decides the direction (what rounding through double
 * would get wrong for bfloat16, float and double). */
static void check_fused(int ty, uint64_t x, uint64_t s, uint64_t acc, int* bad) {
  struct shunt_red r;
  unsigned char sb[8] = {0};
  shunt_dtype_store(sb, ty, s);
  shunt_red_init_premulsum(&r, ty, sb);
  uint64_t got = shunt_reduce_pre_elem(&r, acc, x), want = ref_fused(ty, x, s, acc);
  if (got != want && (*bad)++ < 8)
    fprintf(stderr, "%s fused 0x%llx * 0x%llx + 0x%llx = 0x%llx, want 0x%llx\n", shunt_dtype_name(ty),
            (unsigned long long)x, (unsigned long long)s, (unsigned long long)acc, (unsigned long long)got,
            (unsigned long long)want);
}

static void test_fused(void) {
  int bad = 0;
  const int tys[4] = {SHUNT_DT_FLOAT16, SHUNT_DT_BFLOAT16, SHUNT_DT_FLOAT32, SHUNT_DT_FLOAT64};
  for (int t = 0; t < 4; t++) {
    int ty = tys[t];
    struct shunt_red prod;
    shunt_red_init(&prod, SHUNT_REDOP_PROD, ty, 1);
    for (int i = 0; i < 300000; i++) {
      uint64_t x = rand_elem(ty, 0), s = rand_elem(ty, x), acc;
      uint64_t p = shunt_reduce_elem(&prod, x, s), sign = 1ull << (8 * shunt_dtype_size(ty) - 1);
      switch (ref_rand() % 4) {
        case 0:
          acc = rand_elem(ty, 0);
          break;
        case 1:
          acc = (p ^ sign) ^ (ref_rand() & 3);
          break; /* cancels the product */
        case 2:
          acc = rand_elem(ty, p);
          break; /* near the product */
        default:
          acc = ref_rand() & 0xff;
          break; /* tiny */
      }
      acc &= mask_of(ty);
      check_fused(ty, x, s, acc, &bad);
    }
  }
  /* Exact ties: x * s is a midpoint of the type; the sign of a tiny acc picks the side. */
  check_fused(SHUNT_DT_FLOAT16, 0x3e00 /* 1.5 */, 0x3956 /* 683 * 2^-11 */, 0x0001, &bad);
  check_fused(SHUNT_DT_FLOAT16, 0x3e00, 0x3956, 0x8001, &bad);
  check_fused(SHUNT_DT_BFLOAT16, 0x3fc0 /* 1.5 */, 0x3f36 /* 91 * 2^-7 */, 0x0d80 /* 2^-100 */, &bad);
  check_fused(SHUNT_DT_BFLOAT16, 0x3fc0, 0x3f36, 0x8d80, &bad);
  check_fused(SHUNT_DT_FLOAT32, 0x3fc00000u /* 1.5 */, 0x3f2aaaaeu /* 5592407 * 2^-23 */, 0x00000008u, &bad);
  check_fused(SHUNT_DT_FLOAT32, 0x3fc00000u, 0x3f2aaaaeu, 0x80000008u, &bad);
  check_fused(SHUNT_DT_FLOAT64, 0x3ff8000000000000ull, 0x3fe5555555555556ull, 0x0370000000000000ull, &bad);
  check_fused(SHUNT_DT_FLOAT64, 0x3ff8000000000000ull, 0x3fe5555555555556ull, 0x8370000000000000ull, &bad);
  CHECK_EQ_INT(bad, 0);
  /* The same ties spelled out. */
  struct shunt_red r;
  uint16_t h = 0x3956, b = 0x3f36;
  uint32_t f = 0x3f2aaaaeu;
  uint64_t d = 0x3fe5555555555556ull;
  shunt_red_init_premulsum(&r, SHUNT_DT_FLOAT16, &h);
  CHECK_EQ_INT(shunt_reduce_pre_elem(&r, 0x0001, 0x3e00), 0x3c01);
  CHECK_EQ_INT(shunt_reduce_pre_elem(&r, 0x8001, 0x3e00), 0x3c00);
  CHECK_EQ_INT(shunt_reduce_pre_elem(&r, 0x0000, 0x3e00), 0x3c00);
  CHECK_EQ_INT(shunt_pre_elem(&r, 0x3e00), 0x3c00); /* unfused: the product alone ties to even */
  shunt_red_init_premulsum(&r, SHUNT_DT_BFLOAT16, &b);
  CHECK_EQ_INT(shunt_reduce_pre_elem(&r, 0x0d80, 0x3fc0), 0x3f89);
  CHECK_EQ_INT(shunt_reduce_pre_elem(&r, 0x8d80, 0x3fc0), 0x3f88);
  CHECK_EQ_INT(shunt_reduce_pre_elem(&r, 0x0000, 0x3fc0), 0x3f88);
  shunt_red_init_premulsum(&r, SHUNT_DT_FLOAT32, &f);
  CHECK_EQ_INT(shunt_reduce_pre_elem(&r, 0x00000008u, 0x3fc00000u), 0x3f800003u);
  CHECK_EQ_INT(shunt_reduce_pre_elem(&r, 0x80000008u, 0x3fc00000u), 0x3f800002u);
  shunt_red_init_premulsum(&r, SHUNT_DT_FLOAT64, &d);
  CHECK_EQ_INT(shunt_reduce_pre_elem(&r, 0x0370000000000000ull, 0x3ff8000000000000ull), 0x3ff0000000000001ll);
  CHECK_EQ_INT(shunt_reduce_pre_elem(&r, 0x8370000000000000ull, 0x3ff8000000000000ull), 0x3ff0000000000000ll);
  /* fp8 is never fused: the product is rounded to fp8 before the sum. */
  uint8_t e = 0x38; /* 1.0 in e4m3 */
  shunt_red_init_premulsum(&r, SHUNT_DT_FP8E4M3, &e);
  CHECK_EQ_INT(shunt_reduce_pre_elem(&r, 0x01, 0x39), shunt_reduce_elem(&r, 0x01, shunt_pre_elem(&r, 0x39)));
}

/* The integer post step against C's division, and against division by a reciprocal as NCCL's
 * kernels compute it (q = mulhi(|x|, floor((2^w - 1) / d)), corrected once): the two agree for
 * every width, value and divisor, so exact division is NCCL's result. */
static uint64_t mulhi64(uint64_t a, uint64_t b) {
  uint64_t al = a & 0xffffffffu, ah = a >> 32, bl = b & 0xffffffffu, bh = b >> 32;
  uint64_t ll = al * bl, lh = al * bh, hl = ah * bl, hh = ah * bh;
  uint64_t mid = (ll >> 32) + (lh & 0xffffffffu) + (hl & 0xffffffffu);
  return hh + (lh >> 32) + (hl >> 32) + (mid >> 32);
}

static uint64_t recip_div(uint64_t xabs, uint64_t d, int w) {
  int w2 = w == 64 ? 64 : 32; /* 8-bit types divide in 32 bits */
  uint64_t ones = w2 == 64 ? ~0ull : 0xffffffffull;
  uint64_t recip = ones / d;
  uint64_t q = w2 == 64 ? mulhi64(xabs, recip) : (xabs * recip) >> 32;
  if (xabs - q * d >= d) q += 1;
  return q;
}

static void check_post(int ty, uint64_t x, uint64_t n, int* bad) {
  struct shunt_red r;
  CHECK_EQ_INT(shunt_red_init(&r, SHUNT_REDOP_AVG, ty, (int)n), 0);
  uint64_t got = shunt_post_elem(&r, x), want = ref_post(ty, n, x);
  int w = (int)shunt_dtype_size(ty) * 8, sgn = shunt_dtype_is_signed_int(ty);
  uint64_t m = mask_of(ty), neg = sgn && (x >> (w - 1)) & 1;
  uint64_t xabs = neg ? (0 - x) & m : x;
  uint64_t q = recip_div(xabs, n, w), viarecip = neg ? (0 - q) & m : q;
  if ((got != want || viarecip != want) && (*bad)++ < 5)
    fprintf(stderr, "%s post 0x%llx / %llu = 0x%llx (reciprocal 0x%llx), want 0x%llx\n", shunt_dtype_name(ty),
            (unsigned long long)x, (unsigned long long)n, (unsigned long long)got,
            (unsigned long long)viarecip, (unsigned long long)want);
}

static void test_postdiv(void) {
  int bad = 0;
  for (uint64_t n = 1; n <= 300; n++)
    for (uint64_t x = 0; x < 256; x++) {
      check_post(SHUNT_DT_INT8, x, n, &bad);
      check_post(SHUNT_DT_UINT8, x, n, &bad);
    }
  const uint64_t divisors[] = {1,   2,   3,   5,    7,    8,     9,       16,        24,
                               100, 255, 256, 1000, 4096, 65537, 1000003, 0x7fffffff};
  for (size_t k = 0; k < sizeof divisors / 8; k++)
    for (int i = 0; i < 20000; i++) {
      uint64_t x = i < (int)(sizeof specials_int / 8) ? specials_int[i] : ref_rand();
      for (int ty = SHUNT_DT_INT32; ty <= SHUNT_DT_UINT64; ty++)
        check_post(ty, x & mask_of(ty), divisors[k], &bad);
    }
  CHECK_EQ_INT(bad, 0);
}

static void test_init(void) {
  struct shunt_red r;
  int bad = 0;
  for (int n = 1; n <= 4096; n++)
    for (int ty = SHUNT_DT_FLOAT16; ty < SHUNT_DT_COUNT; ty++) {
      CHECK_EQ_INT(shunt_red_init(&r, SHUNT_REDOP_AVG, ty, n), 0);
      if ((r.kind != SHUNT_REDOP_PREMULSUM || r.arg != ref_avg_scalar(ty, n)) && bad++ < 5)
        fprintf(stderr, "avg scalar %s n=%d: 0x%llx want 0x%llx\n", shunt_dtype_name(ty), n,
                (unsigned long long)r.arg, (unsigned long long)ref_avg_scalar(ty, n));
    }
  CHECK_EQ_INT(bad, 0);
  /* Spot values: 1/3 in half is 0x3555, in e4m3 0.34375 (0x2b), in e5m2 0.3125 (0x35). */
  shunt_red_init(&r, SHUNT_REDOP_AVG, SHUNT_DT_FLOAT16, 3);
  CHECK_EQ_INT(r.arg, 0x3555);
  shunt_red_init(&r, SHUNT_REDOP_AVG, SHUNT_DT_FP8E4M3, 3);
  CHECK_EQ_INT(r.arg, 0x2b);
  shunt_red_init(&r, SHUNT_REDOP_AVG, SHUNT_DT_FP8E5M2, 3);
  CHECK_EQ_INT(r.arg, 0x35);
  for (int ty = 0; ty <= SHUNT_DT_UINT64; ty++) {
    CHECK_EQ_INT(shunt_red_init(&r, SHUNT_REDOP_AVG, ty, 6), 0);
    CHECK_EQ_INT(r.kind, SHUNT_REDOP_SUMPOSTDIV);
    CHECK_EQ_INT(r.arg, 6);
    CHECK(shunt_red_has_post(&r) && !shunt_red_has_pre(&r));
  }
  CHECK_EQ_INT(shunt_red_init(&r, SHUNT_REDOP_AVG, SHUNT_DT_FLOAT32, 0), -1);
  CHECK_EQ_INT(shunt_red_init(&r, 7, SHUNT_DT_FLOAT32, 2), -1);
  CHECK_EQ_INT(shunt_red_init(&r, SHUNT_REDOP_SUM, 12, 2), -1);
  CHECK_EQ_INT(shunt_red_init(&r, SHUNT_REDOP_SUM, -1, 2), -1);
  CHECK_EQ_INT(shunt_red_init_premulsum(&r, SHUNT_DT_FLOAT32, NULL), -1);
  float two = 2.0f;
  CHECK_EQ_INT(shunt_red_init_premulsum(&r, SHUNT_DT_FLOAT32, &two), 0);
  CHECK(shunt_red_valid(&r) && shunt_red_has_pre(&r) && r.arg == 0x40000000u);
  r.kind = SHUNT_REDOP_AVG;
  CHECK(!shunt_red_valid(&r));
  r.kind = SHUNT_REDOP_SUMPOSTDIV;
  CHECK(!shunt_red_valid(&r)); /* not for floating types */
  for (int ty = 0; ty < SHUNT_DT_COUNT; ty++) CHECK(shunt_dtype_size(ty) > 0 && shunt_dtype_name(ty)[0] != '?');
  CHECK_EQ_INT(shunt_dtype_size(SHUNT_DT_COUNT), 0);
}

/* A whole reduction over R ranks as an executor runs it: pre on each rank's input, pairwise
 * reduce in rank order, post once; against the same fold done with the reference. */
#define NE 512

static void fill(int ty, unsigned char* buf) {
  size_t sz = shunt_dtype_size(ty);
  for (size_t i = 0; i < NE; i++) {
    uint64_t v = rand_elem(ty, ref_rand() & mask_of(ty));
    if (shunt_dtype_is_float(ty) && (ref_rand() % 3) != 0) {
      /* Mostly moderate values so that the multi-rank fold stays finite and meaningful. */
      double d = (double)(int64_t)(ref_rand() % 2001) / 64.0 - 15.6;
      switch (ty) {
        case SHUNT_DT_FLOAT16:
          v = ref_round(&ref_f16, d);
          break;
        case SHUNT_DT_BFLOAT16:
          v = ref_round(&ref_bf16, d);
          break;
        case SHUNT_DT_FP8E4M3:
          v = ref_round(&ref_e4m3, d);
          break;
        case SHUNT_DT_FP8E5M2:
          v = ref_round(&ref_e5m2, d);
          break;
        case SHUNT_DT_FLOAT32:
          v = ref_f32_bits((float)d);
          break;
        default:
          v = ref_f64_bits(d);
          break;
      }
    }
    shunt_dtype_store(buf + i * sz, ty, v);
  }
}

static void run_collective(int ty, const struct shunt_red* r, int nranks, int nccl_op, uint64_t scalar) {
  size_t sz = shunt_dtype_size(ty), nb = NE * sz;
  unsigned char in[8][NE * 8], acc[NE * 8], tmp[NE * 8], out[NE * 8];
  for (int k = 0; k < nranks; k++) fill(ty, in[k]);
  /* Under test: rank 0 scales its input into acc; the others fold in, odd ranks through the
   * combine NCCL fuses (shunt_reduce_pre_buf), even ranks through pre then reduce; then post. */
  CHECK_EQ_INT(shunt_pre_buf(acc, in[0], nb, r), 0);
  for (int k = 1; k < nranks; k++) {
    if (k & 1) {
      CHECK_EQ_INT(shunt_reduce_pre_buf(acc, acc, in[k], nb, r), 0);
    } else {
      CHECK_EQ_INT(shunt_pre_buf(tmp, in[k], nb, r), 0);
      CHECK_EQ_INT(shunt_reduce_buf(acc, acc, tmp, nb, r), 0);
    }
  }
  CHECK_EQ_INT(shunt_post_buf(out, acc, nb, r), 0);
  /* Reference. */
  int step = (nccl_op == SHUNT_REDOP_AVG || nccl_op == SHUNT_REDOP_PREMULSUM) ? SHUNT_REDOP_SUM : nccl_op;
  int pre = nccl_op == SHUNT_REDOP_PREMULSUM || (nccl_op == SHUNT_REDOP_AVG && shunt_dtype_is_float(ty));
  int post = nccl_op == SHUNT_REDOP_AVG && !shunt_dtype_is_float(ty);
  int bad = 0;
  for (size_t i = 0; i < NE; i++) {
    uint64_t v = shunt_dtype_load(in[0] + i * sz, ty);
    if (pre) v = ref_pre(ty, scalar, v);
    for (int k = 1; k < nranks; k++) {
      uint64_t x = shunt_dtype_load(in[k] + i * sz, ty);
      if (pre && (k & 1) && ref_fusable(ty)) {
        v = ref_fused(ty, x, scalar, v);
        continue;
      }
      if (pre) x = ref_pre(ty, scalar, x);
      v = ref_elem(ty, step, v, x);
    }
    if (post) v = ref_post(ty, (uint64_t)nranks, v);
    uint64_t got = shunt_dtype_load(out + i * sz, ty);
    if (got != v && bad++ < 3)
      fprintf(stderr, "%s op %d nranks %d elem %zu: 0x%llx want 0x%llx\n", shunt_dtype_name(ty), nccl_op, nranks,
              i, (unsigned long long)got, (unsigned long long)v);
  }
  CHECK_EQ_INT(bad, 0);
}

static void test_collectives(void) {
  for (int ty = 0; ty < SHUNT_DT_COUNT; ty++)
    for (int nranks = 1; nranks <= 8; nranks++) {
      for (int op = SHUNT_REDOP_SUM; op <= SHUNT_REDOP_AVG; op++) {
        struct shunt_red r;
        CHECK_EQ_INT(shunt_red_init(&r, op, ty, nranks), 0);
        run_collective(ty, &r, nranks, op, op == SHUNT_REDOP_AVG ? ref_avg_scalar(ty, nranks) : 0);
      }
      uint64_t s = rand_elem(ty, 0);
      if (ty == SHUNT_DT_FLOAT32) s = ref_f32_bits(0.75f);
      unsigned char sb[8] = {0};
      shunt_dtype_store(sb, ty, s);
      struct shunt_red r;
      CHECK_EQ_INT(shunt_red_init_premulsum(&r, ty, sb), 0);
      run_collective(ty, &r, nranks, SHUNT_REDOP_PREMULSUM, s);
    }
}

/* Buffer API edges: aliasing, partial elements, invalid ops; packed words. */
static void test_buffers(void) {
  struct shunt_red r;
  shunt_red_init(&r, SHUNT_REDOP_SUM, SHUNT_DT_FLOAT16, 1);
  uint16_t a[5] = {0x3c00, 0x4000, 0x7bff, 0xfc00, 0x0001}, b[5] = {0x3c00, 0x3c00, 0x7bff, 0x7c00, 0x0001},
           d[5];
  CHECK_EQ_INT(shunt_reduce_buf(d, a, b, sizeof a, &r), 0);
  CHECK_EQ_INT(d[0], 0x4000);
  CHECK_EQ_INT(d[1], 0x4200);
  CHECK_EQ_INT(d[2], 0x7c00); /* overflow to infinity */
  CHECK_EQ_INT(d[3], 0x7fff); /* inf + -inf */
  CHECK_EQ_INT(d[4], 0x0002);
  CHECK_EQ_INT(shunt_reduce_buf(a, a, b, sizeof a, &r), 0); /* dst is a */
  CHECK(memcmp(a, d, sizeof d) == 0);
  CHECK_EQ_INT(shunt_reduce_buf(d, a, b, 3, &r), -1); /* not a whole element */
  CHECK_EQ_INT(shunt_reduce_buf(d, a, b, 0, &r), 0);
  struct shunt_red bad = r;
  bad.kind = 42;
  CHECK_EQ_INT(shunt_reduce_buf(d, a, b, 2, &bad), -1);
  CHECK_EQ_INT(shunt_pre_buf(d, a, 2, &bad), -1);
  CHECK_EQ_INT(shunt_post_buf(d, a, 2, &bad), -1);

  /* Unaligned elements. */
  unsigned char raw[1 + 3 * 4];
  float fx[3] = {1.5f, -2.0f, 3.25f};
  memcpy(raw + 1, fx, sizeof fx);
  shunt_red_init(&r, SHUNT_REDOP_PROD, SHUNT_DT_FLOAT32, 1);
  CHECK_EQ_INT(shunt_reduce_buf(raw + 1, raw + 1, raw + 1, sizeof fx, &r), 0);
  memcpy(fx, raw + 1, sizeof fx);
  CHECK(fx[0] == 2.25f && fx[1] == 4.0f && fx[2] == 10.5625f);

  /* Words: four halves in 8 bytes, two in 4. */
  shunt_red_init(&r, SHUNT_REDOP_MAX, SHUNT_DT_FLOAT16, 1);
  uint64_t w1 = 0x3c00bc0000017e00ull, w2 = 0xbc003c0080013c00ull;
  CHECK_EQ_INT(shunt_reduce_w64(&r, w1, w2), 0x3c003c0000013c00ll);
  CHECK_EQ_INT(shunt_reduce_w32(&r, 0x00017e00u, 0x80013c00u), 0x00013c00u);
  shunt_red_init(&r, SHUNT_REDOP_SUM, SHUNT_DT_FLOAT64, 1);
  CHECK_EQ_INT(shunt_reduce_w32(&r, 1, 2), 0); /* a double does not fit a 4-byte word */
  shunt_red_init(&r, SHUNT_REDOP_SUM, SHUNT_DT_UINT8, 1);
  CHECK_EQ_INT(shunt_reduce_w32(&r, 0xff01ff01u, 0x02020101u), 0x01030002u);
  float sc = 0.5f;
  shunt_red_init_premulsum(&r, SHUNT_DT_FLOAT32, &sc);
  CHECK_EQ_INT(shunt_pre_w64(&r, 0x4000000040800000ull), 0x3f80000040000000ll);
  uint64_t big = 5;
  shunt_red_init_premulsum(&r, SHUNT_DT_UINT64, &big);
  CHECK_EQ_INT(shunt_pre_elem(&r, 0x4000000000000000ull), 0x4000000000000000ll); /* wraps */

  unsigned char src[16], dst[16];
  for (int i = 0; i < 16; i++) src[i] = (unsigned char)(i * 7);
  shunt_copy_buf(dst, src, 16);
  CHECK(memcmp(dst, src, 16) == 0);
  shunt_copy_buf(NULL, NULL, 0);
}

int test_reduce(void) {
  ref_init_all();
  test_fp8_exhaustive();
  test_pairs();
  test_fused();
  test_postdiv();
  test_init();
  test_collectives();
  test_buffers();
  ref_free_all();
  return check_failures;
}
