/* Conversions of src/exec/ops/dtype.h against the reference: every half, bfloat16 and fp8 bit
 * pattern, floats on and next to every rounding boundary of each narrow format, a sample of all
 * float bit patterns, and the special cases the CUDA conversions define. */
#include <stdio.h>

#include "common/check.h"
#include "exec/ops/dtype.h"
#include "ops/ref.h"
#include "ops/test_ops.h"

/* Expected narrow code for a float, through the reference. */
static uint32_t want_narrow(const struct ref_fmt* f, float x) {
  return ref_round(f, (double)x);
}

static uint32_t got_narrow(const struct ref_fmt* f, float x) {
  if (f == &ref_f16) return shunt_f32_to_f16(x);
  if (f == &ref_bf16) return shunt_f32_to_bf16(x);
  if (f == &ref_e4m3) return shunt_f32_to_fp8(x, 0);
  return shunt_f32_to_fp8(x, 1);
}

static int narrow_failures;

static void check_narrow(const struct ref_fmt* f, float x) {
  uint32_t got = got_narrow(f, x), want = want_narrow(f, x);
  if (got != want) {
    if (narrow_failures++ < 10)
      fprintf(stderr, "f32 %a (0x%08x) -> %s: got 0x%x want 0x%x\n", (double)x, (unsigned)ref_f32_bits(x),
              f->name, (unsigned)got, (unsigned)want);
    check_failures++;
  }
}

static void test_widen_exhaustive(void) {
  int bad = 0;
  for (uint32_t h = 0; h < 0x10000; h++) {
    double want = ref_decode(&ref_f16, h);
    float got = shunt_f16_to_f32((uint16_t)h);
    uint32_t gb = ref_f32_bits(got);
    int ok = isnan(want) ? gb == SHUNT_F32_NAN : (ref_f32_bits((float)want) == gb);
    if (!ok && bad++ < 5) fprintf(stderr, "f16 0x%04x -> f32 0x%08x\n", (unsigned)h, (unsigned)gb);
    /* Round trip: every non-NaN half comes back unchanged, every NaN comes back canonical. */
    uint16_t back = shunt_f32_to_f16(got);
    if (back != (isnan(want) ? SHUNT_F16_NAN : h) && bad++ < 5)
      fprintf(stderr, "f16 0x%04x round trip gives 0x%04x\n", (unsigned)h, (unsigned)back);

    want = ref_decode(&ref_bf16, h);
    got = shunt_bf16_to_f32((uint16_t)h);
    gb = ref_f32_bits(got);
    ok = isnan(want) ? (gb == h << 16) : (ref_f32_bits((float)want) == gb); /* bf16 -> f32 is a shift */
    if (!ok && bad++ < 5) fprintf(stderr, "bf16 0x%04x -> f32 0x%08x\n", (unsigned)h, (unsigned)gb);
    back = shunt_f32_to_bf16(got);
    if (back != (isnan(want) ? SHUNT_BF16_NAN : h) && bad++ < 5)
      fprintf(stderr, "bf16 0x%04x round trip gives 0x%04x\n", (unsigned)h, (unsigned)back);
  }
  CHECK_EQ_INT(bad, 0);
}

static void test_fp8_exhaustive(void) {
  int bad = 0;
  for (int e5 = 0; e5 < 2; e5++) {
    const struct ref_fmt* f = e5 ? &ref_e5m2 : &ref_e4m3;
    for (uint32_t x = 0; x < 256; x++) {
      double want = ref_decode(f, x);
      uint16_t h = shunt_fp8_to_f16((uint8_t)x, e5);
      float v = shunt_fp8_to_f32((uint8_t)x, e5);
      int ok = isnan(want) ? (h == SHUNT_F16_NAN && ref_f32_bits(v) == SHUNT_F32_NAN)
                           : (ref_decode(&ref_f16, h) == want &&
                              !signbit(ref_decode(&ref_f16, h)) == !signbit(want) && (double)v == want &&
                              !signbit(v) == !signbit(want));
      if (!ok && bad++ < 5) fprintf(stderr, "%s 0x%02x -> f16 0x%04x\n", f->name, (unsigned)x, (unsigned)h);
      /* Back from float and from half: unchanged, except NaN -> canonical and (e5m2) an infinity
       * saturates to the largest finite value. */
      uint32_t expect = isnan(want) ? SHUNT_FP8_NAN : ref_is_inf(f, x) ? ((x & 0x80u) | f->maxfin) : x;
      uint32_t b1 = shunt_f32_to_fp8(v, e5), b2 = shunt_f16_to_fp8(h, e5);
      if ((b1 != expect || b2 != expect) && bad++ < 5)
        fprintf(stderr, "%s 0x%02x round trip gives 0x%02x / 0x%02x\n", f->name, (unsigned)x, (unsigned)b1,
                (unsigned)b2);
    }
  }
  CHECK_EQ_INT(bad, 0);
  /* half -> fp8 for every half: one rounding of the half's value. */
  int bad2 = 0;
  for (uint32_t h = 0; h < 0x10000; h++) {
    for (int e5 = 0; e5 < 2; e5++) {
      const struct ref_fmt* f = e5 ? &ref_e5m2 : &ref_e4m3;
      uint32_t got = shunt_f16_to_fp8((uint16_t)h, e5), want = ref_round(f, ref_decode(&ref_f16, h));
      if (got != want && bad2++ < 5)
        fprintf(stderr, "f16 0x%04x -> %s: got 0x%02x want 0x%02x\n", (unsigned)h, f->name, (unsigned)got,
                (unsigned)want);
    }
  }
  CHECK_EQ_INT(bad2, 0);
}

/* Every representable value, every midpoint between neighbours and the floats just beside them,
 * with both signs: where round-to-nearest-even and overflow decide. */
static void test_boundaries(const struct ref_fmt* f) {
  narrow_failures = 0;
  for (uint32_t c = 0; c <= f->maxfin; c++) {
    float v = (float)f->table[c], mid = (float)((f->table[c] + f->table[c + 1]) / 2);
    float xs[5] = {v, mid, nextafterf(mid, 0.0f), nextafterf(mid, INFINITY), nextafterf(v, INFINITY)};
    for (int i = 0; i < 5; i++) {
      check_narrow(f, xs[i]);
      check_narrow(f, -xs[i]);
    }
  }
}

static void test_sampled(void) {
  narrow_failures = 0;
  struct ref_fmt* fs[4] = {&ref_f16, &ref_bf16, &ref_e4m3, &ref_e5m2};
  for (uint64_t u = 0; u < 0x100000000ull; u += 40009) {
    float x = ref_f32((uint32_t)u);
    for (int i = 0; i < 4; i++) check_narrow(fs[i], x);
  }
  /* Subnormal floats, and floats near each format's smallest step. */
  for (uint32_t u = 0; u < 0x01000000u; u += 997) {
    for (int i = 0; i < 4; i++) {
      check_narrow(fs[i], ref_f32(u));
      check_narrow(fs[i], ref_f32(u | 0x80000000u));
    }
  }
}

/* Behaviour the CUDA conversions define, spelled out. */
static void test_specials(void) {
  float inf = INFINITY, nan = NAN;
  /* half: overflow at 65520 (the midpoint above 65504 rounds to even, i.e. up); NaN canonical. */
  CHECK_EQ_INT(shunt_f32_to_f16(65504.0f), 0x7bff);
  CHECK_EQ_INT(shunt_f32_to_f16(nextafterf(65520.0f, 0.0f)), 0x7bff);
  CHECK_EQ_INT(shunt_f32_to_f16(65520.0f), 0x7c00);
  CHECK_EQ_INT(shunt_f32_to_f16(-inf), 0xfc00);
  CHECK_EQ_INT(shunt_f32_to_f16(nan), 0x7fff);
  CHECK_EQ_INT(shunt_f32_to_f16(-nan), 0x7fff);
  CHECK_EQ_INT(shunt_f32_to_f16(ref_f32(0x7f800001u)), 0x7fff); /* signalling NaN */
  CHECK_EQ_INT(shunt_f32_to_f16(ldexpf(1.0f, -25)), 0x0000);    /* tie between 0 and 2^-24 */
  CHECK_EQ_INT(shunt_f32_to_f16(nextafterf(ldexpf(1.0f, -25), 1.0f)), 0x0001);
  CHECK_EQ_INT(shunt_f32_to_f16(ldexpf(3.0f, -25)), 0x0002); /* tie 1.5 steps -> 2 */
  CHECK_EQ_INT(shunt_f32_to_f16(-0.0f), 0x8000);
  CHECK_EQ_INT(shunt_f32_to_f16(1.0f + ldexpf(1.0f, -11)), 0x3c00); /* tie -> even */
  CHECK_EQ_INT(shunt_f32_to_f16(1.0f + ldexpf(3.0f, -11)), 0x3c02);
  CHECK(ref_f32_bits(shunt_f16_to_f32(0x7c01)) == SHUNT_F32_NAN);
  CHECK(shunt_f16_to_f32(0x0001) == ldexpf(1.0f, -24));
  /* bfloat16 */
  CHECK_EQ_INT(shunt_f32_to_bf16(ref_f32(0x3f808000u)), 0x3f80); /* tie -> even */
  CHECK_EQ_INT(shunt_f32_to_bf16(ref_f32(0x3f818000u)), 0x3f82);
  CHECK_EQ_INT(shunt_f32_to_bf16(ref_f32(0x7f7fffffu)), 0x7f80); /* FLT_MAX rounds to infinity */
  CHECK_EQ_INT(shunt_f32_to_bf16(ref_f32(0x00000001u)), 0x0000);
  CHECK_EQ_INT(shunt_f32_to_bf16(ref_f32(0x00008000u)), 0x0000); /* subnormal tie -> even */
  CHECK_EQ_INT(shunt_f32_to_bf16(ref_f32(0x00018000u)), 0x0002);
  CHECK_EQ_INT(shunt_f32_to_bf16(ref_f32(0xffc00001u)), 0x7fff);
  CHECK_EQ_INT(shunt_f32_to_bf16(-inf), 0xff80);
  /* e4m3: no infinity; 448 is the largest value, everything beyond saturates (satfinite). */
  CHECK_EQ_INT(shunt_f32_to_fp8(448.0f, 0), 0x7e);
  CHECK_EQ_INT(shunt_f32_to_fp8(464.0f, 0), 0x7e);
  CHECK_EQ_INT(shunt_f32_to_fp8(480.0f, 0), 0x7e);
  CHECK_EQ_INT(shunt_f32_to_fp8(1e30f, 0), 0x7e);
  CHECK_EQ_INT(shunt_f32_to_fp8(inf, 0), 0x7e);
  CHECK_EQ_INT(shunt_f32_to_fp8(-inf, 0), 0xfe);
  CHECK_EQ_INT(shunt_f32_to_fp8(nan, 0), 0x7f);
  CHECK_EQ_INT(shunt_f32_to_fp8(-nan, 0), 0x7f);
  CHECK_EQ_INT(shunt_f32_to_fp8(ldexpf(1.0f, -10), 0), 0x00); /* half the smallest step: tie -> 0 */
  CHECK_EQ_INT(shunt_f32_to_fp8(ldexpf(3.0f, -10), 0), 0x02);
  CHECK_EQ_INT(shunt_f32_to_fp8(-0.0f, 0), 0x80);
  CHECK_EQ_INT(shunt_fp8_to_f16(0xff, 0), 0x7fff);
  CHECK_EQ_INT(shunt_fp8_to_f16(0x01, 0), 0x1800); /* 2^-9 */
  /* e5m2: infinities exist as codes but conversions saturate to 57344. */
  CHECK_EQ_INT(shunt_f32_to_fp8(57344.0f, 1), 0x7b);
  CHECK_EQ_INT(shunt_f32_to_fp8(61440.0f, 1), 0x7b);
  CHECK_EQ_INT(shunt_f32_to_fp8(inf, 1), 0x7b);
  CHECK_EQ_INT(shunt_f32_to_fp8(-inf, 1), 0xfb);
  CHECK_EQ_INT(shunt_f32_to_fp8(nan, 1), 0x7f);
  CHECK_EQ_INT(shunt_fp8_to_f16(0x7c, 1), 0x7c00);
  CHECK_EQ_INT(shunt_fp8_to_f16(0xfd, 1), 0x7fff);
  CHECK_EQ_INT(shunt_f16_to_fp8(0x7c00, 1), 0x7b);
  CHECK_EQ_INT(shunt_f32_to_fp8(ldexpf(1.0f, -17), 1), 0x00);
  CHECK_EQ_INT(shunt_f32_to_fp8(nextafterf(ldexpf(1.0f, -17), 1.0f), 1), 0x01);
}

int test_conv(void) {
  ref_init_all();
  test_widen_exhaustive();
  test_fp8_exhaustive();
  test_boundaries(&ref_f16);
  test_boundaries(&ref_bf16);
  test_boundaries(&ref_e4m3);
  test_boundaries(&ref_e5m2);
  test_sampled();
  test_specials();
  ref_free_all();
  return check_failures;
}
