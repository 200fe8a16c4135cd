/* Splitting, finalising, destroying and aborting communicators. */
#include <nccl.h>
#include <stdlib.h>

#include "api/config.h"
#include "api/export.h"
#include "api/group.h"
#include "api/handles.h"
#include "api/launch.h"
#include "api/plans.h"
#include "api/unavailable.h"
#include "comm/bootstrap.h"
#include "comm/comm_create.h"
#include "fallback/real_nccl.h"
#include "util/log.h"

struct split_job {
  struct shunt_comm* parent;
  int color, key, blocking;
  ncclComm_t* out;
  int real_ok;
};

static ncclResult_t run_split(void* arg) {
  struct split_job* j = arg;
  struct shunt_comm* p = j->parent;
  struct shunt_bootstrap* child = NULL;
  char err[512];
  if (shunt_bootstrap_split(p->boot, j->color, j->key, &child, err, sizeof(err)) != 0) {
    SHUNT_WARN("CommSplit: shunt's bootstrap split failed: %s", err);
    if (j->real_ok) return ncclSuccess; /* NCCL alone serves the child */
    return ncclSystemError;
  }
  if (!child) return ncclSuccess; /* NCCL_SPLIT_NOCOLOR: no child on this rank */
  ncclComm_t real = j->real_ok ? *j->out : NULL;
  struct shunt_comm* c = shunt_comm_create(child, real, p->cuda_dev, j->blocking, p->plans,
                                          p->plans ? shunt_planset_hash(p->plans) : 0,
                                          p->plans ? shunt_planset_usable(p->plans) : 0);
  if (!c) {
    shunt_bootstrap_destroy(child);
    return real ? ncclSuccess : ncclInternalError;
  }
  if (shunt_handles_add(c->handle, c, real == NULL) != 0) {
    shunt_comm_free(c, 1);
    return ncclSystemError;
  }
  *j->out = c->handle;
  return ncclSuccess;
}

SHUNT_EXPORT ncclResult_t pncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                                         ncclConfig_t* config) {
  struct shunt_comm* p = shunt_handles_find(comm);
  const struct shunt_real_nccl* real = shunt_real_nccl();
  if (!p) {
    if (!real || !real->ncclCommSplit) return shunt_unavailable("ncclCommSplit", real);
    return real->ncclCommSplit(comm, color, key, newcomm, config);
  }
  if (!newcomm) {
    SHUNT_WARN("CommSplit: newcomm argument is NULL");
    return ncclInvalidArgument;
  }
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR) {
    SHUNT_WARN("CommSplit: color %d is not valid", color);
    return ncclInvalidArgument;
  }
  *newcomm = NULL;
  struct split_job* j = calloc(1, sizeof(*j));
  if (!j) return ncclSystemError;
  *j = (struct split_job){p, color, key, p->blocking, newcomm, 0};
  j->blocking = shunt_config_blocking(config, p->blocking);
  if (p->real) {
    if (!real || !real->ncclCommSplit) {
      free(j);
      return shunt_unavailable("ncclCommSplit", real);
    }
    ncclResult_t rc = real->ncclCommSplit(p->real, color, key, newcomm, config);
    if (rc != ncclSuccess && rc != ncclInProgress) {
      shunt_note_real_failure();
      free(j);
      return rc;
    }
    j->real_ok = 1;
  }
  /* The parent's lane keeps the split ordered with the parent's queued collectives. */
  return shunt_group_enqueue(p, run_split, j, free);
}
SHUNT_ALIAS(ncclCommSplit, ncclResult_t,
            (ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config))

SHUNT_EXPORT ncclResult_t pncclCommFinalize(ncclComm_t comm) {
  struct shunt_comm* c = shunt_handles_find(comm);
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
    /* Nothing below waits on peers: they may be gone, or held by this very thread. */
    if (abort) shunt_bootstrap_abort(c->boot);
    shunt_launch_release(c);
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
