/* ncclReduce and ncclReduceConfig through the NCCL API on the host backend: N ranks as processes,
 * host buffers.
 *
 * Usage: test_api_reduce SCENARIO NRANKS
 *   served    every root, in place and out of place (other ranks' recvbuff NULL or a stray
 *             pointer: never written), the plain and *Config calls, every op (sum, prod, max,
 *             min, avg, a PreMulSum) on int32 and float, sizes on the packet and the Simple
 *             plans with a head and a padded tail, a root whose buffers partly overlap, back to
 *             back with allreduce, broadcast and allgather, and inside a group with them: exact,
 *             on reduce plans
 *   badinput  count 0; a root out of range; a NULL sendbuff; a NULL recvbuff on the root; an
 *             invalid op; a count whose byte size wraps; an invalid dtype: NCCL's answers, never
 *             a crash, then served exactly
 *   force     SHUNT_FORCE_FALLBACK=reduce: reduce goes to NCCL (the double), exactly; allreduce
 *             still runs on plans
 *   devptr    buffers the CUDA driver stand-in calls device memory: to NCCL with the reason
 * SHUNT_FALLBACK=0 in the environment runs any of them with shunt's communicators alone. */
#include <nccl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/api_coll.h"
#include "fallback/nccl_compat.h"

#define PREMUL 5 /* the op index of a PreMulSum made with scalar 2 */
static const char* const op_names[] = {"sum", "prod", "max", "min", "avg", "premulsum"};

/* Rank r's element i for op: small integers, so every order of a sum or product is exact. */
static int32_t val(int op, int r, size_t i) {
  if (op == ncclProd) return 1 + (int32_t)((r + i) % 2);
  return (int32_t)((r * 7 + i) % 11) - 5;
}

/* The root's element i: the ranks' elements combined by op, as NCCL defines it (integer avg:
 * the sum divided by the ranks, truncated; PreMulSum: each contribution times 2). */
static double want(int op, size_t i, int is_float) {
  double acc = val(op, 0, i) * (op == PREMUL ? 2.0 : 1.0);
  for (int r = 1; r < nranks; r++) {
    double v = val(op, r, i);
    if (op == ncclProd)
      acc *= v;
    else if (op == ncclMax)
      acc = v > acc ? v : acc;
    else if (op == ncclMin)
      acc = v < acc ? v : acc;
    else
      acc += op == PREMUL ? 2 * v : v;
  }
  if (op == ncclAvg) acc = is_float ? acc / nranks : (double)((int64_t)acc / nranks);
  return acc;
}

enum form { PLAIN, CONFIG };

/* One reduce of `count` elements (int32, or float when is_float) to `root` with op; the root in
 * place, out of place or (overlap) with its output 16 bytes into its input; other ranks pass a
 * NULL recvbuff (odd ranks: a stray pointer). want_plan: 1 a reduce plan, 0 NCCL. */
static void check_reduce(ncclComm_t comm, int rank, int root, size_t count, int op, int is_float, int inplace,
                         int overlap, enum form f, int want_plan) {
  size_t es = 4;
  char* big = calloc(count + 8, es);
  char* send = big + (overlap ? 16 : 0);
  char* recv = rank != root ? NULL : inplace ? send : overlap ? big : malloc(count * es);
  int32_t stray = 77;
  void* rb = rank == root ? (void*)recv : rank % 2 ? (void*)&stray : NULL;
  for (size_t i = 0; i < count; i++) {
    int32_t v = val(op, rank, i);
    float fv = (float)v;
    memcpy(send + i * es, is_float ? (void*)&fv : (void*)&v, es);
  }
  if (recv && recv != send && !overlap) memset(recv, 0xa5, count * es);
  ncclDataType_t dt = is_float ? ncclFloat : ncclInt32;
  ncclRedOp_t rop = (ncclRedOp_t)op;
  if (op == PREMUL) {
    int32_t two = 2;
    float ftwo = 2;
    CHECK_EQ_INT(ncclRedOpCreatePreMulSum(&rop, is_float ? (void*)&ftwo : (void*)&two, dt,
                                          ncclScalarHostImmediate, comm),
                 ncclSuccess);
  }
  ncclResult_t rc;
  if (f == CONFIG) {
    ncclCollConfig_t cfg = api_coll_config();
    rc = ncclReduceConfig(send, rb, count, dt, rop, root, comm, NULL, &cfg);
  } else {
    rc = ncclReduce(send, rb, count, dt, rop, root, comm, NULL);
  }
  CHECK_MSG(rc == ncclSuccess, "rank %d reduce: %s", rank, ncclGetLastError(comm));
  const char* served = last_plan(comm);
  size_t bad = 0;
  for (size_t i = 0; rank == root && i < count; i++) {
    int32_t v;
    float fv;
    memcpy(is_float ? (void*)&fv : (void*)&v, recv + i * es, es);
    bad += (is_float ? (double)fv : (double)v) != want(op, i, is_float);
  }
  CHECK_MSG(bad == 0, "rank %d reduce %s %s root %d %zu %s %s: %zu wrong (served by %s)", rank,
            f == CONFIG ? "config" : "plain", op_names[op], root, count, is_float ? "float" : "int32",
            inplace   ? "in place"
            : overlap ? "overlapping"
                      : "out of place",
            bad, served);
  CHECK_MSG(stray == 77, "rank %d: a non-root's recvbuff was written", rank);
  bad = 0;
  /* The input is read only, on every rank (not where the root's output overlaps it). */
  for (size_t i = 0; !(rank == root && (inplace || overlap)) && i < count; i++) {
    int32_t v;
    float fv;
    memcpy(is_float ? (void*)&fv : (void*)&v, send + i * es, es);
    bad += (is_float ? (double)fv : (double)v) != val(op, rank, i);
  }
  CHECK_MSG(bad == 0, "rank %d: the send buffer was written", rank);
  if (want_plan == 1)
    CHECK_MSG(strncmp(served, "reduce_", 7) == 0, "reduce of %zu served by %s", count, served);
  if (want_plan == 0) CHECK_MSG(strcmp(served, "nccl") == 0, "reduce served by %s", served);
  if (op == PREMUL) CHECK_EQ_INT(ncclRedOpDestroy(rop, comm), ncclSuccess);
  if (recv && recv != send && recv != big) free(recv);
  free(big);
}

static void run_served(ncclComm_t comm, int rank) {
  /* 1001 elements: a head and a padded tail on the packet plan; 300017 (1.2 MB): the Simple
   * plan. */
  size_t counts[] = {1001, 300017};
  check_reduce(comm, rank, nranks - 1, 1, ncclSum, 0, 0, 0, PLAIN, 1); /* a padded tail alone */
  for (int root = 0; root < nranks; root++)
    for (int op = 0; op <= PREMUL; op++)
      for (int k = 0; k < 2; k++) {
        int inplace = (root + op + k) % 2, is_float = (op + k) % 2;
        /* The large size once per root: the Simple plan costs most under the sanitizers. */
        if (k == 1 && op != root % (PREMUL + 1)) continue;
        check_reduce(comm, rank, root, counts[k], op, is_float, inplace, 0, (enum form)((op + root) % 2), 1);
      }
  /* The root's buffers partly overlap: its input moved into its output first, on the plan. */
  for (int root = 0; root < nranks; root++)
    check_reduce(comm, rank, root, 3000, ncclMax, root % 2, 0, 1, PLAIN, 1);
  /* Back to back with other collectives, then the same inside a group: all exact. */
  size_t count = 3000;
  int root = nranks - 1;
  for (int grouped = 0; grouped < 2; grouped++) {
    int32_t* a = malloc(count * sizeof(int32_t));
    int32_t* r = malloc(count * sizeof(int32_t));
    int32_t* b = malloc(count * sizeof(int32_t));
    float* ar = malloc(count * sizeof(float));
    int32_t* ag = malloc(count * sizeof(int32_t) * (size_t)nranks);
    for (size_t i = 0; i < count; i++) {
      a[i] = val(ncclSum, rank, i);
      r[i] = -1;
      b[i] = rank == 0 ? (int32_t)i : -1;
      ar[i] = 1;
    }
    if (grouped) CHECK_EQ_INT(ncclGroupStart(), ncclSuccess);
    CHECK_EQ_INT(ncclReduce(a, rank == root ? r : NULL, count, ncclInt32, ncclSum, root, comm, NULL),
                 ncclSuccess);
    CHECK_EQ_INT(ncclAllReduce(ar, ar, count, ncclFloat, ncclSum, comm, NULL), ncclSuccess);
    CHECK_EQ_INT(ncclBroadcast(b, b, count, ncclInt32, 0, comm, NULL), ncclSuccess);
    CHECK_EQ_INT(ncclAllGather(a, ag, count, ncclInt32, comm, NULL), ncclSuccess);
    CHECK_EQ_INT(ncclReduce(a, a, count, ncclInt32, ncclMin, 0, comm, NULL), ncclSuccess);
    if (grouped) CHECK_EQ_INT(ncclGroupEnd(), ncclSuccess);
    size_t bad = 0;
    for (size_t i = 0; i < count; i++) {
      if (rank == root) bad += r[i] != (int32_t)want(ncclSum, i, 0);
      bad += ar[i] != (float)nranks;
      bad += b[i] != (int32_t)i;
      for (int q = 0; q < nranks; q++) bad += ag[(size_t)q * count + i] != val(ncclSum, q, i);
      /* The in-place min on rank 0; elsewhere the input stays. */
      int32_t lo = val(ncclSum, 0, i);
      for (int q = 1; q < nranks; q++) lo = val(ncclSum, q, i) < lo ? val(ncclSum, q, i) : lo;
      bad += a[i] != (rank == 0 ? lo : val(ncclSum, rank, i));
    }
    CHECK_MSG(bad == 0, "rank %d: %zu wrong after the calls %s", rank, bad,
              grouped ? "in a group" : "back to back");
    free(a), free(r), free(b), free(ar), free(ag);
  }
}

static void run_badinput(ncclComm_t comm, int rank) {
  int32_t x[64] = {0};
  CHECK_EQ_INT(ncclReduce(x, x, 0, ncclInt32, ncclSum, 0, comm, NULL), ncclSuccess);
  CHECK_EQ_INT(ncclReduce(x, x, 4, ncclInt32, ncclSum, nranks, comm, NULL), ncclInvalidArgument);
  CHECK_STR_CONTAINS(ncclGetLastError(comm), "invalid root");
  CHECK_EQ_INT(ncclReduce(x, x, 4, ncclInt32, ncclSum, -1, comm, NULL), ncclInvalidArgument);
  CHECK_STR_CONTAINS(ncclGetLastError(comm), "invalid root -1");
  CHECK_EQ_INT(ncclReduce(NULL, x, 4, ncclInt32, ncclSum, 0, comm, NULL), ncclInvalidArgument);
  CHECK_STR_CONTAINS(ncclGetLastError(comm), "sendbuff argument is NULL");
  /* NULL recvbuff is refused on the root only; the others do not call, so nobody waits. */
  if (rank == 0) {
    CHECK_EQ_INT(ncclReduce(x, NULL, 4, ncclInt32, ncclSum, 0, comm, NULL), ncclInvalidArgument);
    CHECK_STR_CONTAINS(ncclGetLastError(comm), "recvbuff argument is NULL");
  }
  if (!fallback_on()) {
    /* No NCCL to know an op nobody created: NCCL's own answer. */
    CHECK_EQ_INT(ncclReduce(x, x, 4, ncclInt32, (ncclRedOp_t)1234, 0, comm, NULL), ncclInvalidArgument);
    CHECK_STR_CONTAINS(ncclGetLastError(comm), "invalid reduction operation");
  }
  CHECK_EQ_INT(ncclReduce(x, x, SIZE_MAX / 4 + 1, ncclInt32, ncclSum, 0, comm, NULL), ncclInvalidArgument);
  CHECK_STR_CONTAINS(ncclGetLastError(comm), "more bytes than any buffer holds");
  CHECK_EQ_INT(ncclReduce(x, x, 4, (ncclDataType_t)99, ncclSum, 0, comm, NULL), ncclInvalidArgument);
  CHECK_STR_CONTAINS(ncclGetLastError(comm), "invalid type 99");
  /* Still served exactly afterwards. */
  check_reduce(comm, rank, nranks - 1, 512, ncclSum, 0, 0, 0, PLAIN, 1);
}

static void run_force(ncclComm_t comm, int rank) {
  check_reduce(comm, rank, 0, 1024, ncclSum, 0, 0, 0, PLAIN, 0);
  check_reduce(comm, rank, nranks - 1, 1024, ncclMax, 1, 1, 0, PLAIN, 0);
  check_allreduce_on_plan(comm);
}

static void run_devptr(ncclComm_t comm, int rank) {
  size_t count = 1024;
  int32_t* buf = malloc(count * sizeof(int32_t));
  for (size_t i = 0; i < count; i++) buf[i] = val(ncclSum, rank, i);
  CHECK(standin_add_device(buf, count * sizeof(int32_t)) == 0);
  CHECK_EQ_INT(ncclReduce(buf, buf, count, ncclInt32, ncclSum, 1, comm, NULL), ncclSuccess);
  CHECK_MSG(strcmp(last_plan(comm), "nccl") == 0, "a plan (%s) ran on device memory", last_plan(comm));
  for (size_t i = 0; rank == 1 && i < count; i++)
    CHECK_MSG(buf[i] == (int32_t)want(ncclSum, i, 0), "wrong through NCCL at %zu", i);
  check_reduce(comm, rank, 1, 1024, ncclSum, 0, 0, 0, PLAIN, 1); /* host memory: a plan */
  free(buf); /* only now: the range would be handed out again */
}

int main(int argc, char** argv) {
  static const struct api_coll_scenarios scenarios = {run_served, run_badinput, run_force, run_devptr};
  return api_coll_main(argc, argv, 2, &scenarios);
}
