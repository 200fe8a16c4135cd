/* Finalising, destroying and aborting communicators. */
#include <nccl.h>
#include <stdlib.h>

#include "api/config.h"
#include "api/export.h"
#include "api/group.h"
#include "api/handles.h"
#include "api/tune.h"
#include "api/launch.h"
#include "api/plans.h"
#include "api/unavailable.h"
#include "comm/bootstrap.h"
#include "comm/comm_create.h"
#include "fallback/real_nccl.h"
#include "transport/world.h"
#include "util/log.h"

SHUNT_EXPORT ncclResult_t pncclCommFinalize(ncclComm_t comm) {
  SHUNT_COMM_REF c = shunt_handles_get(comm);
  if (c && !c->real) return ncclSuccess; /* shunt's work completes before each call returns */
  const struct shunt_real_nccl* real = shunt_real_nccl();
  if (!real || !real->ncclCommFinalize) return shunt_unavailable("ncclCommFinalize", real);
  return real->ncclCommFinalize(comm);
}
SHUNT_ALIAS(ncclCommFinalize, ncclResult_t, (ncclComm_t comm))

static ncclResult_t end_comm(const char* fn, ncclComm_t comm, int abort) {
  if (!comm) {
    if (abort) return ncclSuccess; /* NCCL: aborting NULL is a no-op */
    SHUNT_WARN("%s: comm argument is NULL", fn);
    return ncclInvalidArgument;
  }
  struct shunt_comm* c = shunt_handles_remove(comm);
  ncclComm_t real_comm = c ? c->real : comm;
  if (c) {
    /* Nothing below waits on peers: they may be gone, or held by this very thread. A
     * nonblocking init, split or shrink still running is stopped first. */
    shunt_comm_stop_job(c);
    /* Host runs complete within their call: a wait still under way is another thread's, on
     * peers that may be gone. GPU kernels of a destroyed communicator finish their work. */
    shunt_launch_abort(c, abort);
    if (abort || atomic_load(&c->users) > 0) shunt_bootstrap_abort(c->boot);
    /* A call in another thread (a watchdog's query, a collective) finishes before the state goes. */
    shunt_handles_unused(c);
    shunt_launch_release(c);
    shunt_tune_fini(c, abort);
    shunt_comm_free(c, abort);
  }
  if (c && !real_comm) return ncclSuccess;
  const struct shunt_real_nccl* real = shunt_real_nccl();
  ncclResult_t (*f)(ncclComm_t) = real ? (abort ? real->ncclCommAbort : real->ncclCommDestroy) : NULL;
  if (!f) return shunt_unavailable(abort ? "ncclCommAbort" : "ncclCommDestroy", real);
  return f(real_comm);
}

SHUNT_EXPORT ncclResult_t pncclCommDestroy(ncclComm_t comm) { return end_comm("CommDestroy", comm, 0); }
SHUNT_ALIAS(ncclCommDestroy, ncclResult_t, (ncclComm_t comm))

SHUNT_EXPORT ncclResult_t pncclCommAbort(ncclComm_t comm) { return end_comm("CommAbort", comm, 1); }
SHUNT_ALIAS(ncclCommAbort, ncclResult_t, (ncclComm_t comm))
