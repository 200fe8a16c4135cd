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
#include "api/launch.h"
#include "api/tune.h"
#include "api/plans.h"
#include "api/unavailable.h"
#include "comm/bootstrap.h"
#include "comm/comm_create.h"
#include "exec/backend.h"
#include "api/gpu_gate.h"
#include "fallback/real_nccl.h"
#include "util/env.h"
#include "util/log.h"
#include "util/status.h"

#define SHUNT_ID_OFFSET 40

_Static_assert(sizeof(struct shunt_bootstrap_id) <= NCCL_UNIQUE_ID_BYTES - SHUNT_ID_OFFSET,
               "shunt's rendezvous must fit in the bytes NCCL leaves unused");

static void id_get(const ncclUniqueId* id, struct shunt_bootstrap_id* bid) {
  memcpy(bid, id->internal + SHUNT_ID_OFFSET, sizeof(*bid));
}

static int fallback_enabled(void) {
  return shunt_env_bool("SHUNT_FALLBACK", 1);
}

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
    SHUNT_WARN(
        "GetUniqueId: shunt's bootstrap root could not start (%s); communicators made from this id go to "
        "NCCL alone",
        err);
    return real ? ncclSuccess : ncclSystemError;
  }
  memcpy(uniqueId->internal + SHUNT_ID_OFFSET, &bid, sizeof(bid));
  return ncclSuccess;
}
SHUNT_ALIAS(ncclGetUniqueId, ncclResult_t, (ncclUniqueId * uniqueId))

/* One rank's init. NCCL's half runs in the calling thread (inside NCCL's group when there is
 * one); shunt's half joins the rendezvous: at once, at the outermost ncclGroupEnd, or, for a
 * nonblocking communicator, in a thread of its own. */
struct init_job {
  ncclComm_t* out;
  int nranks, rank, cuda_dev;
  ncclUniqueId id;
  int real_ok; /* NCCL made its communicator (*out holds it once NCCL's group ended) */
  int blocking;
  char real_why[128];
  struct shunt_comm* c; /* nonblocking: the state, already under the handle */
};

/* shunt's half on c: the rendezvous and the setup. Returns what the init reports; with an
 * NCCL communicator behind, a failure only turns plans off. */
static ncclResult_t join_rendezvous(struct init_job* j, struct shunt_comm* c) {
  struct shunt_bootstrap_id bid;
  id_get(&j->id, &bid);
  if (!shunt_bootstrap_id_valid(&bid)) {
    if (c->real) {
      SHUNT_INFO(SHUNT_INIT,
                 "CommInitRank: the id carries no shunt rendezvous: every call of this communicator goes "
                 "to NCCL");
      return ncclSuccess;
    }
    SHUNT_WARN("CommInitRank: the id carries no shunt rendezvous and NCCL made no communicator (%s)",
               j->real_why);
    return ncclInvalidArgument;
  }
  struct shunt_bootstrap* boot = NULL;
  char err[512];
  int rc = shunt_bootstrap_init_start(&bid, j->rank, j->nranks, &boot, err, sizeof(err));
  if (rc == SHUNT_OK && shunt_comm_adopt_boot(c, boot) != 0) {
    snprintf(err, sizeof(err), "the communicator was aborted");
    rc = SHUNT_E_ABORTED;
  } else if (rc == SHUNT_OK) {
    rc = shunt_bootstrap_init_finish(boot, err, sizeof(err));
  }
  if (rc == SHUNT_OK) {
    const struct shunt_planset* plans = shunt_plans_for((uint32_t)j->nranks);
    rc = shunt_comm_setup(c, plans, plans ? shunt_planset_hash(plans) : 0,
                          plans ? shunt_planset_usable(plans) : 0);
    if (rc != SHUNT_OK) snprintf(err, sizeof(err), "exchanging rank information failed");
  }
  if (rc != SHUNT_OK) {
    SHUNT_WARN("CommInitRank: rank %d of %d: shunt's bootstrap failed: %s", j->rank, j->nranks, err);
    c->plans_enabled = 0;
    if (c->real) {
      SHUNT_WARN("CommInitRank: plans are off for this communicator; NCCL serves every call");
      return ncclSuccess;
    }
    return shunt_nccl_result(rc);
  }
  if (!c->real)
    SHUNT_INFO(SHUNT_INIT, "rank %d of %d: shunt's communicator stands alone (%s); calls no plan serves fail",
               c->rank, c->nranks, j->real_why);
  shunt_gpu_gate_init(c);
  shunt_tune_init(c);
  return ncclSuccess;
}

/* Blocking: shunt's half now (or at the group's end); the handle is recorded once it is done. */
static ncclResult_t run_init(void* arg) {
  struct init_job* j = arg;
  ncclComm_t real = j->real_ok ? *j->out : NULL;
  struct shunt_comm* c = shunt_comm_alloc(j->rank, j->nranks, real, j->cuda_dev, j->blocking);
  if (!c) return real ? ncclSuccess : ncclSystemError;
  ncclResult_t rc = join_rendezvous(j, c);
  if (rc != ncclSuccess) {
    shunt_comm_free(c, 1);
    return rc;
  }
  atomic_store(&c->state, SHUNT_COMM_READY);
  if (shunt_handles_add(c->handle, c, real == NULL) != 0) {
    SHUNT_WARN("CommInitRank: out of memory recording the communicator");
    shunt_tune_fini(c, true);
    shunt_comm_free(c, 1);
    return real ? ncclSuccess : ncclSystemError;
  }
  *j->out = c->handle;
  return ncclSuccess;
}

/* Nonblocking: the state is under the handle already; this thread makes it ready or failed. */
static void* init_worker(void* arg) {
  struct init_job* j = arg;
  struct shunt_comm* c = j->c;
  ncclResult_t rc = join_rendezvous(j, c);
  if (rc != ncclSuccess) atomic_store(&c->init_error, (int)rc);
  atomic_store(&c->state, rc == ncclSuccess ? SHUNT_COMM_READY : SHUNT_COMM_FAILED);
  free(j);
  shunt_comm_job_done(c);
  return NULL;
}

/* Starts the worker on a copy of the job: the group frees its own copy whenever it likes. */
static ncclResult_t start_init(void* arg) {
  struct init_job* j = arg;
  struct shunt_comm* c = j->c;
  struct init_job* w = malloc(sizeof(*w));
  if (w) *w = *j;
  if (!w || shunt_comm_start_job(c, init_worker, w) != 0) {
    free(w);
    return ncclSystemError; /* end_init_job settles the state */
  }
  j->c = NULL;
  return ncclInProgress;
}

/* Frees a nonblocking job; one that never started (its group failed first, or no thread)
 * leaves its communicator failed, or plans off when NCCL's stands behind it. */
static void end_init_job(void* arg) {
  struct init_job* j = arg;
  if (j->c) {
    SHUNT_WARN("CommInitRank: rank %d of %d: shunt's rendezvous never started", j->rank, j->nranks);
    atomic_store(&j->c->init_error, (int)ncclSystemError);
    atomic_store(&j->c->state, j->c->real ? SHUNT_COMM_READY : SHUNT_COMM_FAILED);
  }
  free(j);
}

/* The nonblocking path: NCCL wrote its handle at once; shunt's state goes under it now so that
 * ncclCommGetAsyncError can answer while the rendezvous runs. */
static ncclResult_t init_nonblocking(struct init_job* j) {
  ncclComm_t real = j->real_ok ? *j->out : NULL;
  struct shunt_comm* c = shunt_comm_alloc(j->rank, j->nranks, real, j->cuda_dev, 0);
  if (!c || shunt_handles_add(c->handle, c, real == NULL) != 0) {
    SHUNT_WARN("CommInitRank: out of memory recording the communicator");
    if (c) shunt_comm_free(c, 1);
    if (!real) *j->out = NULL;
    free(j);
    return real ? ncclInProgress : ncclSystemError;
  }
  *j->out = c->handle;
  j->c = c;
  /* Inside a group the rendezvous starts at the outermost ncclGroupEnd, as NCCL's does. */
  if (shunt_group_depth() > 0) return shunt_group_enqueue(NULL, start_init, j, end_init_job);
  ncclResult_t rc = start_init(j);
  end_init_job(j);
  return rc == ncclInProgress || real ? ncclInProgress : rc;
}

/* The whole of one rank's init. NCCL's half takes the id, or all nid ids when ids is given
 * (ncclCommInitRankScalable); shunt's rendezvous is the one in `id`. */
static ncclResult_t init_rank_ids(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank,
                                  ncclConfig_t* config, int cuda_dev, int nid, ncclUniqueId* ids) {
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
  *j = (struct init_job){comm, nranks, rank, cuda_dev, id, 0, shunt_config_blocking(config, 1), "", NULL};
  const struct shunt_real_nccl* real = shunt_real_nccl();
  if (!fallback_enabled()) {
    snprintf(j->real_why, sizeof(j->real_why), "SHUNT_FALLBACK=0");
  } else if (!real || !(ids ? (void*)real->ncclCommInitRankScalable : (void*)real->ncclCommInitRankConfig)) {
    snprintf(j->real_why, sizeof(j->real_why), "no real NCCL");
  } else {
    ncclResult_t rc = ids ? real->ncclCommInitRankScalable(comm, nranks, rank, nid, ids, config)
                          : real->ncclCommInitRankConfig(comm, nranks, id, rank, config);
    if (rc == ncclSuccess || rc == ncclInProgress) {
      j->real_ok = 1;
    } else {
      snprintf(j->real_why, sizeof(j->real_why), "NCCL could not make one: %s",
               real->ncclGetErrorString ? real->ncclGetErrorString(rc) : "error");
      *comm = NULL;
    }
  }
  if (!j->blocking) return init_nonblocking(j);
  return shunt_group_enqueue(NULL, run_init, j, free);
}

static ncclResult_t init_rank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config,
                              int cuda_dev) {
  return init_rank_ids(comm, nranks, id, rank, config, cuda_dev, 0, NULL);
}

/* Several ids spread the load of NCCL's bootstrap at scale; shunt's rendezvous is the first id's
 * (every rank holds all of them, in the same order). The roots that making the other ids
 * started go unused and end at their timeout. */
SHUNT_EXPORT ncclResult_t pncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId,
                                                    ncclUniqueId* commIds, ncclConfig_t* config) {
  if (nId < 1 || !commIds) {
    SHUNT_WARN("CommInitRankScalable: %s", !commIds ? "commIds argument is NULL" : "nId must be at least 1");
    return ncclInvalidArgument;
  }
  return init_rank_ids(newcomm, nranks, commIds[0], myrank, config, shunt_gpu_current_device(), nId, commIds);
}
SHUNT_ALIAS(ncclCommInitRankScalable, ncclResult_t,
            (ncclComm_t * newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds,
             ncclConfig_t* config))

SHUNT_EXPORT ncclResult_t pncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                                  ncclConfig_t* config) {
  return init_rank(comm, nranks, commId, rank, config, shunt_gpu_current_device());
}
SHUNT_ALIAS(ncclCommInitRankConfig, ncclResult_t,
            (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config))

SHUNT_EXPORT ncclResult_t pncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  return init_rank(comm, nranks, commId, rank, NULL, shunt_gpu_current_device());
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
  for (int i = 0; i < ndev && rc == ncclSuccess; i++)
    rc = init_rank(&comms[i], ndev, id, i, NULL, devlist ? devlist[i] : i);
  ncclResult_t rrc = (real && real->ncclGroupEnd) ? real->ncclGroupEnd() : ncclSuccess;
  ncclResult_t grc = shunt_group_finish();
  return rc != ncclSuccess ? rc : shunt_result_merge(grc, rrc);
}
SHUNT_ALIAS(ncclCommInitAll, ncclResult_t, (ncclComm_t * comms, int ndev, const int* devlist))
