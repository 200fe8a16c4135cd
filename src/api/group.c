/* The per-thread group queue; see group.h. */
#include "api/group.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "transport/cuda_driver.h"
#include "util/log.h"

struct job {
  const void* lane;
  shunt_job_fn fn;
  void* arg;
  void (*free_arg)(void*);
};

/* Thread-local: a group belongs to the thread that opened it (NCCL's rule). */
static _Thread_local int depth;
static _Thread_local struct job* queue;
static _Thread_local size_t nqueue, capqueue;
/* Jobs without a communicator get a lane of their own, keyed by an address no communicator
 * can have: one byte past each other inside this thread-local block. */
static _Thread_local char own_lanes[1];

int shunt_group_depth(void) { return depth; }

void shunt_group_begin(void) { depth++; }

ncclResult_t shunt_group_enqueue(const void* lane, shunt_job_fn fn, void* arg, void (*free_arg)(void*)) {
  if (depth == 0) {
    ncclResult_t rc = fn(arg);
    if (free_arg) free_arg(arg);
    return rc;
  }
  if (nqueue == capqueue) {
    size_t ncap = capqueue ? capqueue * 2 : 16;
    struct job* nq = realloc(queue, ncap * sizeof(*nq));
    if (!nq) {
      if (free_arg) free_arg(arg);
      SHUNT_WARN("group: out of memory queueing a call");
      return ncclSystemError;
    }
    queue = nq;
    capqueue = ncap;
  }
  const void* key = lane ? lane : (const void*)((uintptr_t)own_lanes + nqueue);
  queue[nqueue++] = (struct job){key, fn, arg, free_arg};
  return ncclSuccess;
}

struct lane_run {
  struct job* jobs;
  size_t njobs;
  const void* lane;
  ncclResult_t rc;
  pthread_t thread;
  int started;
  int in_progress;
  void* ctx; /* the CUDA context current where the group ended, made current in the lane */
};

static void* run_lane(void* p) {
  struct lane_run* l = p;
  l->rc = ncclSuccess;
  /* A lane's thread calls the driver as the thread that ended the group would. */
  if (l->ctx && shunt_driver_ctx_current() != l->ctx) shunt_driver_ctx_set(l->ctx);
  for (size_t i = 0; i < l->njobs; i++) {
    if (l->jobs[i].lane != l->lane) continue;
    ncclResult_t rc = l->jobs[i].fn(l->jobs[i].arg);
    /* Work handed to a nonblocking communicator's own thread goes on in the background. */
    if (rc == ncclInProgress) {
      l->in_progress = 1;
      continue;
    }
    /* After a failure the lane's later work is skipped: it would wait on a broken state. */
    if (rc != ncclSuccess) {
      l->rc = rc;
      break;
    }
  }
  return NULL;
}

ncclResult_t shunt_group_finish(void) {
  if (depth <= 0) {
    SHUNT_WARN("ncclGroupEnd: not in a group");
    return ncclInvalidUsage;
  }
  if (--depth > 0) return ncclSuccess;
  struct job* jobs = queue;
  size_t n = nqueue;
  queue = NULL;
  nqueue = capqueue = 0;
  if (n == 0) {
    free(jobs);
    return ncclSuccess;
  }
  /* Lanes in order of first appearance. */
  struct lane_run* lanes = calloc(n, sizeof(*lanes));
  size_t nl = 0;
  ncclResult_t rc = ncclSuccess;
  if (!lanes) {
    SHUNT_WARN("group: out of memory running the group");
    rc = ncclSystemError;
  } else {
    void* ctx = shunt_driver_ctx_current();
    for (size_t i = 0; i < n; i++) {
      size_t k = 0;
      while (k < nl && lanes[k].lane != jobs[i].lane) k++;
      if (k == nl) lanes[nl++] = (struct lane_run){jobs, n, jobs[i].lane, ncclSuccess, 0, 0, 0, ctx};
    }
    if (nl == 1) {
      run_lane(&lanes[0]);
    } else {
      for (size_t k = 0; k < nl; k++)
        lanes[k].started = pthread_create(&lanes[k].thread, NULL, run_lane, &lanes[k]) == 0;
      for (size_t k = 0; k < nl; k++) {
        if (lanes[k].started) {
          pthread_join(lanes[k].thread, NULL);
        } else {
          SHUNT_WARN("group: cannot start a thread for a communicator's work");
          lanes[k].rc = ncclSystemError;
        }
      }
    }
    int in_progress = 0;
    for (size_t k = 0; k < nl; k++) {
      if (lanes[k].rc != ncclSuccess && rc == ncclSuccess) rc = lanes[k].rc;
      in_progress |= lanes[k].in_progress;
    }
    if (rc == ncclSuccess && in_progress) rc = ncclInProgress;
  }
  for (size_t i = 0; i < n; i++)
    if (jobs[i].free_arg) jobs[i].free_arg(jobs[i].arg);
  free(lanes);
  free(jobs);
  return rc;
}
