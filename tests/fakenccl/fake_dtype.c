/* Element loads and stores for every NCCL data type. The narrow floating types are encoded
 * by one routine parameterised by exponent and mantissa width, rounding to nearest even, so
 * that the double stays independent of any converter shunt itself uses. */
#include <math.h>
#include <string.h>

#include "fakenccl/fake_internal.h"

size_t fake_dtype_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      return 8;
    default:
      return 0;
  }
}

int fake_dtype_is_float(ncclDataType_t t) {
  return t >= ncclFloat16 && t <= ncclFloat8e5m2;
}
int fake_dtype_is_signed(ncclDataType_t t) {
  return t == ncclInt8 || t == ncclInt32 || t == ncclInt64;
}

/* A small binary floating format: ebits exponent bits, mbits mantissa bits. e4m3 (OCP "fn")
 * has no infinity and a single NaN mantissa; the others follow IEEE. */
struct small_fmt {
  int ebits, mbits, ieee;
};
static const struct small_fmt F16 = {5, 10, 1}, BF16 = {8, 7, 1}, E4M3 = {4, 3, 0}, E5M2 = {5, 2, 1};

static double small_decode(struct small_fmt f, uint32_t bits) {
  int bias = (1 << (f.ebits - 1)) - 1, emax_field = (1 << f.ebits) - 1;
  uint32_t mant = bits & ((1u << f.mbits) - 1), exp = (bits >> f.mbits) & (uint32_t)emax_field;
  double sign = (bits >> (f.ebits + f.mbits)) & 1 ? -1.0 : 1.0;
  if (f.ieee && exp == (uint32_t)emax_field) return mant ? NAN : sign * INFINITY;
  if (!f.ieee && exp == (uint32_t)emax_field && mant == (1u << f.mbits) - 1) return NAN;
  if (exp == 0) return sign * ldexp((double)mant, 1 - bias - f.mbits);
  return sign * ldexp((double)(mant | (1u << f.mbits)), (int)exp - bias - f.mbits);
}

static uint32_t small_encode(struct small_fmt f, double v) {
  int bias = (1 << (f.ebits - 1)) - 1, emax_field = (1 << f.ebits) - 1;
  uint32_t sign = signbit(v) ? 1u << (f.ebits + f.mbits) : 0;
  uint32_t nan = ((uint32_t)emax_field << f.mbits) | ((1u << f.mbits) - 1);
  /* the largest finite value: IEEE formats stop one exponent short of the top; e4m3 uses
   * the top exponent with every mantissa but the NaN one */
  uint32_t max_bits = f.ieee ? ((uint32_t)(emax_field - 1) << f.mbits) | ((1u << f.mbits) - 1) : nan - 1;
  uint32_t inf = f.ieee ? (uint32_t)emax_field << f.mbits : max_bits;
  if (isnan(v)) return sign | nan;
  double a = fabs(v);
  if (isinf(a)) return sign | inf;
  if (a == 0) return sign;
  int e;
  frexp(a, &e);
  e -= 1; /* a = 1.m * 2^e */
  if (e < 1 - bias) e = 1 - bias;
  double r = nearbyint(ldexp(a, f.mbits - e)); /* the current rounding mode: nearest even */
  if (r >= ldexp(1, f.mbits + 1)) {
    r /= 2;
    e++;
  }
  uint32_t m = (uint32_t)r, bits;
  if (m < (1u << f.mbits)) {
    bits = m; /* subnormal */
  } else {
    long field = e + bias;
    if (field > emax_field || (f.ieee && field == emax_field)) return sign | inf;
    bits = ((uint32_t)field << f.mbits) | (m & ((1u << f.mbits) - 1));
    if (bits > max_bits) return sign | inf; /* e4m3 saturates rather than produce NaN */
  }
  return sign | bits;
}

double fake_load_f(ncclDataType_t t, const void* p, size_t i) {
  const unsigned char* b = p;
  switch (t) {
    case ncclFloat32: {
      float v;
      memcpy(&v, b + 4 * i, 4);
      return v;
    }
    case ncclFloat64: {
      double v;
      memcpy(&v, b + 8 * i, 8);
      return v;
    }
    case ncclFloat16:
    case ncclBfloat16: {
      uint16_t v;
      memcpy(&v, b + 2 * i, 2);
      return small_decode(t == ncclFloat16 ? F16 : BF16, v);
    }
    case ncclFloat8e4m3:
      return small_decode(E4M3, b[i]);
    case ncclFloat8e5m2:
      return small_decode(E5M2, b[i]);
    default:
      return (double)(int64_t)fake_load_u(t, p, i);
  }
}

void fake_store_f(ncclDataType_t t, void* p, size_t i, double v) {
  unsigned char* b = p;
  switch (t) {
    case ncclFloat32: {
      float f = (float)v;
      memcpy(b + 4 * i, &f, 4);
      break;
    }
    case ncclFloat64:
      memcpy(b + 8 * i, &v, 8);
      break;
    case ncclFloat16:
    case ncclBfloat16: {
      uint16_t h = (uint16_t)small_encode(t == ncclFloat16 ? F16 : BF16, v);
      memcpy(b + 2 * i, &h, 2);
      break;
    }
    case ncclFloat8e4m3:
      b[i] = (unsigned char)small_encode(E4M3, v);
      break;
    case ncclFloat8e5m2:
      b[i] = (unsigned char)small_encode(E5M2, v);
      break;
    default:
      break;
  }
}

uint64_t fake_load_u(ncclDataType_t t, const void* p, size_t i) {
  const unsigned char* b = p;
  switch (t) {
    case ncclInt8:
      return (uint64_t)(int64_t)(int8_t)b[i];
    case ncclUint8:
      return b[i];
    case ncclInt32: {
      int32_t v;
      memcpy(&v, b + 4 * i, 4);
      return (uint64_t)(int64_t)v;
    }
    case ncclUint32: {
      uint32_t v;
      memcpy(&v, b + 4 * i, 4);
      return v;
    }
    case ncclInt64:
    case ncclUint64: {
      uint64_t v;
      memcpy(&v, b + 8 * i, 8);
      return v;
    }
    default:
      return 0;
  }
}

/* Stores the low bits: integer arithmetic wraps as it does in the type. */
void fake_store_u(ncclDataType_t t, void* p, size_t i, uint64_t v) {
  unsigned char* b = p;
  size_t n = fake_dtype_size(t);
  for (size_t k = 0; k < n; k++) b[n * i + k] = (unsigned char)(v >> (8 * k)); /* little endian */
}
