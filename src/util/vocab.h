/* The vocabulary every layer below the NCCL API shares: which collective, which element type,
 * which reduction op. One enum per concept, and one byte code per value for plain data.
 *
 * Promises:
 * - enum shunt_coll, enum shunt_dtype and enum shunt_redop are the only types for these three
 *   concepts below the API. NCCL's types become them at the API only (api/nccl_vocab.h); a plan's
 *   strings become them in plan/ only (shunt_coll_of_name; a plan op's reduce_op is a concept of
 *   its own, enum shunt_plan_redop, plan/plan.h).
 * - shunt_<type>_code and shunt_<type>_from_code are the only conversions between an enum and
 *   the integer that stands for it in plain data: a program's header (exec/program.h), which
 *   the host executor, the GPU kernels and their CPU build read, and the in-job tuning cache
 *   (plan/tune_cache.h). The codes are what those files have always held, so they never change.
 *   from_code answers an integer that is no code with SHUNT_COLL_OTHER, SHUNT_DT_COUNT or
 *   SHUNT_REDOP_OTHER. tests/ops/test_vocab.c checks every code both ways, on the host and in the
 *   kernels' CPU build.
 * - Header only; compiles as C11, C++ and CUDA (host and device), with the same enum sizes in
 *   each, since struct shunt_red (exec/ops/dtype.h) crosses from C into kernels by value. */
#ifndef SHUNT_UTIL_VOCAB_H
#define SHUNT_UTIL_VOCAB_H

#include <stdint.h>

#if defined(__CUDACC__)
#define SHUNT_VOCAB_FN __host__ __device__ inline
#else
#define SHUNT_VOCAB_FN static inline
#endif

/* Collectives, as a plan's `collective` names them; what each is and whether plans serve it is
 * its row in util/coll_traits.h. */
enum shunt_coll {
  SHUNT_COLL_OTHER = 0, /* anything else: loaded and listed, never selected */
  SHUNT_COLL_ALLREDUCE,
  SHUNT_COLL_ALLGATHER,
  SHUNT_COLL_REDUCESCATTER,
  SHUNT_COLL_ALLTOALL,
  SHUNT_COLL_BROADCAST,
  SHUNT_COLL_SENDRECV,
  SHUNT_COLL_REDUCE,
  SHUNT_COLL_COUNT
};

/* Element types. */
enum shunt_dtype {
  SHUNT_DT_INT8 = 0,
  SHUNT_DT_UINT8,
  SHUNT_DT_INT32,
  SHUNT_DT_UINT32,
  SHUNT_DT_INT64,
  SHUNT_DT_UINT64,
  SHUNT_DT_FLOAT16,
  SHUNT_DT_FLOAT32,
  SHUNT_DT_FLOAT64,
  SHUNT_DT_BFLOAT16,
  SHUNT_DT_FP8E4M3,
  SHUNT_DT_FP8E5M2,
  SHUNT_DT_COUNT /* no type */
};

/* Reduction ops. SUM..PREMULSUM are what a call asks for (PREMULSUM: a user op recorded by
 * ncclRedOpCreatePreMulSum). SUMPOSTDIV is what integer avg becomes in the element math (a sum,
 * then a division by the rank count: struct shunt_red); no call asks for it. OTHER: an op shunt
 * does not compute (NCCL's to serve). */
enum shunt_redop {
  SHUNT_REDOP_SUM = 0,
  SHUNT_REDOP_PROD,
  SHUNT_REDOP_MAX,
  SHUNT_REDOP_MIN,
  SHUNT_REDOP_AVG,
  SHUNT_REDOP_PREMULSUM,
  SHUNT_REDOP_SUMPOSTDIV,
  SHUNT_REDOP_OTHER
};

#if defined(__cplusplus)
static_assert(sizeof(enum shunt_dtype) == 4 && sizeof(enum shunt_redop) == 4,
              "struct shunt_red holds these enums and crosses from C into kernels by value");
#else
_Static_assert(sizeof(enum shunt_dtype) == 4 && sizeof(enum shunt_redop) == 4,
               "struct shunt_red holds these enums and crosses from C into kernels by value");
#endif

/* ---- Codes: the integers plain data holds -------------------------------------------------- */

SHUNT_VOCAB_FN uint8_t shunt_coll_code(enum shunt_coll c) {
  switch (c) {
    case SHUNT_COLL_ALLREDUCE:
      return 1;
    case SHUNT_COLL_ALLGATHER:
      return 2;
    case SHUNT_COLL_REDUCESCATTER:
      return 3;
    case SHUNT_COLL_ALLTOALL:
      return 4;
    case SHUNT_COLL_BROADCAST:
      return 5;
    case SHUNT_COLL_SENDRECV:
      return 6;
    case SHUNT_COLL_REDUCE:
      return 7;
    default:
      return 0;
  }
}

SHUNT_VOCAB_FN enum shunt_coll shunt_coll_from_code(uint32_t code) {
  switch (code) {
    case 1:
      return SHUNT_COLL_ALLREDUCE;
    case 2:
      return SHUNT_COLL_ALLGATHER;
    case 3:
      return SHUNT_COLL_REDUCESCATTER;
    case 4:
      return SHUNT_COLL_ALLTOALL;
    case 5:
      return SHUNT_COLL_BROADCAST;
    case 6:
      return SHUNT_COLL_SENDRECV;
    case 7:
      return SHUNT_COLL_REDUCE;
    default:
      return SHUNT_COLL_OTHER;
  }
}

SHUNT_VOCAB_FN uint8_t shunt_dtype_code(enum shunt_dtype t) {
  switch (t) {
    case SHUNT_DT_INT8:
      return 0;
    case SHUNT_DT_UINT8:
      return 1;
    case SHUNT_DT_INT32:
      return 2;
    case SHUNT_DT_UINT32:
      return 3;
    case SHUNT_DT_INT64:
      return 4;
    case SHUNT_DT_UINT64:
      return 5;
    case SHUNT_DT_FLOAT16:
      return 6;
    case SHUNT_DT_FLOAT32:
      return 7;
    case SHUNT_DT_FLOAT64:
      return 8;
    case SHUNT_DT_BFLOAT16:
      return 9;
    case SHUNT_DT_FP8E4M3:
      return 10;
    case SHUNT_DT_FP8E5M2:
      return 11;
    default:
      return 255;
  }
}

SHUNT_VOCAB_FN enum shunt_dtype shunt_dtype_from_code(uint32_t code) {
  switch (code) {
    case 0:
      return SHUNT_DT_INT8;
    case 1:
      return SHUNT_DT_UINT8;
    case 2:
      return SHUNT_DT_INT32;
    case 3:
      return SHUNT_DT_UINT32;
    case 4:
      return SHUNT_DT_INT64;
    case 5:
      return SHUNT_DT_UINT64;
    case 6:
      return SHUNT_DT_FLOAT16;
    case 7:
      return SHUNT_DT_FLOAT32;
    case 8:
      return SHUNT_DT_FLOAT64;
    case 9:
      return SHUNT_DT_BFLOAT16;
    case 10:
      return SHUNT_DT_FP8E4M3;
    case 11:
      return SHUNT_DT_FP8E5M2;
    default:
      return SHUNT_DT_COUNT;
  }
}

SHUNT_VOCAB_FN uint8_t shunt_redop_code(enum shunt_redop op) {
  switch (op) {
    case SHUNT_REDOP_SUM:
      return 0;
    case SHUNT_REDOP_PROD:
      return 1;
    case SHUNT_REDOP_MAX:
      return 2;
    case SHUNT_REDOP_MIN:
      return 3;
    case SHUNT_REDOP_AVG:
      return 4;
    case SHUNT_REDOP_PREMULSUM:
      return 5;
    case SHUNT_REDOP_SUMPOSTDIV:
      return 6;
    default:
      return 255;
  }
}

SHUNT_VOCAB_FN enum shunt_redop shunt_redop_from_code(uint32_t code) {
  switch (code) {
    case 0:
      return SHUNT_REDOP_SUM;
    case 1:
      return SHUNT_REDOP_PROD;
    case 2:
      return SHUNT_REDOP_MAX;
    case 3:
      return SHUNT_REDOP_MIN;
    case 4:
      return SHUNT_REDOP_AVG;
    case 5:
      return SHUNT_REDOP_PREMULSUM;
    case 6:
      return SHUNT_REDOP_SUMPOSTDIV;
    default:
      return SHUNT_REDOP_OTHER;
  }
}

/* ---- Properties ------------------------------------------------------------------------------ */

/* Bytes per element; 0 for SHUNT_DT_COUNT (or anything else that is no type). */
SHUNT_VOCAB_FN uint32_t shunt_dtype_size(enum shunt_dtype t) {
  switch (t) {
    case SHUNT_DT_INT8:
    case SHUNT_DT_UINT8:
    case SHUNT_DT_FP8E4M3:
    case SHUNT_DT_FP8E5M2:
      return 1;
    case SHUNT_DT_FLOAT16:
    case SHUNT_DT_BFLOAT16:
      return 2;
    case SHUNT_DT_INT32:
    case SHUNT_DT_UINT32:
    case SHUNT_DT_FLOAT32:
      return 4;
    case SHUNT_DT_INT64:
    case SHUNT_DT_UINT64:
    case SHUNT_DT_FLOAT64:
      return 8;
    default:
      return 0;
  }
}

SHUNT_VOCAB_FN int shunt_dtype_valid(enum shunt_dtype t) {
  return shunt_dtype_size(t) != 0;
}

SHUNT_VOCAB_FN int shunt_dtype_is_float(enum shunt_dtype t) {
  switch (t) {
    case SHUNT_DT_FLOAT16:
    case SHUNT_DT_FLOAT32:
    case SHUNT_DT_FLOAT64:
    case SHUNT_DT_BFLOAT16:
    case SHUNT_DT_FP8E4M3:
    case SHUNT_DT_FP8E5M2:
      return 1;
    default:
      return 0;
  }
}

SHUNT_VOCAB_FN int shunt_dtype_is_signed_int(enum shunt_dtype t) {
  return t == SHUNT_DT_INT8 || t == SHUNT_DT_INT32 || t == SHUNT_DT_INT64;
}

SHUNT_VOCAB_FN const char* shunt_dtype_name(enum shunt_dtype t) {
  switch (t) {
    case SHUNT_DT_INT8:
      return "int8";
    case SHUNT_DT_UINT8:
      return "uint8";
    case SHUNT_DT_INT32:
      return "int32";
    case SHUNT_DT_UINT32:
      return "uint32";
    case SHUNT_DT_INT64:
      return "int64";
    case SHUNT_DT_UINT64:
      return "uint64";
    case SHUNT_DT_FLOAT16:
      return "float16";
    case SHUNT_DT_FLOAT32:
      return "float32";
    case SHUNT_DT_FLOAT64:
      return "float64";
    case SHUNT_DT_BFLOAT16:
      return "bfloat16";
    case SHUNT_DT_FP8E4M3:
      return "fp8e4m3";
    case SHUNT_DT_FP8E5M2:
      return "fp8e5m2";
    default:
      return "?";
  }
}

SHUNT_VOCAB_FN const char* shunt_redop_name(enum shunt_redop op) {
  switch (op) {
    case SHUNT_REDOP_SUM:
      return "sum";
    case SHUNT_REDOP_PROD:
      return "prod";
    case SHUNT_REDOP_MAX:
      return "max";
    case SHUNT_REDOP_MIN:
      return "min";
    case SHUNT_REDOP_AVG:
      return "avg";
    case SHUNT_REDOP_PREMULSUM:
      return "premulsum";
    case SHUNT_REDOP_SUMPOSTDIV:
      return "sumpostdiv";
    default:
      return "other";
  }
}

/* Whether a call may ask for op and shunt computes it (SUM..PREMULSUM): SUMPOSTDIV is no call's
 * op, OTHER is NCCL's. */
SHUNT_VOCAB_FN int shunt_redop_computed(enum shunt_redop op) {
  switch (op) {
    case SHUNT_REDOP_SUM:
    case SHUNT_REDOP_PROD:
    case SHUNT_REDOP_MAX:
    case SHUNT_REDOP_MIN:
    case SHUNT_REDOP_AVG:
    case SHUNT_REDOP_PREMULSUM:
      return 1;
    default:
      return 0;
  }
}

#endif
