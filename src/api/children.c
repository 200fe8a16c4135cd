/* Communicators made from others: ncclCommSplit and ncclCommShrink. NCCL makes its child
 * (the handle the application gets); shunt's child comes from the parent's bootstrap beside
 * it. Blocking: both halves finish before the call (or the outermost ncclGroupEnd) returns.
 * Nonblocking parent: shunt's half runs in the parent's worker thread, the parent reports
 * ncclInProgress meanwhile, and *newcomm is written once NCCL's child and shunt's state for it
 * both exist (NCCL itself writes *newcomm only when its child is ready). */
#include <nccl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/gpu_gate.h"
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
#include "fallback/real_nccl.h"
#include "util/log.h"
#include "util/status.h"

#define REAL_CHILD_GRACE_MS 2000 /* NCCL finished the parent's job: its child pointer is due */

struct child_job {
  const char* fn; /* "CommSplit" or "CommShrink" */
  struct shunt_comm* parent;
  int shrink;
  int color, key; /* split */
  int* exclude;   /* shrink: sorted copy */
  int nexclude;
  int expect_child; /* this rank belongs to a child */
  int child_blocking;
  ncclComm_t* out;       /* the application's */
  ncclComm_t real_child; /* NCCL writes its child here, possibly from its own thread */
  int real_ok;           /* NCCL accepted the call */
};

static void free_job(void* arg) {
  struct child_job* j = arg;
  free(j->exclude);
  free(j);
}

static void publish(struct child_job* j, ncclComm_t h) {
  __atomic_store_n(j->out, h, __ATOMIC_RELEASE);
}

static ncclResult_t shunt_half(struct child_job* j, struct shunt_bootstrap** child) {
  char err[512];
  struct shunt_bootstrap* b = j->parent->boot;
  int rc = j->shrink ? shunt_bootstrap_shrink(b, j->exclude, j->nexclude, child, err, sizeof(err))
                     : shunt_bootstrap_split(b, j->color, j->key, child, err, sizeof(err));
  if (rc == 0) return ncclSuccess;
  SHUNT_WARN("%s: shunt's bootstrap failed: %s%s", j->fn, err,
             j->real_ok ? "; NCCL alone serves the child" : "");
  return shunt_nccl_result(rc);
}

/* Records shunt's state for the child beside NCCL's (either may be missing) and publishes the
 * handle. */
static ncclResult_t finish(struct child_job* j, struct shunt_bootstrap* boot, ncclComm_t real) {
  struct shunt_comm* p = j->parent;
  struct shunt_comm* c = NULL;
  if (boot) {
    /* The child's own size picks its plans: a split's child is smaller than its parent. */
    const struct shunt_planset* plans = shunt_plans_for((uint32_t)shunt_bootstrap_nranks(boot));
    c = shunt_comm_create(boot, real, p->cuda_dev, j->child_blocking, plans,
                          plans ? shunt_planset_hash(plans) : 0, plans ? shunt_planset_usable(plans) : 0);
    if (c) shunt_gpu_gate_init(c);
    if (c) shunt_tune_init(c);
    if (c && shunt_handles_add(c->handle, c, real == NULL) != 0) {
      SHUNT_WARN("%s: out of memory recording the communicator", j->fn);
      shunt_tune_fini(c, true);
      shunt_comm_free(c, 1);
      c = NULL;
    }
  }
  publish(j, c ? c->handle : real);
  if (!c && !real && j->expect_child) return ncclSystemError;
  return ncclSuccess;
}

/* Blocking: NCCL's child exists (or never will) by the time this runs. */
static ncclResult_t run_child(void* arg) {
  struct child_job* j = arg;
  struct shunt_bootstrap* boot = NULL;
  ncclResult_t rc = shunt_half(j, &boot);
  ncclComm_t real = j->real_ok ? j->real_child : NULL;
  if (rc != ncclSuccess && !real) {
    publish(j, NULL);
    return rc;
  }
  return finish(j, boot, real);
}

static void sleep_ms(int ms) {
  struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

/* Nonblocking: waits for NCCL's child pointer, or for NCCL to report the parent's job over
 * without one. Returns 0, or SHUNT_E_ABORTED when the parent was aborted before NCCL was done
 * (NCCL may still write into the job, which must then be left alone). */
static int await_real(struct child_job* j, ncclComm_t* out) {
  *out = NULL;
  if (!j->real_ok) return 0;
  const struct shunt_real_nccl* real = shunt_real_nccl();
  int grace = 0;
  for (;;) {
    ncclComm_t h = __atomic_load_n(&j->real_child, __ATOMIC_ACQUIRE);
    if (h) {
      *out = h;
      return 0;
    }
    if (shunt_comm_cancelled(j->parent)) return SHUNT_E_ABORTED;
    ncclResult_t st = ncclSuccess;
    if (!real || !real->ncclCommGetAsyncError ||
        real->ncclCommGetAsyncError(j->parent->real, &st) != ncclSuccess ||
        (st != ncclInProgress && st != ncclSuccess))
      return 0; /* NCCL failed the job: it made no child */
    if (st == ncclSuccess && (!j->expect_child || (grace += 1) > REAL_CHILD_GRACE_MS)) return 0;
    sleep_ms(1);
  }
}

static void* child_worker(void* arg) {
  struct child_job* j = arg;
  struct shunt_comm* p = j->parent;
  struct shunt_bootstrap* boot = NULL;
  ncclResult_t rc = shunt_half(j, &boot);
  ncclComm_t real = NULL;
  int leave = await_real(j, &real) != 0;
  if (rc == ncclSuccess || real)
    rc = finish(j, boot, real);
  else
    publish(j, NULL);
  /* NCCL reports a failed split through the parent; so does shunt when nothing was made. */
  if (rc != ncclSuccess) atomic_store(&p->async_error, (int)rc);
  if (!leave) free_job(j);
  atomic_fetch_sub(&p->busy, 1);
  shunt_comm_job_done(p);
  return NULL;
}

/* Common to split and shrink once NCCL's half was issued: run shunt's now, at the group's end,
 * or in the parent's worker. */
static ncclResult_t dispatch(struct child_job* j, ncclResult_t real_rc) {
  struct shunt_comm* p = j->parent;
  if (p->blocking) return shunt_result_merge(shunt_group_enqueue(p, run_child, j, free_job), real_rc);
  atomic_fetch_add(&p->busy, 1);
  if (shunt_comm_start_job(p, child_worker, j) != 0) {
    atomic_fetch_sub(&p->busy, 1);
    /* NCCL may write into the job later: it is left alone. */
    return j->real_ok ? ncclInProgress : ncclSystemError;
  }
  return ncclInProgress;
}

/* NCCL's half: its child goes into j->real_child. */
static ncclResult_t real_half(struct child_job* j, ncclResult_t rc) {
  if (rc != ncclSuccess && rc != ncclInProgress) {
    shunt_note_real_failure();
    return rc;
  }
  j->real_ok = 1;
  return rc;
}

static struct child_job* new_job(const char* fn, struct shunt_comm* p, ncclComm_t* newcomm,
                                 ncclConfig_t* config) {
  struct child_job* j = calloc(1, sizeof(*j));
  if (!j) {
    SHUNT_WARN("%s: out of memory", fn);
    return NULL;
  }
  j->fn = fn;
  j->parent = p;
  j->out = newcomm;
  j->child_blocking = shunt_config_blocking(config, p->blocking);
  return j;
}

SHUNT_EXPORT ncclResult_t pncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                                         ncclConfig_t* config) {
  SHUNT_COMM_REF p = shunt_handles_get(comm);
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
  ncclResult_t rc = shunt_handles_ready("CommSplit", p);
  if (rc != ncclSuccess) return rc;
  *newcomm = NULL;
  struct child_job* j = new_job("CommSplit", p, newcomm, config);
  if (!j) return ncclSystemError;
  j->color = color;
  j->key = key;
  j->expect_child = color != NCCL_SPLIT_NOCOLOR;
  rc = ncclSuccess;
  if (p->real) {
    if (!real || !real->ncclCommSplit) {
      free_job(j);
      return shunt_unavailable("ncclCommSplit", real);
    }
    rc = real_half(j, real->ncclCommSplit(p->real, color, key, &j->real_child, config));
    if (!j->real_ok) {
      free_job(j);
      return rc;
    }
  }
  return dispatch(j, rc);
}
SHUNT_ALIAS(ncclCommSplit, ncclResult_t,
            (ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config))

static int by_value(const void* a, const void* b) {
  int x = *(const int*)a, y = *(const int*)b;
  return (x > y) - (x < y);
}

SHUNT_EXPORT ncclResult_t pncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                                          ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) {
  SHUNT_COMM_REF p = shunt_handles_get(comm);
  const struct shunt_real_nccl* real = shunt_real_nccl();
  if (!p) {
    if (!real || !real->ncclCommShrink) return shunt_unavailable("ncclCommShrink", real);
    return real->ncclCommShrink(comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags);
  }
  if (!newcomm || excludeRanksCount < 0 || (excludeRanksCount > 0 && !excludeRanksList)) {
    SHUNT_WARN("CommShrink: %s", !newcomm ? "newcomm argument is NULL" : "the exclusion list is not valid");
    return ncclInvalidArgument;
  }
  for (int i = 0; i < excludeRanksCount; i++) {
    if (excludeRanksList[i] < 0 || excludeRanksList[i] >= p->nranks) {
      SHUNT_WARN("CommShrink: excluded rank %d is not a rank of %d", excludeRanksList[i], p->nranks);
      return ncclInvalidArgument;
    }
    if (excludeRanksList[i] == p->rank) {
      SHUNT_WARN("CommShrink: rank %d is in its own exclusion list", p->rank);
      return ncclInvalidArgument;
    }
  }
  ncclResult_t rc = shunt_handles_ready("CommShrink", p);
  if (rc != ncclSuccess) return rc;
  /* NCCL sorts the caller's list in place; so does shunt, so that both halves see one order. */
  if (excludeRanksCount > 1) qsort(excludeRanksList, (size_t)excludeRanksCount, sizeof(int), by_value);
  *newcomm = NULL;
  struct child_job* j = new_job("CommShrink", p, newcomm, config);
  if (!j) return ncclSystemError;
  j->shrink = 1;
  j->expect_child = 1;
  j->nexclude = excludeRanksCount;
  j->exclude = malloc((size_t)(excludeRanksCount ? excludeRanksCount : 1) * sizeof(int));
  if (!j->exclude) {
    free_job(j);
    return ncclSystemError;
  }
  if (excludeRanksCount) memcpy(j->exclude, excludeRanksList, (size_t)excludeRanksCount * sizeof(int));
  rc = ncclSuccess;
  if (p->real) {
    if (!real || !real->ncclCommShrink) {
      free_job(j);
      return shunt_unavailable("ncclCommShrink", real);
    }
    rc = real_half(j, real->ncclCommShrink(p->real, excludeRanksList, excludeRanksCount, &j->real_child,
                                           config, shrinkFlags));
    if (!j->real_ok) {
      free_job(j);
      return rc;
    }
  }
  return dispatch(j, rc);
}
SHUNT_ALIAS(ncclCommShrink, ncclResult_t,
            (ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm,
             ncclConfig_t* config, int shrinkFlags))
