/* Inputs and the reference collective of shunt-plan verify (verify_ref.h). */
#include "verify_ref.h"

#include <string.h>

#include "exec/elem.h"

const char* const verify_dt_names[SHUNT_DT_COUNT] = {"int8",    "uint8",    "int32",   "uint32",
                                                     "int64",   "uint64",   "float16", "float32",
                                                     "float64", "bfloat16", "fp8e4m3", "fp8e5m2"};
const char* const verify_op_names[VERIFY_NOPS] = {"sum", "prod", "max", "min", "avg", "premulsum"};

/* Every input value lies in [-VALUE_LIMIT, VALUE_LIMIT]. */
#define VALUE_LIMIT 8

static int64_t small_value(uint32_t rank, uint32_t nranks, uint64_t i, unsigned seed, enum shunt_redop op,
                           bool is_unsigned) {
  uint64_t h = (i * 2654435761u) ^ ((uint64_t)rank * 40503u) ^ ((uint64_t)seed * 977u);
  h ^= h >> 13;
  /* Sums: at most 8 ranks contribute a non-zero value to an element, so every partial sum,
   * in any order, stays within [-8, 8], which fp8e5m2 (the narrowest) holds exactly. */
  uint32_t every = (nranks + 7) / 8;
  bool sum = op != SHUNT_REDOP_PROD && op != SHUNT_REDOP_MIN && op != SHUNT_REDOP_MAX;
  if (sum && every > 1 && (i + rank + seed) % every != 0) return 0;
  if (op == SHUNT_REDOP_PROD) return (rank < 3 && h % 5 == 0) ? 2 : ((h % 3 == 0 && !is_unsigned) ? -1 : 1);
  if (op == SHUNT_REDOP_MIN || op == SHUNT_REDOP_MAX) return (int64_t)(h % 7) - (is_unsigned ? 0 : 3);
  return is_unsigned ? (int64_t)(h % 2) : (int64_t)(h % 3) - 1;
}

static void put_value(enum shunt_dtype dt, void* at, int64_t v) {
  switch (dt) {
    case SHUNT_DT_INT8:
    case SHUNT_DT_UINT8: {
      uint8_t x = (uint8_t)v;
      memcpy(at, &x, 1);
      break;
    }
    case SHUNT_DT_INT32:
    case SHUNT_DT_UINT32: {
      uint32_t x = (uint32_t)v;
      memcpy(at, &x, 4);
      break;
    }
    case SHUNT_DT_INT64:
    case SHUNT_DT_UINT64: {
      uint64_t x = (uint64_t)v;
      memcpy(at, &x, 8);
      break;
    }
    case SHUNT_DT_FLOAT32: {
      float x = (float)v;
      memcpy(at, &x, 4);
      break;
    }
    case SHUNT_DT_FLOAT64: {
      double x = (double)v;
      memcpy(at, &x, 8);
      break;
    }
    case SHUNT_DT_FLOAT16: {
      uint16_t x = (uint16_t)shunt_f32_to_f16((float)v);
      memcpy(at, &x, 2);
      break;
    }
    case SHUNT_DT_BFLOAT16: {
      uint16_t x = (uint16_t)shunt_f32_to_bf16((float)v);
      memcpy(at, &x, 2);
      break;
    }
    case SHUNT_DT_FP8E4M3: {
      uint8_t x = (uint8_t)shunt_f32_to_fp8((float)v, 0);
      memcpy(at, &x, 1);
      break;
    }
    case SHUNT_DT_FP8E5M2: {
      uint8_t x = (uint8_t)shunt_f32_to_fp8((float)v, 1);
      memcpy(at, &x, 1);
      break;
    }
    default:
      break;
  }
}

/* bytes of rank's input from byte `at` on (allreduce: at is a multiple of the element size). */
void verify_fill_input(char* buf, uint64_t at, uint64_t bytes, uint32_t rank, uint32_t nranks, unsigned seed,
                       enum shunt_dtype dt, enum shunt_redop op, bool reduce) {
  if (!reduce) {
    for (uint64_t k = 0, i = at; k < bytes; k++, i++)
      buf[k] = (char)((i * 131 + rank * 29 + seed * 7 + (i >> 8)) & 0xff);
    return;
  }
  uint32_t es = shunt_dtype_size(dt);
  bool uns = dt == SHUNT_DT_UINT8 || dt == SHUNT_DT_UINT32 || dt == SHUNT_DT_UINT64;
  /* Every value is a small integer: each is encoded once into a table, and the loop per
   * element size only stores table entries (the conversions per element were most of the
   * time of a large verify). */
  unsigned char enc[2 * VALUE_LIMIT + 1][8] = {{0}};
  for (int v = -VALUE_LIMIT; v <= VALUE_LIMIT; v++) put_value(dt, enc[v + VALUE_LIMIT], v);
  uint64_t n = bytes / es, first = at / es;
#define FILL(T)                                                                                         \
  for (uint64_t k = 0; k < n; k++) {                                                                    \
    memcpy(buf + k * sizeof(T), enc[small_value(rank, nranks, first + k, seed, op, uns) + VALUE_LIMIT], \
           sizeof(T));                                                                                  \
  }
  switch (es) {
    case 1:
      FILL(uint8_t)
      break;
    case 2:
      FILL(uint16_t)
      break;
    case 4:
      FILL(uint32_t)
      break;
    default:
      FILL(uint64_t)
      break;
  }
#undef FILL
}

void verify_premul_scalar(enum shunt_dtype dt, void* out) {
  put_value(dt, out, 2);
}

/* The reference allreduce: each contribution scaled once (avg on floats, PreMulSum), summed
 * in rank order; integer avg divides the sum. Inputs are small integers, so the order of a
 * plan's own reduction does not change any result. */
void verify_expected_allreduce(char* exp, char* tmp, uint64_t at, uint64_t bytes, uint32_t nranks,
                               unsigned seed, enum shunt_dtype dt, enum shunt_redop op) {
  uint32_t es = shunt_dtype_size(dt);
  enum shunt_elem_scaling sc = shunt_elem_scaling(dt, op);
  char scalar[8];
  verify_premul_scalar(dt, scalar);
  for (uint32_t r = 0; r < nranks; r++) {
    char* into = r == 0 ? exp : tmp;
    verify_fill_input(into, at, bytes, r, nranks, seed, dt, op, true);
    if (sc == SHUNT_SCALE_PRE)
      shunt_elem_premul(dt, into, into, bytes / es, op == SHUNT_REDOP_PREMULSUM ? scalar : NULL, nranks);
    if (r) shunt_elem_reduce(dt, shunt_elem_step_op(op), exp, tmp, bytes / es);
  }
  if (sc == SHUNT_SCALE_POSTDIV) shunt_elem_postdiv(dt, exp, bytes / es, nranks);
}

void verify_in_out(const struct shunt_plan* p, uint64_t total, uint64_t* in, uint64_t* out) {
  uint64_t units = shunt_coll_size_units(p->coll, p->ngpus), unit = total / units;
  uint64_t iu = shunt_coll_in_units(p->coll, p->ngpus), ou = shunt_coll_out_units(p->coll, p->ngpus);
  *in = iu == units ? total : unit * iu;
  *out = ou == units ? total : unit * ou;
}

void verify_bind(const struct shunt_plan* p, uint32_t rank, uint64_t in, uint64_t out, char* in_buf,
                 char* out_buf, char** user_in, char** user_out, bool* inplace) {
  uint64_t unit = shunt_coll_unit(p->coll, p->ngpus, in, out);
  shunt_coll_place(p->coll, rank, unit, *inplace, in_buf, out_buf, user_in, user_out);
  const void* send = *user_in;
  void* recv = *user_out;
  bool mode = *inplace;
  shunt_coll_root_bind(p->coll, rank, p->root, &send, &recv, &mode);
  /* A rank without an output has none; every other keeps the run's mode, inputs included (a
   * broadcast's other ranks run both ways, more than the API, which binds them in place). */
  if (!recv) {
    *user_out = NULL;
    *inplace = false;
  }
}
