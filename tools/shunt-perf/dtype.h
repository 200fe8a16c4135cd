/* Data types and reduction ops as shunt-perf names them, and exact encoding of values into
 * each type's bits, so that expected results can be compared bit for bit. */
#ifndef SHUNT_PERF_DTYPE_H
#define SHUNT_PERF_DTYPE_H

#include <nccl.h>
#include <stddef.h>
#include <stdint.h>

#define PERF_NTYPES 12
#define PERF_OP_MULSUM 100 /* a PreMulSum created for every call, as nccl-tests' mulsum */

size_t perf_dtype_size(ncclDataType_t t);
const char* perf_dtype_name(ncclDataType_t t);
int perf_dtype_parse(const char* name, ncclDataType_t* t); /* nccl-tests' names; 0 on success */
int perf_dtype_is_float(ncclDataType_t t);
const char* perf_op_name(int op);
int perf_op_parse(const char* name, int* op);

/* The bits of v in type t (little endian, in the low perf_dtype_size(t) bytes): floating
 * types round to nearest even; integers take v's integer value. */
uint64_t perf_encode(ncclDataType_t t, double v);
/* How many units in the last place apart two floating values of type t are (0 when equal). */
uint64_t perf_ulp_distance(ncclDataType_t t, uint64_t a, uint64_t b);

#endif
