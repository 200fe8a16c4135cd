/* Element-level op semantics shared by the host and GPU backends (src/exec/ops). */
#include <nccl.h>

#include "common/check.h"
#include "exec/ops/dtype.h"
#include "ops/test_ops.h"

/* The ops layer does not include nccl.h (device code); its values must still be NCCL's. */
_Static_assert((int)SHUNT_TY_INT8 == (int)ncclInt8 && (int)SHUNT_TY_UINT8 == (int)ncclUint8 &&
                   (int)SHUNT_TY_INT32 == (int)ncclInt32 && (int)SHUNT_TY_UINT32 == (int)ncclUint32 &&
                   (int)SHUNT_TY_INT64 == (int)ncclInt64 && (int)SHUNT_TY_UINT64 == (int)ncclUint64 &&
                   (int)SHUNT_TY_FLOAT16 == (int)ncclFloat16 && (int)SHUNT_TY_FLOAT32 == (int)ncclFloat32 &&
                   (int)SHUNT_TY_FLOAT64 == (int)ncclFloat64 && (int)SHUNT_TY_BFLOAT16 == (int)ncclBfloat16 &&
                   (int)SHUNT_TY_FP8E4M3 == (int)ncclFloat8e4m3 &&
                   (int)SHUNT_TY_FP8E5M2 == (int)ncclFloat8e5m2 && (int)SHUNT_TY_COUNT == (int)ncclNumTypes,
               "SHUNT_TY_* must equal ncclDataType_t");
_Static_assert((int)SHUNT_RED_SUM == (int)ncclSum && (int)SHUNT_RED_PROD == (int)ncclProd &&
                   (int)SHUNT_RED_MAX == (int)ncclMax && (int)SHUNT_RED_MIN == (int)ncclMin &&
                   (int)SHUNT_RED_AVG == (int)ncclAvg,
               "SHUNT_RED_* built-ins must equal ncclRedOp_t");

int main(void) {
  check_failures += test_conv();
  check_failures += test_reduce();
  check_failures += test_packet();
  CHECK_DONE();
}
