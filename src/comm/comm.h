/* shunt's state for one communicator: who it is, where its peers are, which plans it may
 * use, and the backend that runs them.
 *
 * Promises: made collectively by every rank (shunt_comm_create) after the bootstrap
 * rendezvous; every rank of a communicator ends with the same `plans_enabled` verdict
 * (plan-set hashes are compared across ranks). Destruction never waits on peers when
 * aborting. */
#ifndef SHUNT_COMM_COMM_H
#define SHUNT_COMM_COMM_H

#include <nccl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "plan/planset.h"

struct shunt_bootstrap;
struct shunt_redop_table;
struct shunt_backend;
struct shunt_tune;

/* Whether a communicator's device calls run on shunt's GPU executor (api/gpu_gate.h). */
enum shunt_gpu_verdict {
  SHUNT_GPU_UNDECIDED = 0, /* no device call yet (SHUNT_GPU=auto: the self-check has not run) */
  SHUNT_GPU_USE = 1,       /* the self-check passed on every rank, or SHUNT_GPU=on */
  SHUNT_GPU_NCCL = 2       /* SHUNT_GPU=off, or the self-check failed on some rank */
};

/* Where a communicator's shunt half stands (shunt_comm.state). */
enum shunt_comm_state {
  SHUNT_COMM_PENDING = 0, /* a nonblocking init is still joining the rendezvous */
  SHUNT_COMM_READY = 1,   /* usable */
  SHUNT_COMM_FAILED = 2   /* init failed with no NCCL communicator behind: init_error says why */
};

struct shunt_comm {
  ncclComm_t handle; /* what the application holds: `real`, or this struct when alone */
  ncclComm_t real;   /* NCCL's communicator, NULL when shunt stands alone */
  int rank, nranks, cuda_dev; /* cuda_dev -1: no CUDA device was current where it was made */
  int gpu_everywhere;           /* every rank has a CUDA device (the GPU self-check may run) */
  int node, nnodes, local_rank, local_size; /* topology from host identities */
  /* Ranks per node when every node holds that many consecutive ranks (node = rank / it), else
   * 0: the same value on every rank, so plan selection agrees everywhere. */
  int ranks_per_node;
  int blocking;
  struct shunt_bootstrap* boot;
  const struct shunt_planset* plans; /* shared, owned by the process-wide plan cache */
  int plans_enabled;
  /* The executor backends (exec/backend.h), each made at its first plan call; read by a
   * teardown in another thread to abort waits on them. */
  _Atomic(struct shunt_backend*) host;
  _Atomic(struct shunt_backend*) gpu;
  atomic_int gpu_verdict; /* enum shunt_gpu_verdict: whether device calls may run on shunt's GPU executor */
  /* Plans the GPU cannot run for this communicator (their blocks cannot all be resident): the
   * self-check's finding, set before the verdict, read-only after. */
  const struct shunt_plan** gpu_unfit;
  uint32_t n_gpu_unfit;
  struct shunt_redop_table* redops;
  atomic_int async_error; /* ncclResult_t of shunt's own asynchronous failures */
  atomic_int state;       /* enum shunt_comm_state */
  atomic_int init_error;  /* ncclResult_t of a failed init (state FAILED) */
  atomic_int busy;        /* nonblocking splits or shrinks of this communicator under way */
  atomic_int suspended;   /* ncclCommSuspend until ncclCommResume: no work is taken */
  atomic_int users;       /* references taken through the handle table (api/handles.h) */
  uint64_t serial;        /* unique in the process: tells a reused address from this state */
  /* A background job (nonblocking init of this communicator, or a nonblocking split or
   * shrink of it) and what abort needs to stop it; guarded by mu. */
  pthread_mutex_t mu;
  pthread_t worker;
  int worker_live; /* worker started and not joined */
  atomic_int job_running;
  atomic_int cancelled;
  _Atomic(const char*) last_plan; /* name of the plan that served the last call, NULL: NCCL */
  struct shunt_tune* tune;        /* in-job tuning (api/tune.h), NULL when off; set at creation */
};

/* What ncclCommGetAsyncError reports for shunt's half: ncclInProgress while a nonblocking
 * init, split or shrink runs, the init's error once it failed, else the last asynchronous
 * failure (ncclSuccess when none). */
static inline ncclResult_t shunt_comm_status(struct shunt_comm* c) {
  int st = atomic_load(&c->state);
  if (st == SHUNT_COMM_PENDING || atomic_load(&c->busy) > 0) return ncclInProgress;
  if (st == SHUNT_COMM_FAILED) return (ncclResult_t)atomic_load(&c->init_error);
  return (ncclResult_t)atomic_load(&c->async_error);
}

/* Two results of one call's halves as one: an error wins, then ncclInProgress. */
static inline ncclResult_t shunt_result_merge(ncclResult_t a, ncclResult_t b) {
  if (a != ncclSuccess && a != ncclInProgress) return a;
  if (b != ncclSuccess && b != ncclInProgress) return b;
  return (a == ncclInProgress || b == ncclInProgress) ? ncclInProgress : ncclSuccess;
}

/* One collective that a plan serves, as the API layer resolved it. */
struct shunt_call {
  enum shunt_coll coll;
  const struct shunt_plan_entry* entry;
  const void* send;
  void* recv;
  uint64_t in_bytes, out_bytes;
  enum shunt_dtype dtype;
  enum shunt_redop op;
  bool on_gpu; /* device buffers: the GPU backend runs it on `stream` */
  int device;  /* on_gpu: the buffers' CUDA device */
  unsigned char scalar[8]; /* PREMULSUM: the scalar in dtype, captured at enqueue time */
  const void* scalar_ptr;  /* PREMULSUM with a device-resident scalar: read when the plan runs */
  cudaStream_t stream;
  uint32_t root; /* broadcast: the root rank; its plan (entry) is the one renamed for it */
};

#endif
