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
#include <stdatomic.h>
#include <stdint.h>

#include "plan/planset.h"

struct shunt_bootstrap;
struct shunt_redop_table;
struct shunt_world;
struct shunt_lower_cache;

struct shunt_comm {
  ncclComm_t handle; /* what the application holds: `real`, or this struct when alone */
  ncclComm_t real;   /* NCCL's communicator, NULL when shunt stands alone */
  int rank, nranks, cuda_dev;
  int node, nnodes, local_rank, local_size; /* topology from host identities */
  int blocking;
  struct shunt_bootstrap* boot;
  const struct shunt_planset* plans; /* shared, owned by the process-wide plan cache */
  int plans_enabled;
  struct shunt_world* world;       /* the host backend's shared regions; NULL until a plan runs */
  struct shunt_lower_cache* programs; /* lowered plans of this communicator */
  struct shunt_redop_table* redops;
  atomic_int async_error; /* ncclResult_t of shunt's own asynchronous failures */
  _Atomic(const char*) last_plan; /* name of the plan that served the last call, NULL: NCCL */
};

/* One collective that a plan serves, as the API layer resolved it. */
struct shunt_call {
  enum shunt_coll coll;
  const struct shunt_plan_entry* entry;
  const void* send;
  void* recv;
  uint64_t in_bytes, out_bytes;
  enum shunt_dtype dtype;
  enum shunt_redop op;
  unsigned char scalar[8]; /* PREMULSUM: the scalar in dtype, captured at enqueue time */
  const void* scalar_ptr;  /* PREMULSUM with a device-resident scalar: read when the plan runs */
  cudaStream_t stream;
};


#endif
