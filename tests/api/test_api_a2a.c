/* ncclAlltoAll through the NCCL API on the host backend: N ranks as processes, host buffers.
 *
 * Usage: test_api_a2a SCENARIO NRANKS
 *   served    in place (sendbuff == recvbuff) and out of place, the plain and the *Config
 *             call, alone and inside a group with an allreduce: exact, on alltoall plans
 *   badinput  count 0; a count whose byte size on every rank wraps; a NULL buffer; an
 *             invalid dtype; alone, a receive buffer that partly overlaps the send buffer:
 *             NCCL's answers, never a crash
 *   force     SHUNT_FORCE_FALLBACK=alltoall: alltoall goes to NCCL (the double), exactly, in
 *             place too; allreduce still runs on plans
 *   devptr    buffers the CUDA driver stand-in calls device memory: to NCCL with the reason
 *             (the GPU backend serves allreduce and allgather only)
 * SHUNT_FALLBACK=0 in the environment runs any of them with shunt's communicators alone. */
#include <nccl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/api_coll.h"
#include "fallback/nccl_compat.h"

/* Element i of the block rank `from` sends to rank `to`: tells every sender, receiver and
 * position apart, exactly in float. */
static float aval(int from, int to, size_t i) {
  return (float)(from * 1000 + to * 100 + (int)(i % 97));
}

static void fill(float* send, int rank, size_t count) {
  for (int to = 0; to < nranks; to++)
    for (size_t i = 0; i < count; i++) send[(size_t)to * count + i] = aval(rank, to, i);
}

/* Block j of this rank's output is what rank j sent it. */
static size_t count_wrong(const float* out, int rank, size_t count) {
  size_t bad = 0;
  for (int from = 0; from < nranks; from++)
    for (size_t i = 0; i < count; i++) bad += out[(size_t)from * count + i] != aval(from, rank, i);
  return bad;
}

/* One alltoall of `count` floats to and from each peer; want_plan: 1 an alltoall plan, 0 NCCL. */
static void check_a2a(ncclComm_t comm, int rank, size_t count, int inplace, int config, int want_plan) {
  size_t total = count * (size_t)nranks;
  float* send = malloc(total * sizeof(float));
  float* recv = inplace ? send : malloc(total * sizeof(float));
  fill(send, rank, count);
  if (!inplace)
    for (size_t i = 0; i < total; i++) recv[i] = -1;
  ncclResult_t rc;
  if (config) {
    ncclCollConfig_t cfg = api_coll_config();
    rc = ncclAlltoAllConfig(send, recv, count, ncclFloat, comm, NULL, &cfg);
  } else {
    rc = ncclAlltoAll(send, recv, count, ncclFloat, comm, NULL);
  }
  CHECK_MSG(rc == ncclSuccess, "rank %d alltoall: %s", rank, ncclGetLastError(comm));
  const char* served = last_plan(comm);
  size_t bad = count_wrong(recv, rank, count);
  CHECK_MSG(bad == 0, "rank %d alltoall %zu floats per peer %s%s: %zu wrong (served by %s)", rank, count,
            inplace ? "in place" : "out of place", config ? " (Config)" : "", bad, served);
  if (want_plan == 1)
    CHECK_MSG(strncmp(served, "alltoall_", 9) == 0 && (strstr(served, "_inplace") != NULL) == inplace,
              "alltoall of %zu floats %s served by %s", count, inplace ? "in place" : "out of place", served);
  if (want_plan == 0) CHECK_MSG(strcmp(served, "nccl") == 0, "alltoall served by %s", served);
  if (!inplace) free(recv);
  free(send);
}

static void run_served(ncclComm_t comm, int rank) {
  /* 1000 floats per peer: not a multiple of the plans' chunk rule, a head and a padded tail in
   * every block; 70000 x 4 x ranks bytes: the Simple plans. */
  size_t counts[] = {1, 1000, 4096, 70000};
  for (unsigned k = 0; k < sizeof(counts) / sizeof(counts[0]); k++)
    for (int inplace = 0; inplace < 2; inplace++)
      for (int config = 0; config < 2; config++) check_a2a(comm, rank, counts[k], inplace, config, 1);
  /* In a group beside an allreduce: both queued, both exact. */
  size_t count = 2048, total = count * (size_t)nranks;
  float* send = malloc(total * sizeof(float));
  float* out = malloc(total * sizeof(float));
  float* ar = malloc(count * sizeof(float));
  fill(send, rank, count);
  for (size_t i = 0; i < count; i++) ar[i] = 1;
  CHECK_EQ_INT(ncclGroupStart(), ncclSuccess);
  CHECK_EQ_INT(ncclAlltoAll(send, out, count, ncclFloat, comm, NULL), ncclSuccess);
  CHECK_EQ_INT(ncclAllReduce(ar, ar, count, ncclFloat, ncclSum, comm, NULL), ncclSuccess);
  CHECK_EQ_INT(ncclGroupEnd(), ncclSuccess);
  size_t bad = count_wrong(out, rank, count);
  for (size_t i = 0; i < count; i++) bad += ar[i] != (float)nranks;
  CHECK_MSG(bad == 0, "rank %d: %zu wrong after the group", rank, bad);
  free(send), free(out), free(ar);
}

static void run_badinput(ncclComm_t comm, int rank) {
  float x[64] = {0};
  CHECK_EQ_INT(ncclAlltoAll(x, x, 0, ncclFloat, comm, NULL), ncclSuccess);
  /* count x 4 bytes fits, x ranks does not: refused before anything is read. */
  CHECK_EQ_INT(ncclAlltoAll(x, x, SIZE_MAX / 4 / (size_t)nranks + 1, ncclFloat, comm, NULL),
               ncclInvalidArgument);
  CHECK_STR_CONTAINS(ncclGetLastError(comm), "more bytes than any buffer holds");
  CHECK_EQ_INT(ncclAlltoAll(NULL, x, 4, ncclFloat, comm, NULL), ncclInvalidArgument);
  CHECK_STR_CONTAINS(ncclGetLastError(comm), "sendbuff argument is NULL");
  CHECK_EQ_INT(ncclAlltoAll(x, NULL, 4, ncclFloat, comm, NULL), ncclInvalidArgument);
  CHECK_STR_CONTAINS(ncclGetLastError(comm), "recvbuff argument is NULL");
  CHECK_EQ_INT(ncclAlltoAll(x, x, 4, (ncclDataType_t)99, comm, NULL), ncclInvalidArgument);
  CHECK_STR_CONTAINS(ncclGetLastError(comm), "invalid type 99");
  if (!fallback_on()) {
    /* A receive buffer one element into the send buffer: not in place, and the buffers
     * overlap: no plan runs it, and alone nothing else can. */
    float* big = calloc(16 * (size_t)nranks + 1, sizeof(float));
    CHECK_EQ_INT(ncclAlltoAll(big, big + 1, 16, ncclFloat, comm, NULL), ncclInvalidUsage);
    CHECK_STR_CONTAINS(ncclGetLastError(comm), "partly overlap");
    free(big);
  }
  /* Still served exactly afterwards. */
  check_a2a(comm, rank, 512, 1, 0, 1);
}

static void run_force(ncclComm_t comm, int rank) {
  check_a2a(comm, rank, 1024, 0, 0, 0);
  check_a2a(comm, rank, 1024, 1, 0, 0);
  check_allreduce_on_plan(comm);
}

static void run_devptr(ncclComm_t comm, int rank) {
  size_t count = 1024, total = count * (size_t)nranks;
  float* buf = malloc(2 * total * sizeof(float));
  float* recv = buf + total;
  fill(buf, rank, count);
  CHECK(standin_add_device(buf, 2 * total * sizeof(float)) == 0);
  CHECK_EQ_INT(ncclAlltoAll(buf, recv, count, ncclFloat, comm, NULL), ncclSuccess);
  CHECK_MSG(strcmp(last_plan(comm), "nccl") == 0, "a plan (%s) ran on device memory", last_plan(comm));
  CHECK_MSG(count_wrong(recv, rank, count) == 0, "wrong through NCCL");
  check_a2a(comm, rank, 1024, 0, 0, 1); /* host memory: a plan */
  free(buf);                            /* only now: the range would be handed out again */
}

int main(int argc, char** argv) {
  static const struct api_coll_scenarios scenarios = {run_served, run_badinput, run_force, run_devptr};
  return api_coll_main(argc, argv, 1, &scenarios);
}
