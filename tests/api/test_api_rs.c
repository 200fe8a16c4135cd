/* ncclReduceScatter through the NCCL API on the host backend: N ranks as processes, host buffers.
 *
 * Usage: test_api_rs SCENARIO NRANKS
 *   served    in place (recvbuff = sendbuff + rank x recvcount) and out of place, the plain
 *             and the *Config call, alone and inside a group with an allreduce: exact, on
 *             reducescatter plans
 *   badinput  count 0; a count whose byte size on every rank wraps; a NULL buffer; an
 *             invalid dtype; alone, an op nobody created and a receive buffer that overlaps the
 *             send buffer away from the rank's slice: NCCL's answers, never a crash
 *   force     SHUNT_FORCE_FALLBACK=reducescatter: reducescatter goes to NCCL (the double),
 *             exactly; allreduce still runs on plans
 *   devptr    buffers the CUDA driver stand-in calls device memory: to NCCL with the reason
 *             (no GPU self-check passed for this communicator: the process made it before it
 *             had a device; tests/standin/test_gpu_api.c runs them on the GPU backend)
 * SHUNT_FALLBACK=0 in the environment runs any of them with shunt's communicators alone. */
#include <nccl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/api_coll.h"
#include "fallback/nccl_compat.h"

/* Rank r's input at index i of the whole (ranks x count) buffer: sums exact in float. */
static float rval(int rank, size_t i) {
  return (float)((rank + 1) * 2 + (int)(i % 11));
}

static size_t count_wrong(const float* out, int rank, size_t count) {
  size_t bad = 0;
  for (size_t i = 0; i < count; i++) {
    float want = 0;
    for (int r = 0; r < nranks; r++) want += rval(r, (size_t)rank * count + i);
    bad += out[i] != want;
  }
  return bad;
}

/* One reducescatter of `count` floats per rank; want_plan: 1 a reducescatter plan, 0 NCCL. */
static void check_rs(ncclComm_t comm, int rank, size_t count, int inplace, int config, int want_plan) {
  size_t total = count * (size_t)nranks;
  float* send = malloc(total * sizeof(float));
  float* recv = inplace ? send + (size_t)rank * count : malloc(count * sizeof(float));
  for (size_t i = 0; i < total; i++) send[i] = rval(rank, i);
  ncclResult_t rc;
  if (config) {
    ncclCollConfig_t cfg = api_coll_config();
    rc = ncclReduceScatterConfig(send, recv, count, ncclFloat, ncclSum, comm, NULL, &cfg);
  } else {
    rc = ncclReduceScatter(send, recv, count, ncclFloat, ncclSum, comm, NULL);
  }
  CHECK_MSG(rc == ncclSuccess, "rank %d reducescatter: %s", rank, ncclGetLastError(comm));
  const char* served = last_plan(comm);
  size_t bad = count_wrong(recv, rank, count);
  CHECK_MSG(bad == 0, "rank %d reducescatter %zu floats %s%s: %zu wrong (served by %s)", rank, count,
            inplace ? "in place" : "out of place", config ? " (Config)" : "", bad, served);
  if (want_plan == 1)
    CHECK_MSG(strncmp(served, "reducescatter_", 14) == 0, "reducescatter of %zu floats served by %s", count,
              served);
  if (want_plan == 0) CHECK_MSG(strcmp(served, "nccl") == 0, "reducescatter served by %s", served);
  if (!inplace) free(recv);
  free(send);
}

static void run_served(ncclComm_t comm, int rank) {
  /* 1000 floats per rank: not a multiple of the plans' chunk rule, a head and a padded tail. */
  size_t counts[] = {1, 1000, 4096, 70000};
  for (unsigned k = 0; k < sizeof(counts) / sizeof(counts[0]); k++)
    for (int inplace = 0; inplace < 2; inplace++)
      for (int config = 0; config < 2; config++) check_rs(comm, rank, counts[k], inplace, config, 1);
  /* In a group beside an allreduce: both queued, both exact. */
  size_t count = 2048, total = count * (size_t)nranks;
  float* send = malloc(total * sizeof(float));
  float* out = malloc(count * sizeof(float));
  float* ar = malloc(count * sizeof(float));
  for (size_t i = 0; i < total; i++) send[i] = rval(rank, i);
  for (size_t i = 0; i < count; i++) ar[i] = 1;
  CHECK_EQ_INT(ncclGroupStart(), ncclSuccess);
  CHECK_EQ_INT(ncclReduceScatter(send, out, count, ncclFloat, ncclSum, comm, NULL), ncclSuccess);
  CHECK_EQ_INT(ncclAllReduce(ar, ar, count, ncclFloat, ncclSum, comm, NULL), ncclSuccess);
  CHECK_EQ_INT(ncclGroupEnd(), ncclSuccess);
  size_t bad = count_wrong(out, rank, count);
  for (size_t i = 0; i < count; i++) bad += ar[i] != (float)nranks;
  CHECK_MSG(bad == 0, "rank %d: %zu wrong after the group", rank, bad);
  free(send), free(out), free(ar);
}

static void run_badinput(ncclComm_t comm, int rank) {
  float x[64] = {0};
  CHECK_EQ_INT(ncclReduceScatter(x, x, 0, ncclFloat, ncclSum, comm, NULL), ncclSuccess);
  /* recvcount x 4 bytes fits, x ranks does not: refused before anything is read. */
  CHECK_EQ_INT(ncclReduceScatter(x, x, SIZE_MAX / 4 / (size_t)nranks + 1, ncclFloat, ncclSum, comm, NULL),
               ncclInvalidArgument);
  CHECK_STR_CONTAINS(ncclGetLastError(comm), "more bytes than any buffer holds");
  CHECK_EQ_INT(ncclReduceScatter(NULL, x, 4, ncclFloat, ncclSum, comm, NULL), ncclInvalidArgument);
  CHECK_STR_CONTAINS(ncclGetLastError(comm), "sendbuff argument is NULL");
  CHECK_EQ_INT(ncclReduceScatter(x, x, 4, (ncclDataType_t)99, ncclSum, comm, NULL), ncclInvalidArgument);
  CHECK_STR_CONTAINS(ncclGetLastError(comm), "invalid type 99");
  if (!fallback_on()) {
    CHECK_EQ_INT(ncclReduceScatter(x, x, 4, ncclFloat, (ncclRedOp_t)77, comm, NULL), ncclInvalidArgument);
    CHECK_STR_CONTAINS(ncclGetLastError(comm), "invalid reduction operation 77");
    /* A receive buffer inside the send buffer, but not at this rank's slice: not NCCL's in-place
     * call, and the buffers overlap: no plan runs it, and alone nothing else can. */
    float* big = calloc(16 * (size_t)nranks, sizeof(float));
    float* wrong = big + rank * 16 + 1;
    CHECK_EQ_INT(ncclReduceScatter(big, wrong, 16, ncclFloat, ncclSum, comm, NULL), ncclInvalidUsage);
    CHECK_STR_CONTAINS(ncclGetLastError(comm), "partly overlap");
    free(big);
  }
  /* Still served exactly afterwards. */
  check_rs(comm, rank, 512, 1, 0, 1);
}

static void run_force(ncclComm_t comm, int rank) {
  check_rs(comm, rank, 1024, 0, 0, 0);
  check_rs(comm, rank, 1024, 1, 0, 0);
  check_allreduce_on_plan(comm);
}

static void run_devptr(ncclComm_t comm, int rank) {
  size_t count = 1024, total = count * (size_t)nranks;
  float* buf = malloc(total * sizeof(float));
  for (size_t i = 0; i < total; i++) buf[i] = rval(rank, i);
  CHECK(standin_add_device(buf, total * sizeof(float)) == 0);
  float* recv = buf + (size_t)rank * count;
  CHECK_EQ_INT(ncclReduceScatter(buf, recv, count, ncclFloat, ncclSum, comm, NULL), ncclSuccess);
  CHECK_MSG(strcmp(last_plan(comm), "nccl") == 0, "a plan (%s) ran on device memory", last_plan(comm));
  CHECK_MSG(count_wrong(recv, rank, count) == 0, "wrong through NCCL");
  check_rs(comm, rank, 1024, 0, 0, 1); /* host memory: a plan */
  free(buf);                           /* only now: the range would be handed out again */
}

int main(int argc, char** argv) {
  static const struct api_coll_scenarios scenarios = {run_served, run_badinput, run_force, run_devptr};
  return api_coll_main(argc, argv, 1, &scenarios);
}
