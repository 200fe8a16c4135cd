/* Communicator queries, PreMulSum tracking and groups: answered by shunt for communicators
 * it made alone, forwarded (with shunt's bookkeeping beside) otherwise. */
#include <nccl.h>
#include <string.h>

#include "api/export.h"
#include "api/group.h"
#include "api/handles.h"
#include "api/launch.h"
#include "api/nccl_vocab.h"
#include "comm/redop.h"
#include "api/unavailable.h"
#include "comm/comm.h"
#include "fallback/real_nccl.h"
#include "util/log.h"

/* A shunt-only communicator, or NULL when NCCL should answer for `comm`. */
static struct shunt_comm* own(ncclComm_t comm) {
  if (!shunt_handle_is_own(comm)) return NULL;
  return shunt_handles_get(comm);
}

static ncclResult_t null_arg(const char* fn, const char* what) {
  SHUNT_WARN("%s: %s argument is NULL", fn, what);
  return ncclInvalidArgument;
}

SHUNT_EXPORT ncclResult_t pncclCommCount(const ncclComm_t comm, int* count) {
  SHUNT_COMM_REF c = own(comm);
  if (!c) SHUNT_FORWARD(ncclCommCount, (comm, count));
  if (!count) return null_arg("CommCount", "count");
  *count = c->nranks;
  return ncclSuccess;
}
SHUNT_ALIAS(ncclCommCount, ncclResult_t, (const ncclComm_t comm, int* count))

SHUNT_EXPORT ncclResult_t pncclCommCuDevice(const ncclComm_t comm, int* device) {
  SHUNT_COMM_REF c = own(comm);
  if (!c) SHUNT_FORWARD(ncclCommCuDevice, (comm, device));
  if (!device) return null_arg("CommCuDevice", "device");
  *device = c->cuda_dev < 0 ? 0 : c->cuda_dev;
  return ncclSuccess;
}
SHUNT_ALIAS(ncclCommCuDevice, ncclResult_t, (const ncclComm_t comm, int* device))

SHUNT_EXPORT ncclResult_t pncclCommUserRank(const ncclComm_t comm, int* rank) {
  SHUNT_COMM_REF c = own(comm);
  if (!c) SHUNT_FORWARD(ncclCommUserRank, (comm, rank));
  if (!rank) return null_arg("CommUserRank", "rank");
  *rank = c->rank;
  return ncclSuccess;
}
SHUNT_ALIAS(ncclCommUserRank, ncclResult_t, (const ncclComm_t comm, int* rank))

SHUNT_EXPORT ncclResult_t pncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  if (!asyncError) return null_arg("CommGetAsyncError", "asyncError");
  SHUNT_COMM_REF c = shunt_handles_get(comm);
  /* A GPU kernel's failure is found by asking, as NCCL finds a failed kernel's. */
  if (c) shunt_launch_poll(c);
  ncclResult_t mine = c ? shunt_comm_status(c) : ncclSuccess;
  if (c && !c->real) {
    *asyncError = mine;
    return ncclSuccess;
  }
  const struct shunt_real_nccl* real = shunt_real_nccl();
  if (!real || !real->ncclCommGetAsyncError) return shunt_unavailable("ncclCommGetAsyncError", real);
  ncclResult_t rc = real->ncclCommGetAsyncError(comm, asyncError);
  /* A communicator shunt does not know is NCCL's alone: its answer is passed on untouched. */
  if (!c || rc != ncclSuccess || mine == ncclSuccess) return rc;
  /* shunt's own failure (a plan that timed out, say) outranks "in progress" and success;
   * shunt's work in progress outranks NCCL's success. */
  if (mine != ncclInProgress && (*asyncError == ncclSuccess || *asyncError == ncclInProgress))
    *asyncError = mine;
  else if (mine == ncclInProgress && *asyncError == ncclSuccess)
    *asyncError = ncclInProgress;
  return rc;
}
SHUNT_ALIAS(ncclCommGetAsyncError, ncclResult_t, (ncclComm_t comm, ncclResult_t* asyncError))

SHUNT_EXPORT ncclResult_t pncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                                     ncclScalarResidence_t residence, ncclComm_t comm) {
  SHUNT_COMM_REF c = shunt_handles_get(comm);
  if (!op || !scalar) return null_arg("RedOpCreatePreMulSum", !op ? "op" : "scalar");
  if (c && c->real) {
    const struct shunt_real_nccl* real = shunt_real_nccl();
    if (!real || !real->ncclRedOpCreatePreMulSum) return shunt_unavailable("ncclRedOpCreatePreMulSum", real);
    ncclResult_t rc = real->ncclRedOpCreatePreMulSum(op, scalar, datatype, residence, comm);
    if (rc != ncclSuccess) {
      shunt_note_real_failure();
      return rc;
    }
  } else if (c) {
    if (!shunt_dtype_valid(shunt_dtype_from_nccl(datatype))) {
      SHUNT_WARN("RedOpCreatePreMulSum: invalid type %d", (int)datatype);
      return ncclInvalidArgument;
    }
    *op = shunt_redop_fresh(c->redops);
  } else {
    SHUNT_FORWARD(ncclRedOpCreatePreMulSum, (op, scalar, datatype, residence, comm));
  }
  struct shunt_redop_info info = {.dtype = datatype, .residence = residence};
  size_t sz = shunt_dtype_size(shunt_dtype_from_nccl(datatype));
  if (residence == ncclScalarHostImmediate && sz <= sizeof(info.scalar)) memcpy(info.scalar, scalar, sz);
  else info.scalar_ptr = scalar;
  /* Without a record the op still works: calls using it go to NCCL. */
  if (shunt_redop_add(c->redops, *op, &info) != 0)
    SHUNT_INFO(SHUNT_CALL, "RedOpCreatePreMulSum: not recorded (out of memory); calls with it go to NCCL");
  return ncclSuccess;
}
SHUNT_ALIAS(ncclRedOpCreatePreMulSum, ncclResult_t,
            (ncclRedOp_t * op, void* scalar, ncclDataType_t datatype, ncclScalarResidence_t residence,
             ncclComm_t comm))

SHUNT_EXPORT ncclResult_t pncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  SHUNT_COMM_REF c = shunt_handles_get(comm);
  if (c) shunt_redop_remove(c->redops, op);
  if (c && !c->real) return ncclSuccess;
  SHUNT_FORWARD(ncclRedOpDestroy, (op, comm));
}
SHUNT_ALIAS(ncclRedOpDestroy, ncclResult_t, (ncclRedOp_t op, ncclComm_t comm))

SHUNT_EXPORT ncclResult_t pncclGroupStart(void) {
  shunt_group_begin();
  const struct shunt_real_nccl* real = shunt_real_nccl();
  if (real && real->ncclGroupStart) return real->ncclGroupStart();
  return ncclSuccess;
}
SHUNT_ALIAS(ncclGroupStart, ncclResult_t, (void))

SHUNT_EXPORT ncclResult_t pncclGroupEnd(void) {
  if (shunt_group_depth() == 0) {
    SHUNT_WARN("ncclGroupEnd: not in a group");
    return ncclInvalidUsage;
  }
  /* NCCL's group ends first: the forwarded calls and NCCL's half of any init it holds. */
  ncclResult_t rrc = ncclSuccess;
  const struct shunt_real_nccl* real = shunt_real_nccl();
  if (real && real->ncclGroupEnd) {
    rrc = real->ncclGroupEnd();
    if (rrc != ncclSuccess && rrc != ncclInProgress) shunt_note_real_failure();
  }
  return shunt_result_merge(shunt_group_finish(), rrc);
}
SHUNT_ALIAS(ncclGroupEnd, ncclResult_t, (void))
