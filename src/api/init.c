/* Communicator creation and teardown. The application's handle is NCCL's communicator
 * whenever NCCL can make one; shunt's state is built beside it over shunt's own bootstrap,
 * whose rendezvous rides in bytes 40-127 of the ncclUniqueId (NCCL reads bytes 0-39). */
#include <limits.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "api/config.h"
#include "api/export.h"
#include "api/group.h"
#include "api/handles.h"
#include "api/plans.h"
#include "api/unavailable.h"
#include "comm/bootstrap.h"
#include "comm/comm_create.h"
#include "fallback/real_nccl.h"
#include "util/env.h"
#include "util/log.h"

#define SHUNT_ID_OFFSET 40

_Static_assert(sizeof(struct shunt_bootstrap_id) <= NCCL_UNIQUE_ID_BYTES - SHUNT_ID_OFFSET,
               "shunt's rendezvous must fit in the bytes NCCL leaves unused");

static void id_get(const ncclUniqueId* id, struct shunt_bootstrap_id* bid) {
  memcpy(bid, id->internal + SHUNT_ID_OFFSET, sizeof(*bid));
}

static int fallback_enabled(void) { return shunt_env_bool("SHUNT_FALLBACK", 1); }

SHUNT_EXPORT ncclResult_t pncclGetUniqueId(ncclUniqueId* uniqueId) {
  if (!uniqueId) {
    SHUNT_WARN("GetUniqueId: uniqueId argument is NULL");
    return ncclInvalidArgument;
  }
  memset(uniqueId, 0, sizeof(*uniqueId));
  const struct shunt_real_nccl* real = shunt_real_nccl();
  if (real && real->ncclGetUniqueId) {
    ncclResult_t rc = real->ncclGetUniqueId(uniqueId);
    if (rc != ncclSuccess) {
      shunt_note_real_failure();
      return rc;
    }
    memset(uniqueId->internal + SHUNT_ID_OFFSET, 0, NCCL_UNIQUE_ID_BYTES - SHUNT_ID_OFFSET);
  } else if (getrandom(uniqueId->internal, SHUNT_ID_OFFSET, 0) != SHUNT_ID_OFFSET) {
    SHUNT_WARN("GetUniqueId: no random bytes for the id");
    return ncclSystemError;
  }
  /* shunt's root lives where NCCL's does: in the process that made the id. */
  struct shunt_bootstrap_id bid;
  char err[256];
  if (shunt_bootstrap_root_create(&bid, err, sizeof(err)) != 0) {
    SHUNT_WARN("GetUniqueId: shunt's bootstrap root could not start (%s); communicators made from this id go to "
               "NCCL alone",
               err);
    return real ? ncclSuccess : ncclSystemError;
  }
  memcpy(uniqueId->internal + SHUNT_ID_OFFSET, &bid, sizeof(bid));
  return ncclSuccess;
}
SHUNT_ALIAS(ncclGetUniqueId, ncclResult_t, (ncclUniqueId * uniqueId))

/* shunt's half of an init, run at once or at the outermost ncclGroupEnd. */
struct init_job {
  ncclComm_t* out;
  int nranks, rank, cuda_dev;
  ncclUniqueId id;
  int real_ok;   /* NCCL made its communicator (*out holds it once NCCL's group ended) */
  int blocking;
  char real_why[128];
};

static ncclResult_t run_init(void* arg) {
  struct init_job* j = arg;
  ncclComm_t real = j->real_ok ? *j->out : NULL;
  struct shunt_bootstrap_id bid;
  id_get(&j->id, &bid);
  if (!shunt_bootstrap_id_valid(&bid)) {
    if (real) {
      SHUNT_INFO(SHUNT_INIT, "CommInitRank: the id carries no shunt rendezvous: every call of this communicator goes "
                             "to NCCL");
      return ncclSuccess;
    }
    SHUNT_WARN("CommInitRank: the id carries no shunt rendezvous and NCCL made no communicator (%s)", j->real_why);
    return ncclInvalidArgument;
  }
  struct shunt_bootstrap* boot = NULL;
  char err[512];
  if (shunt_bootstrap_init(&bid, j->rank, j->nranks, &boot, err, sizeof(err)) != 0) {
    SHUNT_WARN("CommInitRank: rank %d of %d: shunt's bootstrap failed: %s", j->rank, j->nranks, err);
    if (real) {
      SHUNT_WARN("CommInitRank: plans are off for this communicator; NCCL serves every call");
      return ncclSuccess;
    }
    return ncclSystemError;
  }
  const struct shunt_planset* plans = shunt_plans();
  struct shunt_comm* c = shunt_comm_create(boot, real, j->cuda_dev, j->blocking, plans, plans ? shunt_planset_hash(plans) : 0,
                                          plans ? shunt_planset_usable(plans) : 0);
  if (!c) {
    shunt_bootstrap_destroy(boot);
    return real ? ncclSuccess : ncclInternalError;
  }
  if (!real) {
    SHUNT_INFO(SHUNT_INIT, "rank %d of %d: shunt's communicator stands alone (%s); calls no plan serves fail", c->rank,
               c->nranks, j->real_why);
  }
  if (shunt_handles_add(c->handle, c, real == NULL) != 0) {
    SHUNT_WARN("CommInitRank: out of memory recording the communicator");
    shunt_comm_free(c, 1);
    return ncclSystemError;
  }
  *j->out = c->handle;
  return ncclSuccess;
}

/* The whole of one rank's init: NCCL's half (inside NCCL's group when there is one), then
 * shunt's, queued in a group. */
static ncclResult_t init_rank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config,
                              int cuda_dev) {
  if (!comm) {
    SHUNT_WARN("CommInitRank: comm argument is NULL");
    return ncclInvalidArgument;
  }
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    SHUNT_WARN("CommInitRank: rank %d / nranks %d are not valid", rank, nranks);
    return ncclInvalidArgument;
  }
  *comm = NULL;
  struct init_job* j = calloc(1, sizeof(*j));
  if (!j) return ncclSystemError;
  *j = (struct init_job){comm, nranks, rank, cuda_dev, id, 0, shunt_config_blocking(config, 1), ""};
  const struct shunt_real_nccl* real = shunt_real_nccl();
  if (!fallback_enabled()) {
    snprintf(j->real_why, sizeof(j->real_why), "SHUNT_FALLBACK=0");
  } else if (!real || !real->ncclCommInitRankConfig) {
    snprintf(j->real_why, sizeof(j->real_why), "no real NCCL");
  } else {
    ncclResult_t rc = real->ncclCommInitRankConfig(comm, nranks, id, rank, config);
    if (rc == ncclSuccess || rc == ncclInProgress) {
      j->real_ok = 1;
    } else {
      snprintf(j->real_why, sizeof(j->real_why), "NCCL could not make one: %s",
               real->ncclGetErrorString ? real->ncclGetErrorString(rc) : "error");
      *comm = NULL;
    }
  }
  return shunt_group_enqueue(NULL, run_init, j, free);
}

SHUNT_EXPORT ncclResult_t pncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                                  ncclConfig_t* config) {
  return init_rank(comm, nranks, commId, rank, config, 0);
}
SHUNT_ALIAS(ncclCommInitRankConfig, ncclResult_t,
            (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config))

SHUNT_EXPORT ncclResult_t pncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  return init_rank(comm, nranks, commId, rank, NULL, 0);
}
SHUNT_ALIAS(ncclCommInitRank, ncclResult_t, (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank))

SHUNT_EXPORT ncclResult_t pncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  if (!comms || ndev < 1) {
    SHUNT_WARN("CommInitAll: %s", !comms ? "comm argument is NULL" : "ndev must be at least 1");
    return ncclInvalidArgument;
  }
  ncclUniqueId id;
  ncclResult_t rc = pncclGetUniqueId(&id);
  if (rc != ncclSuccess) return rc;
  /* Every rank lives in this thread: its inits run side by side at the group's end. */
  shunt_group_begin();
  const struct shunt_real_nccl* real = shunt_real_nccl();
  if (real && real->ncclGroupStart) real->ncclGroupStart();
  for (int i = 0; i < ndev && rc == ncclSuccess; i++) rc = init_rank(&comms[i], ndev, id, i, NULL, devlist ? devlist[i] : i);
  ncclResult_t rrc = (real && real->ncclGroupEnd) ? real->ncclGroupEnd() : ncclSuccess;
  ncclResult_t grc = shunt_group_finish();
  return rc != ncclSuccess ? rc : (grc != ncclSuccess ? grc : rrc);
}
SHUNT_ALIAS(ncclCommInitAll, ncclResult_t, (ncclComm_t * comms, int ndev, const int* devlist))
