/* The double's computing functions. Each records its call first, then:
 *  - returns the scripted result when the test set an error with fake_set_result;
 *  - returns the scripted result, untouched, when its arguments cannot be meant for
 *    computing: a communicator the double did not create, a rank count out of range, an id
 *    pointer that cannot be written. Forwarding tests pass made-up bytes and want only the
 *    recording;
 *  - otherwise computes on host memory and returns when the call is complete, or queues
 *    the work for the outermost ncclGroupEnd inside a group. */
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "fakenccl/fake_internal.h"
#include "fakenccl/fake_record.h"

#define SCRIPTED_ERROR_OUT()                                    \
  do {                                                          \
    if (fake_scripted() != ncclSuccess) return fake_scripted(); \
  } while (0)

#define FIND_OR_SCRIPTED(c, comm)            \
  struct ncclComm* c = fake_comm_find(comm); \
  if (!c) return fake_scripted()

FAKE_EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
  FAKE_RECORD(ncclGetUniqueId, (uniqueId));
  SCRIPTED_ERROR_OUT();
  /* getrandom reports a pointer it cannot write (EFAULT) instead of crashing on it */
  if (getrandom(uniqueId, FAKE_ID_BYTES, 0) != FAKE_ID_BYTES) return fake_scripted();
  return ncclSuccess;
}

static ncclResult_t init_rank(ncclComm_t* comm, int nranks, const ncclUniqueId* id, int rank, int blocking) {
  if (nranks < 1 || nranks > FAKE_MAX_RANKS || rank < 0 || rank >= nranks) return fake_scripted();
  if (!comm) return ncclInvalidArgument;
  struct ncclComm* c;
  ncclResult_t rc = fake_comm_new(&c, nranks, rank, id);
  if (rc != ncclSuccess) return rc;
  c->blocking = blocking;
  if (!blocking) {
    *comm = c; /* NCCL hands out a nonblocking communicator at once */
    return fake_async_start(c, FAKE_ASYNC_INIT, 0, 0, NULL, 0, NULL);
  }
  if (fake_group_depth() > 0) {
    *comm = c;
    return fake_group_add_init(c);
  }
  rc = fake_comm_connect(c);
  if (rc != ncclSuccess) {
    fake_comm_free(c);
    return rc;
  }
  *comm = c;
  return ncclSuccess;
}

FAKE_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  FAKE_RECORD(ncclCommInitRank, (comm, nranks, commId, rank));
  SCRIPTED_ERROR_OUT();
  return init_rank(comm, nranks, &commId, rank, 1);
}

/* Every id is the same communicator's: the double meets on the first one. */
FAKE_EXPORT ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId,
                                                  ncclUniqueId* commIds, ncclConfig_t* config) {
  FAKE_RECORD(ncclCommInitRankScalable, (newcomm, nranks, myrank, nId, commIds, config));
  SCRIPTED_ERROR_OUT();
  if (nId < 1 || !commIds) return fake_scripted();
  return init_rank(newcomm, nranks, &commIds[0], myrank, fake_config_blocking(config));
}

/* Of the config only `blocking` is read: the double has nothing else to configure. */
FAKE_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                                ncclConfig_t* config) {
  FAKE_RECORD(ncclCommInitRankConfig, (comm, nranks, commId, rank, config));
  SCRIPTED_ERROR_OUT();
  return init_rank(comm, nranks, &commId, rank, fake_config_blocking(config));
}

#define FAKE_QUERY(fn, field)                                    \
  FAKE_EXPORT ncclResult_t fn(const ncclComm_t comm, int* out) { \
    FAKE_RECORD(fn, (comm, out));                                \
    SCRIPTED_ERROR_OUT();                                        \
    FIND_OR_SCRIPTED(c, comm);                                   \
    if (!out) return ncclInvalidArgument;                        \
    *out = c->field;                                             \
    return ncclSuccess;                                          \
  }
FAKE_QUERY(ncclCommCount, nranks)
FAKE_QUERY(ncclCommUserRank, rank)
/* as if each rank had a device of its own */
FAKE_QUERY(ncclCommCuDevice, rank)

FAKE_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  FAKE_RECORD(ncclCommGetAsyncError, (comm, asyncError));
  SCRIPTED_ERROR_OUT();
  FIND_OR_SCRIPTED(c, comm);
  if (!asyncError) return ncclInvalidArgument;
  /* collectives complete before returning: only nonblocking init, split and shrink linger */
  *asyncError = (ncclResult_t)atomic_load(&c->async);
  return ncclSuccess;
}

/* Checks a collective's arguments, resolves its op now (a PreMulSum handle may be destroyed
 * before the group ends), and runs or queues it. */
static ncclResult_t collective(struct fake_coll a, ncclRedOp_t op, ncclComm_t comm) {
  FIND_OR_SCRIPTED(c, comm);
  if (!fake_dtype_size(a.dtype)) return ncclInvalidArgument;
  if (a.kind == FAKE_ALLREDUCE || a.kind == FAKE_REDUCESCATTER || a.kind == FAKE_REDUCE) {
    ncclResult_t rc = fake_redop_resolve(c, op, a.dtype, &a.op);
    if (rc != ncclSuccess) return rc;
  }
  int rooted = a.kind == FAKE_BROADCAST || a.kind == FAKE_REDUCE;
  if (rooted && (a.root < 0 || a.root >= c->nranks)) return ncclInvalidArgument;
  int needs_send = a.kind != FAKE_BROADCAST || a.root == c->rank;
  int needs_recv = a.kind != FAKE_REDUCE || a.root == c->rank;
  if (a.count && ((needs_recv && !a.recv) || (needs_send && !a.send))) return ncclInvalidArgument;
  if (atomic_load(&c->async) == ncclInProgress) return ncclInvalidArgument; /* as NCCL: not ready */
  if (fake_group_depth() > 0) return fake_group_add_coll(c, &a);
  if (!c->ready) return ncclInvalidUsage;
  return fake_coll_run(c, &a);
}

FAKE_EXPORT ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                       ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                       cudaStream_t stream) {
  FAKE_RECORD(ncclAllReduce, (sendbuff, recvbuff, count, datatype, op, comm, stream));
  SCRIPTED_ERROR_OUT();
  return collective((struct fake_coll){FAKE_ALLREDUCE, sendbuff, recvbuff, count, datatype, {0}, 0, stream}, op,
                    comm);
}

FAKE_EXPORT ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                       ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  FAKE_RECORD(ncclAllGather, (sendbuff, recvbuff, sendcount, datatype, comm, stream));
  SCRIPTED_ERROR_OUT();
  return collective((struct fake_coll){FAKE_ALLGATHER, sendbuff, recvbuff, sendcount, datatype, {0}, 0, stream},
                    ncclSum, comm);
}

FAKE_EXPORT ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                           cudaStream_t stream) {
  FAKE_RECORD(ncclReduceScatter, (sendbuff, recvbuff, recvcount, datatype, op, comm, stream));
  SCRIPTED_ERROR_OUT();
  return collective((struct fake_coll){FAKE_REDUCESCATTER, sendbuff, recvbuff, recvcount, datatype, {0}, 0, stream},
                    op, comm);
}

FAKE_EXPORT ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                                      ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  FAKE_RECORD(ncclAlltoAll, (sendbuff, recvbuff, count, datatype, comm, stream));
  SCRIPTED_ERROR_OUT();
  return collective((struct fake_coll){FAKE_ALLTOALL, sendbuff, recvbuff, count, datatype, {0}, 0, stream}, ncclSum,
                    comm);
}

FAKE_EXPORT ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                       ncclDataType_t datatype, int root, ncclComm_t comm,
                                       cudaStream_t stream) {
  FAKE_RECORD(ncclBroadcast, (sendbuff, recvbuff, count, datatype, root, comm, stream));
  SCRIPTED_ERROR_OUT();
  return collective((struct fake_coll){FAKE_BROADCAST, sendbuff, recvbuff, count, datatype, {0}, root, stream},
                    ncclSum, comm);
}
FAKE_EXPORT ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count,
                                    ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                                    cudaStream_t stream) {
  FAKE_RECORD(ncclReduce, (sendbuff, recvbuff, count, datatype, op, root, comm, stream));
  SCRIPTED_ERROR_OUT();
  return collective((struct fake_coll){FAKE_REDUCE, sendbuff, recvbuff, count, datatype, {0}, root, stream}, op,
                    comm);
}

/* The definition above under a name nothing can interpose, for ncclBcast's self-binding check. */
extern __typeof__(ncclBroadcast) fake_own_broadcast
    __attribute__((alias("ncclBroadcast"), visibility("hidden")));

FAKE_EXPORT ncclResult_t ncclGroupStart(void) {
  FAKE_RECORD(ncclGroupStart, ());
  SCRIPTED_ERROR_OUT();
  fake_group_start();
  return ncclSuccess;
}

FAKE_EXPORT ncclResult_t ncclGroupEnd(void) {
  FAKE_RECORD(ncclGroupEnd, ());
  SCRIPTED_ERROR_OUT();
  if (fake_group_depth() == 0) return fake_scripted(); /* no group of the double's to end */
  return fake_group_end();
}

FAKE_EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  FAKE_RECORD(ncclCommFinalize, (comm));
  SCRIPTED_ERROR_OUT();
  FIND_OR_SCRIPTED(c, comm);
  (void)c; /* nothing is ever in flight */
  return ncclSuccess;
}

FAKE_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  FAKE_RECORD(ncclCommDestroy, (comm));
  SCRIPTED_ERROR_OUT();
  FIND_OR_SCRIPTED(c, comm);
  fake_comm_free(c);
  return ncclSuccess;
}

FAKE_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) {
  FAKE_RECORD(ncclCommAbort, (comm));
  SCRIPTED_ERROR_OUT();
  FIND_OR_SCRIPTED(c, comm);
  fake_comm_free(c);
  return ncclSuccess;
}

/* The config is not read; the child lives in a segment of its own. */
FAKE_EXPORT ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                                       ncclConfig_t* config) {
  FAKE_RECORD(ncclCommSplit, (comm, color, key, newcomm, config));
  SCRIPTED_ERROR_OUT();
  FIND_OR_SCRIPTED(c, comm);
  if (!newcomm || color < NCCL_SPLIT_NOCOLOR) return ncclInvalidArgument;
  if (atomic_load(&c->async) == ncclInProgress) return ncclInvalidArgument;
  if (!c->blocking) return fake_async_start(c, FAKE_ASYNC_SPLIT, color, key, NULL, 0, newcomm);
  if (fake_group_depth() > 0) return fake_group_add_split(c, color, key, newcomm);
  if (!c->ready) return ncclInvalidUsage;
  return fake_comm_split(c, color, key, newcomm);
}

#ifndef FAKE_PARTIAL
static int by_value(const void* a, const void* b) {
  int x = *(const int*)a, y = *(const int*)b;
  return (x > y) - (x < y);
}

/* Shrink: the excluded ranks take no part (they may be gone). Not inside groups. */
FAKE_EXPORT ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                                        ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) {
  FAKE_RECORD(ncclCommShrink, (comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags));
  SCRIPTED_ERROR_OUT();
  FIND_OR_SCRIPTED(c, comm);
  if (!newcomm || excludeRanksCount < 0 || excludeRanksCount >= c->nranks ||
      (excludeRanksCount && !excludeRanksList))
    return ncclInvalidArgument;
  if (atomic_load(&c->async) == ncclInProgress || !c->ready) return ncclInvalidArgument;
  qsort(excludeRanksList, (size_t)excludeRanksCount, sizeof(int), by_value); /* as NCCL: in place */
  for (int i = 0; i < excludeRanksCount; i++)
    if (excludeRanksList[i] < 0 || excludeRanksList[i] >= c->nranks || excludeRanksList[i] == c->rank ||
        (i && excludeRanksList[i] == excludeRanksList[i - 1]))
      return ncclInvalidArgument;
  if (!c->blocking) return fake_async_start(c, FAKE_ASYNC_SHRINK, 0, 0, excludeRanksList, excludeRanksCount, newcomm);
  return fake_comm_shrink(c, excludeRanksList, excludeRanksCount, newcomm);
}
#endif

FAKE_EXPORT ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                                  ncclScalarResidence_t residence, ncclComm_t comm) {
  FAKE_RECORD(ncclRedOpCreatePreMulSum, (op, scalar, datatype, residence, comm));
  SCRIPTED_ERROR_OUT();
  FIND_OR_SCRIPTED(c, comm);
  size_t es = fake_dtype_size(datatype);
  if (!op || !scalar || !es) return ncclInvalidArgument;
  if (residence != ncclScalarHostImmediate && residence != ncclScalarDevice) return ncclInvalidArgument;
  for (int i = 0; i < FAKE_MAX_USER_OPS; i++) {
    struct fake_user_op* u = &c->ops[i];
    if (u->in_use) continue;
    *u = (struct fake_user_op){.in_use = 1, .dtype = datatype, .residence = residence, .scalar_ptr = scalar};
    if (residence == ncclScalarHostImmediate) memcpy(u->scalar, scalar, es);
    *op = (ncclRedOp_t)(ncclNumOps + i);
    return ncclSuccess;
  }
  return ncclInternalError; /* out of slots: a test that leaks ops */
}

FAKE_EXPORT ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  FAKE_RECORD(ncclRedOpDestroy, (op, comm));
  SCRIPTED_ERROR_OUT();
  FIND_OR_SCRIPTED(c, comm);
  int i = (int)op - ncclNumOps;
  if (i < 0 || i >= FAKE_MAX_USER_OPS || !c->ops[i].in_use) return ncclInvalidArgument;
  c->ops[i].in_use = 0;
  return ncclSuccess;
}
