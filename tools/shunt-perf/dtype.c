/* Type names and exact encoders. The narrow floating formats (half, bfloat16, fp8 e4m3 and
 * e5m2) share one encoder parameterised by exponent and mantissa width. */
#include "dtype.h"

#include <math.h>
#include <string.h>

static const struct {
  const char* name;
  size_t size;
} types[PERF_NTYPES] = {{"int8", 1},   {"uint8", 1},    {"int32", 4},  {"uint32", 4},
                        {"int64", 8},  {"uint64", 8},   {"half", 2},   {"float", 4},
                        {"double", 8}, {"bfloat16", 2}, {"f8e4m3", 1}, {"f8e5m2", 1}};

size_t perf_dtype_size(ncclDataType_t t) {
  return (unsigned)t < PERF_NTYPES ? types[t].size : 0;
}
const char* perf_dtype_name(ncclDataType_t t) {
  return (unsigned)t < PERF_NTYPES ? types[t].name : "?";
}
int perf_dtype_is_float(ncclDataType_t t) {
  return t >= ncclFloat16 && t <= ncclFloat8e5m2;
}

int perf_dtype_parse(const char* name, ncclDataType_t* t) {
  for (int i = 0; i < PERF_NTYPES; i++)
    if (!strcmp(name, types[i].name)) {
      *t = (ncclDataType_t)i;
      return 0;
    }
  /* aliases nccl-tests also accepts */
  static const struct {
    const char* name;
    ncclDataType_t t;
  } alias[] = {{"char", ncclInt8},          {"int", ncclInt32},       {"fp16", ncclFloat16},
               {"float16", ncclFloat16},    {"float32", ncclFloat32}, {"fp32", ncclFloat32},
               {"float64", ncclFloat64},    {"bf16", ncclBfloat16},   {"fp8_e4m3", ncclFloat8e4m3},
               {"fp8_e5m2", ncclFloat8e5m2}};
  for (size_t i = 0; i < sizeof(alias) / sizeof(alias[0]); i++)
    if (!strcmp(name, alias[i].name)) {
      *t = alias[i].t;
      return 0;
    }
  return -1;
}

static const char* const op_names[] = {"sum", "prod", "max", "min", "avg"};

const char* perf_op_name(int op) {
  if (op == PERF_OP_MULSUM) return "mulsum";
  return op >= 0 && op < 5 ? op_names[op] : "none";
}

int perf_op_parse(const char* name, int* op) {
  for (int i = 0; i < 5; i++)
    if (!strcmp(name, op_names[i])) {
      *op = i;
      return 0;
    }
  if (!strcmp(name, "mulsum") || !strcmp(name, "premulsum")) {
    *op = PERF_OP_MULSUM;
    return 0;
  }
  return -1;
}

/* e4m3 (OCP "fn") has no infinity and one NaN pattern; the others follow IEEE. */
struct fmt {
  int ebits, mbits, ieee;
};

static uint64_t encode_small(struct fmt f, double v) {
  int bias = (1 << (f.ebits - 1)) - 1, top = (1 << f.ebits) - 1;
  uint64_t sign = signbit(v) ? 1ull << (f.ebits + f.mbits) : 0, mmask = (1ull << f.mbits) - 1;
  uint64_t nan = ((uint64_t)top << f.mbits) | mmask;
  uint64_t maxfin = f.ieee ? ((uint64_t)(top - 1) << f.mbits) | mmask : nan - 1;
  uint64_t inf = f.ieee ? (uint64_t)top << f.mbits : maxfin; /* e4m3 saturates */
  if (isnan(v)) return sign | nan;
  double a = fabs(v);
  if (isinf(a)) return sign | inf;
  if (a == 0) return sign;
  int e;
  frexp(a, &e);
  e = e - 1 < 1 - bias ? 1 - bias : e - 1; /* below the normal range: subnormal spacing */
  double m = nearbyint(ldexp(a, f.mbits - e));
  if (m >= ldexp(1, f.mbits + 1)) {
    m /= 2;
    e++;
  }
  uint64_t mi = (uint64_t)m;
  if (mi <= mmask) return sign | mi;
  uint64_t field = (uint64_t)(e + bias);
  uint64_t bits = (field << f.mbits) | (mi & mmask);
  return sign | (bits > maxfin ? inf : bits);
}

uint64_t perf_encode(ncclDataType_t t, double v) {
  switch (t) {
    case ncclFloat16:
      return encode_small((struct fmt){5, 10, 1}, v);
    case ncclBfloat16:
      return encode_small((struct fmt){8, 7, 1}, v);
    case ncclFloat8e4m3:
      return encode_small((struct fmt){4, 3, 0}, v);
    case ncclFloat8e5m2:
      return encode_small((struct fmt){5, 2, 1}, v);
    case ncclFloat32: {
      float f = (float)v;
      uint32_t u;
      memcpy(&u, &f, 4);
      return u;
    }
    case ncclFloat64: {
      uint64_t u;
      memcpy(&u, &v, 8);
      return u;
    }
    default: {
      uint64_t u = (uint64_t)(int64_t)v;
      size_t bits = 8 * perf_dtype_size(t);
      return bits < 64 ? u & ((1ull << bits) - 1) : u;
    }
  }
}

/* Sign-magnitude bits mapped onto a line where neighbours differ by one. */
static int64_t ordered(ncclDataType_t t, uint64_t bits) {
  size_t nbits = 8 * perf_dtype_size(t);
  uint64_t sign = 1ull << (nbits - 1);
  int64_t mag = (int64_t)(bits & (sign - 1));
  return bits & sign ? -mag : mag;
}

uint64_t perf_ulp_distance(ncclDataType_t t, uint64_t a, uint64_t b) {
  int64_t d = ordered(t, a) - ordered(t, b);
  return (uint64_t)(d < 0 ? -d : d);
}
