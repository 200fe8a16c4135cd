/* ncclBroadcast, ncclBcast and ncclBroadcastConfig through the NCCL API on the host backend: N
 * ranks as processes, host buffers.
 *
 * Usage: test_api_bcast SCENARIO NRANKS
 *   served    every root, in place and out of place (other ranks' sendbuff NULL or a stray
 *             pointer: ignored), the plain, ncclBcast and *Config calls, sizes on both plan
 *             families with a head and a padded tail, a root whose buffers partly overlap,
 *             inside a group with an allreduce: exact, on broadcast plans
 *   badinput  count 0; a root out of range; a NULL receive buffer; a NULL sendbuff on the
 *             root; a count whose byte size wraps; an invalid dtype: NCCL's answers, never a
 *             crash, then served exactly
 *   force     SHUNT_FORCE_FALLBACK=broadcast: broadcast goes to NCCL (the double), exactly;
 *             allreduce still runs on plans
 *   devptr    buffers the CUDA driver stand-in calls device memory: to NCCL with the reason
 * SHUNT_FALLBACK=0 in the environment runs any of them with shunt's communicators alone. */
#include <nccl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/api_coll.h"
#include "fallback/nccl_compat.h"

/* The root's element i. */
static int32_t rval(int root, size_t i) {
  return (int32_t)((root + 1) * 1000003 + (int32_t)(i % 977));
}

static size_t count_wrong(const int32_t* out, int root, size_t count) {
  size_t bad = 0;
  for (size_t i = 0; i < count; i++) bad += out[i] != rval(root, i);
  return bad;
}

enum form { PLAIN, BCAST, CONFIG };
static const char* const form_name[] = {"ncclBroadcast", "ncclBcast", "ncclBroadcastConfig"};

/* One broadcast of `count` int32 from `root`; want_plan: 1 a broadcast plan, 0 NCCL. Other ranks
 * pass a NULL sendbuff out of place (ncclBcast and in place: their receive buffer). */
static void check_bcast(ncclComm_t comm, int rank, int root, size_t count, int inplace, enum form f,
                        int want_plan) {
  int32_t* recv = malloc(count * sizeof(int32_t));
  int32_t* send = inplace || f == BCAST ? recv : malloc(count * sizeof(int32_t));
  for (size_t i = 0; i < count; i++) recv[i] = -7;
  if (rank == root)
    for (size_t i = 0; i < count; i++) send[i] = rval(root, i);
  const void* sb = rank == root || inplace ? (const void*)send : NULL;
  ncclResult_t rc;
  if (f == CONFIG) {
    ncclCollConfig_t cfg = api_coll_config();
    rc = ncclBroadcastConfig(sb, recv, count, ncclInt32, root, comm, NULL, &cfg);
  } else if (f == BCAST) {
    rc = ncclBcast(recv, count, ncclInt32, root, comm, NULL);
  } else {
    rc = ncclBroadcast(sb, recv, count, ncclInt32, root, comm, NULL);
  }
  CHECK_MSG(rc == ncclSuccess, "rank %d %s: %s", rank, form_name[f], ncclGetLastError(comm));
  const char* served = last_plan(comm);
  size_t bad = count_wrong(recv, root, count);
  CHECK_MSG(bad == 0, "rank %d %s root %d %zu int32 %s: %zu wrong (served by %s)", rank, form_name[f], root,
            count, inplace ? "in place" : "out of place", bad, served);
  if (rank == root && send != recv)
    CHECK_MSG(count_wrong(send, root, count) == 0, "the root's send buffer was written");
  if (want_plan == 1)
    CHECK_MSG(strncmp(served, "broadcast_", 10) == 0, "%s of %zu int32 served by %s", form_name[f], count,
              served);
  if (want_plan == 0) CHECK_MSG(strcmp(served, "nccl") == 0, "broadcast served by %s", served);
  if (send != recv) free(send);
  free(recv);
}

static void run_served(ncclComm_t comm, int rank) {
  /* 1001 int32: not a multiple of the chunk rule, a head and a padded tail (LL); 300017
   * (1.2 MB): the Simple family. */
  size_t counts[] = {1001, 300017};
  check_bcast(comm, rank, nranks - 1, 1, 0, PLAIN, 1); /* a padded tail alone */
  for (int root = 0; root < nranks; root++)
    for (unsigned k = 0; k < sizeof(counts) / sizeof(counts[0]); k++)
      for (int inplace = 0; inplace < 2; inplace++)
        for (int f = PLAIN; f <= CONFIG; f++) {
          if (f == BCAST && !inplace) continue; /* one buffer: always in place */
          /* The forms differ before the plan only, and the modes alternate over the roots: the
           * Simple family costs most under the sanitizers. */
          if (counts[k] > 100000 && (f != PLAIN || inplace != root % 2)) continue;
          check_bcast(comm, rank, root, counts[k], inplace, (enum form)f, 1);
        }
  /* A stray sendbuff on other ranks is never read. */
  size_t count = 3000;
  int root = nranks - 1;
  int32_t* buf = malloc(count * sizeof(int32_t));
  int32_t* other = malloc(8);
  for (size_t i = 0; i < count; i++) buf[i] = rank == root ? rval(root, i) : 0;
  CHECK_EQ_INT(ncclBroadcast(rank == root ? buf : other, buf, count, ncclInt32, root, comm, NULL),
               ncclSuccess);
  CHECK_MSG(count_wrong(buf, root, count) == 0, "rank %d: wrong with a stray sendbuff", rank);
  /* The root's buffers partly overlap: its input moved into its output first, served on the plan. */
  int32_t* big = calloc(count + 5, sizeof(int32_t));
  int32_t *in = big + 5, *out = rank == root ? big : buf;
  for (size_t i = 0; i < count; i++) in[i] = rank == root ? rval(root, i) : 0;
  if (rank != root) memset(buf, 0, count * sizeof(int32_t));
  CHECK_EQ_INT(ncclBroadcast(rank == root ? in : NULL, out, count, ncclInt32, root, comm, NULL), ncclSuccess);
  CHECK_MSG(count_wrong(out, root, count) == 0, "rank %d: wrong when the root's buffers partly overlap",
            rank);
  CHECK_MSG(strncmp(last_plan(comm), "broadcast_", 10) == 0, "overlap served by %s", last_plan(comm));
  free(big), free(other);
  /* In a group beside an allreduce, and two broadcasts of other roots: all queued, all exact. */
  int32_t* b2 = malloc(count * sizeof(int32_t));
  float* ar = malloc(count * sizeof(float));
  for (size_t i = 0; i < count; i++) {
    buf[i] = rank == 0 ? rval(0, i) : -1;
    b2[i] = rank == root ? rval(root, i) : -1;
    ar[i] = 1;
  }
  CHECK_EQ_INT(ncclGroupStart(), ncclSuccess);
  CHECK_EQ_INT(ncclBcast(buf, count, ncclInt32, 0, comm, NULL), ncclSuccess);
  CHECK_EQ_INT(ncclAllReduce(ar, ar, count, ncclFloat, ncclSum, comm, NULL), ncclSuccess);
  CHECK_EQ_INT(ncclBroadcast(b2, b2, count, ncclInt32, root, comm, NULL), ncclSuccess);
  CHECK_EQ_INT(ncclGroupEnd(), ncclSuccess);
  size_t bad = count_wrong(buf, 0, count) + count_wrong(b2, root, count);
  for (size_t i = 0; i < count; i++) bad += ar[i] != (float)nranks;
  CHECK_MSG(bad == 0, "rank %d: %zu wrong after the group", rank, bad);
  free(buf), free(b2), free(ar);
}

static void run_badinput(ncclComm_t comm, int rank) {
  int32_t x[64] = {0};
  CHECK_EQ_INT(ncclBroadcast(x, x, 0, ncclInt32, 0, comm, NULL), ncclSuccess);
  CHECK_EQ_INT(ncclBroadcast(x, x, 4, ncclInt32, nranks, comm, NULL), ncclInvalidArgument);
  CHECK_STR_CONTAINS(ncclGetLastError(comm), "invalid root");
  CHECK_EQ_INT(ncclBcast(x, 4, ncclInt32, -1, comm, NULL), ncclInvalidArgument);
  CHECK_STR_CONTAINS(ncclGetLastError(comm), "invalid root -1");
  CHECK_EQ_INT(ncclBroadcast(x, NULL, 4, ncclInt32, 0, comm, NULL), ncclInvalidArgument);
  CHECK_STR_CONTAINS(ncclGetLastError(comm), "recvbuff argument is NULL");
  /* NULL sendbuff is refused on the root only; the others do not call, so nobody waits. */
  if (rank == 0) {
    CHECK_EQ_INT(ncclBroadcast(NULL, x, 4, ncclInt32, 0, comm, NULL), ncclInvalidArgument);
    CHECK_STR_CONTAINS(ncclGetLastError(comm), "sendbuff argument is NULL");
  }
  CHECK_EQ_INT(ncclBroadcast(x, x, SIZE_MAX / 4 + 1, ncclInt32, 0, comm, NULL), ncclInvalidArgument);
  CHECK_STR_CONTAINS(ncclGetLastError(comm), "more bytes than any buffer holds");
  CHECK_EQ_INT(ncclBroadcast(x, x, 4, (ncclDataType_t)99, 0, comm, NULL), ncclInvalidArgument);
  CHECK_STR_CONTAINS(ncclGetLastError(comm), "invalid type 99");
  /* Still served exactly afterwards. */
  check_bcast(comm, rank, nranks - 1, 512, 0, PLAIN, 1);
}

static void run_force(ncclComm_t comm, int rank) {
  check_bcast(comm, rank, 0, 1024, 0, PLAIN, 0);
  check_bcast(comm, rank, nranks - 1, 1024, 1, BCAST, 0);
  check_allreduce_on_plan(comm);
}

static void run_devptr(ncclComm_t comm, int rank) {
  size_t count = 1024;
  int32_t* buf = malloc(count * sizeof(int32_t));
  for (size_t i = 0; i < count; i++) buf[i] = rank == 1 ? rval(1, i) : 0;
  CHECK(standin_add_device(buf, count * sizeof(int32_t)) == 0);
  CHECK_EQ_INT(ncclBcast(buf, count, ncclInt32, 1, comm, NULL), ncclSuccess);
  CHECK_MSG(strcmp(last_plan(comm), "nccl") == 0, "a plan (%s) ran on device memory", last_plan(comm));
  CHECK_MSG(count_wrong(buf, 1, count) == 0, "wrong through NCCL");
  check_bcast(comm, rank, 1, 1024, 0, PLAIN, 1); /* host memory: a plan */
  free(buf);                                     /* only now: the range would be handed out again */
}

int main(int argc, char** argv) {
  static const struct api_coll_scenarios scenarios = {run_served, run_badinput, run_force, run_devptr};
  return api_coll_main(argc, argv, 2, &scenarios);
}
