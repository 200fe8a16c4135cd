/* The vocabulary's encodings (util/vocab.h) against each other: every code both ways, the codes
 * that programs and tuning cache files have always held, NCCL's values at the API
 * (api/nccl_vocab.h), and the executor kernel's reading of a program header in its CPU build
 * (a C++ compile of the kernel source, exec/kcpu) against the host backend's. */
#include <nccl.h>
#include <string.h>

#include "api/nccl_vocab.h"
#include "common/check.h"
#include "exec/elem.h"
#include "exec/kcpu/kcpu_kernel.h"
#include "exec/ops/reduce.h"
#include "exec/program.h"
#include "plan/plan.h"
#include "util/vocab.h"

/* The codes a program header and a tuning cache file hold. They are data written by earlier
 * builds (cache files) and read by the kernels: a change here is a format change. */
static const struct {
  enum shunt_dtype t;
  unsigned code;
  ncclDataType_t nccl;
  uint32_t size;
} dtypes[] = {
    {SHUNT_DT_INT8, 0, ncclInt8, 1},         {SHUNT_DT_UINT8, 1, ncclUint8, 1},
    {SHUNT_DT_INT32, 2, ncclInt32, 4},       {SHUNT_DT_UINT32, 3, ncclUint32, 4},
    {SHUNT_DT_INT64, 4, ncclInt64, 8},       {SHUNT_DT_UINT64, 5, ncclUint64, 8},
    {SHUNT_DT_FLOAT16, 6, ncclFloat16, 2},   {SHUNT_DT_FLOAT32, 7, ncclFloat32, 4},
    {SHUNT_DT_FLOAT64, 8, ncclFloat64, 8},   {SHUNT_DT_BFLOAT16, 9, ncclBfloat16, 2},
    {SHUNT_DT_FP8E4M3, 10, ncclFloat8e4m3, 1}, {SHUNT_DT_FP8E5M2, 11, ncclFloat8e5m2, 1},
};

/* The ops a call may carry, with their codes and NCCL's built-ins (PreMulSum has no fixed NCCL
 * value: a user op handle). */
static const struct {
  enum shunt_redop op;
  unsigned code;
  int nccl; /* -1: no NCCL built-in */
} redops[] = {
    {SHUNT_REDOP_SUM, 0, ncclSum},   {SHUNT_REDOP_PROD, 1, ncclProd},       {SHUNT_REDOP_MAX, 2, ncclMax},
    {SHUNT_REDOP_MIN, 3, ncclMin},   {SHUNT_REDOP_AVG, 4, ncclAvg},         {SHUNT_REDOP_PREMULSUM, 5, -1},
    {SHUNT_REDOP_SUMPOSTDIV, 6, -1},
};

static const struct {
  enum shunt_coll c;
  unsigned code;
  const char* name;
} colls[] = {
    {SHUNT_COLL_ALLREDUCE, 1, "allreduce"}, {SHUNT_COLL_ALLGATHER, 2, "allgather"},
    {SHUNT_COLL_REDUCESCATTER, 3, "reducescatter"}, {SHUNT_COLL_ALLTOALL, 4, "alltoall"},
    {SHUNT_COLL_BROADCAST, 5, "broadcast"}, {SHUNT_COLL_SENDRECV, 6, "sendrecv"},
    {SHUNT_COLL_REDUCE, 7, "reduce"},
};

#define N(a) (sizeof(a) / sizeof((a)[0]))

static void test_codes(void) {
  CHECK_EQ_INT((int)N(dtypes), (int)SHUNT_DT_COUNT);
  for (size_t i = 0; i < N(dtypes); i++) {
    CHECK_EQ_INT(shunt_dtype_code(dtypes[i].t), dtypes[i].code);
    CHECK(shunt_dtype_from_code(dtypes[i].code) == dtypes[i].t);
    CHECK(shunt_dtype_from_nccl(dtypes[i].nccl) == dtypes[i].t);
    CHECK_EQ_INT(shunt_dtype_size(dtypes[i].t), dtypes[i].size);
  }
  for (size_t i = 0; i < N(redops); i++) {
    CHECK_EQ_INT(shunt_redop_code(redops[i].op), redops[i].code);
    CHECK(shunt_redop_from_code(redops[i].code) == redops[i].op);
    if (redops[i].nccl >= 0) CHECK(shunt_redop_from_nccl((ncclRedOp_t)redops[i].nccl) == redops[i].op);
  }
  for (size_t i = 0; i < N(colls); i++) {
    CHECK_EQ_INT(shunt_coll_code(colls[i].c), colls[i].code);
    CHECK(shunt_coll_from_code(colls[i].code) == colls[i].c);
    CHECK(shunt_coll_of_name(colls[i].name) == colls[i].c);
  }
  /* Values that encode nothing, and every byte: decoding then encoding gives the byte back. */
  CHECK(shunt_dtype_from_nccl(ncclNumTypes) == SHUNT_DT_COUNT);
  CHECK(shunt_redop_from_nccl(ncclNumOps) == SHUNT_REDOP_OTHER);
  CHECK(shunt_coll_of_name("sendrecvx") == SHUNT_COLL_OTHER);
  for (uint32_t b = 0; b < 512; b++) {
    enum shunt_dtype t = shunt_dtype_from_code(b);
    if (t != SHUNT_DT_COUNT) CHECK_EQ_INT(shunt_dtype_code(t), b);
    enum shunt_redop op = shunt_redop_from_code(b);
    if (op != SHUNT_REDOP_OTHER) CHECK_EQ_INT(shunt_redop_code(op), b);
    enum shunt_coll c = shunt_coll_from_code(b);
    if (c != SHUNT_COLL_OTHER) CHECK_EQ_INT(shunt_coll_code(c), b);
  }
}

/* For every dtype and op code a program may carry: the kernel (CPU build) and the host backend
 * (host_run.c: shunt_dtype_from_code, shunt_elem_step_op) apply the same reduction, and reduce
 * the same bytes to the same result. */
static void test_kernel_reading(void) {
  for (size_t i = 0; i < N(dtypes); i++)
    for (size_t j = 0; j < N(redops); j++) {
      if (redops[j].op == SHUNT_REDOP_SUMPOSTDIV) continue; /* no call's op */
      struct shunt_program p;
      memset(&p, 0, sizeof(p));
      p.dtype = shunt_dtype_code(dtypes[i].t);
      p.redop = shunt_redop_code(redops[j].op);
      struct shunt_red k = shunt_kcpu_prog_red(&p);
      enum shunt_dtype host_dt = shunt_dtype_from_code(p.dtype);
      enum shunt_redop host_op = shunt_elem_step_op(shunt_redop_from_code(p.redop));
      CHECK_MSG(k.ty == host_dt && k.kind == host_op, "%s %s: kernel reads %s %s, host %s %s",
                shunt_dtype_name(dtypes[i].t), shunt_redop_name(redops[j].op), shunt_dtype_name(k.ty),
                shunt_redop_name(k.kind), shunt_dtype_name(host_dt), shunt_redop_name(host_op));
      /* 3 (+) 5 as the kernel's reduction and the host's, on one element's bytes (integers
       * suffice to tell the ops apart). */
      if (shunt_dtype_is_float(dtypes[i].t)) continue;
      unsigned char a[8] = {3}, b[8] = {5}, want[8] = {3};
      CHECK_EQ_INT(shunt_reduce_buf(a, a, b, shunt_dtype_size(k.ty), &k), 0);
      shunt_elem_reduce(host_dt, host_op, want, b, 1);
      CHECK_MSG(memcmp(a, want, 8) == 0, "%s %s: kernel and host reduce differently",
                shunt_dtype_name(dtypes[i].t), shunt_redop_name(redops[j].op));
    }
}

int main(void) {
  test_codes();
  test_kernel_reading();
  CHECK_DONE();
}
