/* ncclCommSuspend / ncclCommResume: shunt's half is suspended with NCCL's. */
#include <nccl.h>

#include "api/export.h"
#include "api/group.h"
#include "api/handles.h"
#include "api/unavailable.h"
#include "comm/comm.h"
#include "exec/backend.h"
#include "fallback/real_nccl.h"
#include "util/log.h"

SHUNT_EXPORT ncclResult_t pncclCommSuspend(ncclComm_t comm, int flags) {
  SHUNT_COMM_REF c = shunt_handles_get(comm);
  ncclResult_t rc = ncclSuccess;
  if (!c || c->real) {
    const struct shunt_real_nccl* real = shunt_real_nccl();
    if (!real || !real->ncclCommSuspend) return shunt_unavailable("ncclCommSuspend", real);
    rc = real->ncclCommSuspend(c ? c->real : comm, flags);
    if (rc != ncclSuccess && rc != ncclInProgress) {
      shunt_note_real_failure();
      return rc; /* NCCL's half is not suspended: neither is shunt's */
    }
  }
  if (!c) return rc;
  atomic_store(&c->suspended, 1);
  /* Memory: the lowered programs are this rank's alone and are made again on demand. The host
   * backend's shared regions stay: they are made collectively, and a suspension is not. A
   * group may still hold calls that use the programs, so inside one they stay too. */
  if ((flags & NCCL_SUSPEND_MEM) && shunt_group_depth() == 0) shunt_backend_drop_programs(atomic_load(&c->host));
  SHUNT_INFO(SHUNT_COMM,
             "rank %d: communicator suspended (flags 0x%x); plans take no work until ncclCommResume", c->rank,
             (unsigned)flags);
  return rc;
}
SHUNT_ALIAS(ncclCommSuspend, ncclResult_t, (ncclComm_t comm, int flags))

SHUNT_EXPORT ncclResult_t pncclCommResume(ncclComm_t comm) {
  SHUNT_COMM_REF c = shunt_handles_get(comm);
  ncclResult_t rc = ncclSuccess;
  if (!c || c->real) {
    const struct shunt_real_nccl* real = shunt_real_nccl();
    if (!real || !real->ncclCommResume) return shunt_unavailable("ncclCommResume", real);
    rc = real->ncclCommResume(c ? c->real : comm);
    if (rc != ncclSuccess && rc != ncclInProgress) {
      shunt_note_real_failure();
      return rc;
    }
  }
  if (!c) return rc;
  atomic_store(&c->suspended, 0);
  SHUNT_INFO(SHUNT_COMM, "rank %d: communicator resumed", c->rank);
  return rc;
}
SHUNT_ALIAS(ncclCommResume, ncclResult_t, (ncclComm_t comm))
