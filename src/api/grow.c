/* ncclCommGrow: NCCL grows its communicator; the grown one runs on NCCL alone.
 *
 * shunt's half would need the new ranks to join its bootstrap, which NCCL's per-communicator
 * id (ncclCommGetUniqueId) does not carry; until it does, shunt records no state for the
 * grown communicator, so every call on it goes to NCCL untouched. The parent keeps its plans. */
#include <nccl.h>

#include "api/export.h"
#include "api/handles.h"
#include "api/unavailable.h"
#include "comm/comm.h"
#include "fallback/real_nccl.h"
#include "util/log.h"

SHUNT_EXPORT ncclResult_t pncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId, int rank,
                                        ncclComm_t* newcomm, ncclConfig_t* config) {
  SHUNT_COMM_REF c = comm ? shunt_handles_get(comm) : NULL;
  if (c && !c->real) return shunt_own_handle_unsupported("ncclCommGrow");
  const struct shunt_real_nccl* real = shunt_real_nccl();
  if (!real || !real->ncclCommGrow) return shunt_unavailable("ncclCommGrow", real);
  ncclResult_t rc = real->ncclCommGrow(comm, nRanks, uniqueId, rank, newcomm, config);
  if (rc != ncclSuccess && rc != ncclInProgress) {
    shunt_note_real_failure();
    return rc;
  }
  SHUNT_INFO(SHUNT_COMM, "ncclCommGrow to %d ranks (%s): the grown communicator runs on NCCL alone", nRanks,
             comm ? "an existing rank" : "a new rank");
  return rc;
}
SHUNT_ALIAS(ncclCommGrow, ncclResult_t,
            (ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId, int rank, ncclComm_t* newcomm,
             ncclConfig_t* config))
