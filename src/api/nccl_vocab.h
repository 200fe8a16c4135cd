/* NCCL's element types and reduction ops in shunt's vocabulary (util/vocab.h): the one place where
 * an ncclDataType_t or an ncclRedOp_t becomes something the layers below the API take.
 *
 * Promises: shunt_dtype_from_nccl maps every ncclDataType_t value to its enum shunt_dtype and
 * anything else (an invalid argument) to SHUNT_DT_COUNT; shunt_redop_from_nccl maps NCCL's
 * built-in ops to theirs and every other value (a user op, valid or not) to SHUNT_REDOP_OTHER,
 * which the caller resolves (a PreMulSum this communicator recorded, or NCCL's to judge). */
#ifndef SHUNT_API_NCCL_VOCAB_H
#define SHUNT_API_NCCL_VOCAB_H

#include <nccl.h>

#include "util/vocab.h"

static inline enum shunt_dtype shunt_dtype_from_nccl(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
      return SHUNT_DT_INT8;
    case ncclUint8:
      return SHUNT_DT_UINT8;
    case ncclInt32:
      return SHUNT_DT_INT32;
    case ncclUint32:
      return SHUNT_DT_UINT32;
    case ncclInt64:
      return SHUNT_DT_INT64;
    case ncclUint64:
      return SHUNT_DT_UINT64;
    case ncclFloat16:
      return SHUNT_DT_FLOAT16;
    case ncclFloat32:
      return SHUNT_DT_FLOAT32;
    case ncclFloat64:
      return SHUNT_DT_FLOAT64;
    case ncclBfloat16:
      return SHUNT_DT_BFLOAT16;
    case ncclFloat8e4m3:
      return SHUNT_DT_FP8E4M3;
    case ncclFloat8e5m2:
      return SHUNT_DT_FP8E5M2;
    default:
      return SHUNT_DT_COUNT;
  }
}

static inline enum shunt_redop shunt_redop_from_nccl(ncclRedOp_t op) {
  switch (op) {
    case ncclSum:
      return SHUNT_REDOP_SUM;
    case ncclProd:
      return SHUNT_REDOP_PROD;
    case ncclMax:
      return SHUNT_REDOP_MAX;
    case ncclMin:
      return SHUNT_REDOP_MIN;
    case ncclAvg:
      return SHUNT_REDOP_AVG;
    default:
      return SHUNT_REDOP_OTHER;
  }
}

#endif
