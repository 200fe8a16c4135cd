/* Reference numerics for the ops tests, written independently of src/exec/ops: narrow formats are
 * decoded with ldexp and rounded by searching a table of their values, arithmetic is done in a
 * wider type and rounded once. Slow and obvious on purpose. */
#ifndef SHUNT_TEST_OPS_REF_H
#define SHUNT_TEST_OPS_REF_H

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct ref_fmt {
  const char* name;
  int m, bias, width;
  uint32_t maxfin; /* largest finite magnitude code */
  int saturate;    /* overflow gives maxfin (fp8 with __NV_SATFINITE) instead of infinity */
  int has_inf;     /* the all-ones exponent with zero mantissa is infinity (not e4m3) */
  uint32_t nan;    /* canonical NaN code */
  double* table;   /* value of codes 0..maxfin+1 (the last one as if the exponent went on) */
};

static struct ref_fmt ref_f16 = {"f16", 10, 15, 16, 0x7bff, 0, 1, 0x7fff, NULL};
static struct ref_fmt ref_bf16 = {"bf16", 7, 127, 16, 0x7f7f, 0, 1, 0x7fff, NULL};
static struct ref_fmt ref_e4m3 = {"e4m3", 3, 7, 8, 0x7e, 1, 0, 0x7f, NULL};
static struct ref_fmt ref_e5m2 = {"e5m2", 2, 15, 8, 0x7b, 1, 1, 0x7f, NULL};

static inline double ref_code_value(const struct ref_fmt* f, uint32_t c) {
  uint32_t e = c >> f->m, man = c & ((1u << f->m) - 1);
  if (e == 0) return ldexp((double)man, 1 - f->bias - f->m);
  return ldexp((double)((1u << f->m) + man), (int)e - f->bias - f->m);
}

static inline void ref_init(struct ref_fmt* f) {
  if (f->table) return;
  f->table = (double*)malloc(sizeof(double) * (f->maxfin + 2));
  for (uint32_t c = 0; c <= f->maxfin + 1; c++) f->table[c] = ref_code_value(f, c);
}

static inline void ref_init_all(void) {
  ref_init(&ref_f16);
  ref_init(&ref_bf16);
  ref_init(&ref_e4m3);
  ref_init(&ref_e5m2);
}

static inline void ref_free_all(void) {
  struct ref_fmt* all[] = {&ref_f16, &ref_bf16, &ref_e4m3, &ref_e5m2};
  for (int i = 0; i < 4; i++) {
    free(all[i]->table);
    all[i]->table = NULL;
  }
}

static inline int ref_is_nan(const struct ref_fmt* f, uint32_t c) {
  uint32_t mag = c & ((1u << (f->width - 1)) - 1), expall = ((1u << (f->width - 1 - f->m)) - 1) << f->m;
  if (!f->has_inf) return mag == ((1u << (f->width - 1)) - 1);
  return (mag & expall) == expall && (mag & ((1u << f->m) - 1)) != 0;
}

static inline int ref_is_inf(const struct ref_fmt* f, uint32_t c) {
  uint32_t mag = c & ((1u << (f->width - 1)) - 1), expall = ((1u << (f->width - 1 - f->m)) - 1) << f->m;
  return f->has_inf && mag == expall;
}

static inline double ref_decode(const struct ref_fmt* f, uint32_t c) {
  int neg = (c >> (f->width - 1)) & 1;
  uint32_t mag = c & ((1u << (f->width - 1)) - 1);
  double v;
  if (ref_is_nan(f, c)) return NAN;
  if (ref_is_inf(f, c))
    v = INFINITY;
  else
    v = ref_code_value(f, mag);
  return neg ? -v : v;
}

/* Nearest code, ties to the even code; beyond the largest finite value: infinity or saturation. */
static inline uint32_t ref_round(const struct ref_fmt* f, double v) {
  if (isnan(v)) return f->nan;
  uint32_t sign = signbit(v) ? 1u << (f->width - 1) : 0;
  double a = fabs(v);
  uint32_t top = f->maxfin + 1, c;
  if (a >= f->table[top]) {
    c = top;
  } else {
    uint32_t lo = 0, hi = top; /* table[lo] <= a < table[hi] */
    while (hi - lo > 1) {
      uint32_t mid = lo + (hi - lo) / 2;
      if (f->table[mid] <= a)
        lo = mid;
      else
        hi = mid;
    }
    double midv = (f->table[lo] + f->table[hi]) / 2; /* exact: one bit more than the format */
    if (a < midv)
      c = lo;
    else if (a > midv)
      c = hi;
    else
      c = (lo & 1) ? hi : lo;
  }
  if (c > f->maxfin) {
    if (f->saturate)
      c = f->maxfin;
    else
      c = ((1u << (f->width - 1 - f->m)) - 1) << f->m; /* infinity */
  }
  return sign | c;
}

static inline uint32_t ref_f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static inline float ref_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static inline uint64_t ref_f64_bits(double d) {
  uint64_t u;
  memcpy(&u, &d, 8);
  return u;
}
static inline double ref_f64(uint64_t u) {
  double d;
  memcpy(&d, &u, 8);
  return d;
}

/* Narrow arithmetic: exact or innocuously rounded in double, then one reference rounding. */
static inline uint32_t ref_narrow_op(const struct ref_fmt* f, int prod, uint32_t a, uint32_t b) {
  double x = ref_decode(f, a), y = ref_decode(f, b);
  return ref_round(f, prod ? x * y : x + y);
}

/* fp8 arithmetic as NCCL does it: through half. */
static inline uint32_t ref_fp8_op(const struct ref_fmt* f, int prod, uint32_t a, uint32_t b) {
  double x = ref_decode(f, a), y = ref_decode(f, b);
  uint32_t h = ref_round(&ref_f16, prod ? x * y : x + y);
  return ref_round(f, ref_decode(&ref_f16, h));
}

/* min/max on decoded values: a NaN loses to a number, -0 < +0. Returns 0 for a, 1 for b, 2 for
 * "both NaN". */
static inline int ref_pick(double x, double y, int is_max) {
  if (isnan(x) && isnan(y)) return 2;
  if (isnan(x)) return 1;
  if (isnan(y)) return 0;
  if (x != y) return (is_max ? x > y : x < y) ? 0 : 1;
  if (!signbit(x) != !signbit(y)) return (is_max ? !signbit(x) : signbit(x)) ? 0 : 1;
  return 0;
}

static inline uint32_t ref_narrow_minmax(const struct ref_fmt* f, int is_max, uint32_t a, uint32_t b) {
  int p = ref_pick(ref_decode(f, a), ref_decode(f, b), is_max);
  return p == 2 ? f->nan : p == 0 ? a : b;
}

static inline uint32_t ref_fp8_minmax(const struct ref_fmt* f, int is_max, uint32_t a, uint32_t b) {
  double x = ref_decode(f, a), y = ref_decode(f, b);
  int p = ref_pick(x, y, is_max);
  return p == 2 ? f->nan : ref_round(f, p == 0 ? x : y);
}

static inline uint32_t ref_f32_op(int kind, uint32_t a, uint32_t b) { /* kind: 0 sum, 1 prod, 2 max, 3 min */
  float x = ref_f32(a), y = ref_f32(b);
  if (kind >= 2) {
    int p = ref_pick(x, y, kind == 2);
    return p == 2 ? 0x7fffffffu : p == 0 ? a : b;
  }
  double r = kind == 1 ? (double)x * (double)y : (double)x + (double)y;
  float f = (float)r;
  return isnan(f) ? 0x7fffffffu : ref_f32_bits(f);
}

#if defined(__SIZEOF_FLOAT128__) && !defined(__clang__)
typedef __float128 ref_wide;
#define REF_HAVE_WIDE 1
#elif LDBL_MANT_DIG >= 113
typedef long double ref_wide;
#define REF_HAVE_WIDE 1
#else
#define REF_HAVE_WIDE 0
#endif

static inline int ref_f64_nan(uint64_t u) {
  return (u & 0x7fffffffffffffffull) > 0x7ff0000000000000ull;
}
static inline uint64_t ref_f64_quiet(uint64_t u) {
  return u | 0x0008000000000000ull;
}
#define REF_F64_DEFAULT_NAN 0xfff8000000000000ull

/* Double keeps NaN payloads: the second operand's NaN wins, then the first's; invalid gives the
 * default NaN. */
static inline uint64_t ref_f64_op(int kind, uint64_t a, uint64_t b) {
  double x = ref_f64(a), y = ref_f64(b);
  if (kind >= 2) {
    int p = ref_pick(x, y, kind == 2);
    return p == 2 ? ref_f64_quiet(b) : p == 0 ? a : b;
  }
  if (ref_f64_nan(b)) return ref_f64_quiet(b);
  if (ref_f64_nan(a)) return ref_f64_quiet(a);
  double d;
#if REF_HAVE_WIDE
  /* 113 bits hold a product exactly and round a sum innocuously before the final rounding. */
  ref_wide r = kind == 1 ? (ref_wide)x * (ref_wide)y : (ref_wide)x + (ref_wide)y;
  d = (double)r;
#else
  d = kind == 1 ? x * y : x + y;
#endif
  return isnan(d) ? REF_F64_DEFAULT_NAN : ref_f64_bits(d);
}

#if REF_HAVE_WIDE
/* Exact a * b + c in 113 bits, except that a term too small to register at all is reported as
 * the sign of an infinitesimal (*sticky: -1, 0, 1) that only matters at a tie. */
static inline ref_wide ref_fma_wide(double a, double b, double c, int* sticky) {
  ref_wide p = (ref_wide)a * (ref_wide)b, w = p + (ref_wide)c;
  *sticky = 0;
  if (w == p && c != 0) *sticky = c > 0 ? 1 : -1;
  if (w == (ref_wide)c && p != 0) *sticky = p > 0 ? 1 : -1;
  return w;
}

/* Value of code c of f, computed on the fly (formats without a table, like float). */
static inline ref_wide ref_value_w(const struct ref_fmt* f, uint32_t c) {
  return f->table ? (ref_wide)f->table[c] : (ref_wide)ref_code_value(f, c);
}

/* ref_round for a wide value plus an infinitesimal of sign sticky. */
static inline uint32_t ref_round_w(const struct ref_fmt* f, ref_wide v, int sticky) {
  if (__builtin_isnan(v)) return f->nan;
  int neg = v < 0 || (v == 0 && __builtin_signbit(v));
  uint32_t sign = neg ? 1u << (f->width - 1) : 0;
  ref_wide a = neg ? -v : v;
  int up_tie = neg ? sticky < 0 : sticky > 0; /* the infinitesimal points away from zero */
  uint32_t top = f->maxfin + 1, c;
  if (a >= ref_value_w(f, top)) {
    c = top;
  } else {
    uint32_t lo = 0, hi = top;
    while (hi - lo > 1) {
      uint32_t mid = lo + (hi - lo) / 2;
      if (ref_value_w(f, mid) <= a)
        lo = mid;
      else
        hi = mid;
    }
    ref_wide midv = (ref_value_w(f, lo) + ref_value_w(f, hi)) / 2;
    if (a < midv)
      c = lo;
    else if (a > midv)
      c = hi;
    else if (sticky)
      c = up_tie ? hi : lo;
    else
      c = (lo & 1) ? hi : lo;
  }
  if (c > f->maxfin) c = f->saturate ? f->maxfin : ((1u << (f->width - 1 - f->m)) - 1) << f->m;
  return sign | c;
}

static struct ref_fmt ref_f32fmt = {"f32", 23, 127, 32, 0x7f7fffffu, 0, 1, 0x7fffffffu, NULL};

/* Fused a * b + c in a narrow format or float, rounded once; canonical NaN. */
static inline uint32_t ref_fma_narrow(const struct ref_fmt* f, uint32_t a, uint32_t b, uint32_t c) {
  double x, y, z;
  if (f == &ref_f32fmt) {
    x = ref_f32(a), y = ref_f32(b), z = ref_f32(c);
  } else {
    x = ref_decode(f, a), y = ref_decode(f, b), z = ref_decode(f, c);
  }
  int sticky;
  ref_wide w = ref_fma_wide(x, y, z, &sticky);
  return ref_round_w(f, w, sticky);
}

/* Fused a * b + c in double; NaN priority a, c, b (measured on the GPU's double fma). */
static inline uint64_t ref_fma_f64(uint64_t a, uint64_t b, uint64_t c) {
  if (ref_f64_nan(a)) return ref_f64_quiet(a);
  if (ref_f64_nan(c)) return ref_f64_quiet(c);
  if (ref_f64_nan(b)) return ref_f64_quiet(b);
  int sticky;
  ref_wide w = ref_fma_wide(ref_f64(a), ref_f64(b), ref_f64(c), &sticky);
  if (__builtin_isnan(w)) return REF_F64_DEFAULT_NAN;
  double d = (double)w;
  if ((ref_wide)d != w && sticky && !__builtin_isinf(d)) {
    double other = nextafter(d, w > (ref_wide)d ? INFINITY : -INFINITY);
    if ((ref_wide)other - w == w - (ref_wide)d || w - (ref_wide)other == (ref_wide)d - w) {
      /* A tie that the infinitesimal breaks: take the neighbour on its side. */
      double hi = d > other ? d : other, lo = d > other ? other : d;
      d = sticky > 0 ? hi : lo;
    }
  }
  return ref_f64_bits(d);
}
#endif

/* xorshift64*: reproducible test data. */
static uint64_t ref_rng_state = 0x9e3779b97f4a7c15ull;
static inline uint64_t ref_rand(void) {
  uint64_t x = ref_rng_state;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  ref_rng_state = x;
  return x * 0x2545f4914f6cdd1dull;
}

#endif
