/* Which calls on device memory run on shunt's GPU executor.
 *
 * SHUNT_GPU=auto|on|off (default auto):
 * - off: every call on device memory goes to NCCL.
 * - auto: a communicator uses the GPU executor only once its self-check passed on every rank
 *   (exec/backend.h: shunt_gpu_selfcheck), run when the communicator is made (collective) and
 *   only where every rank has a CUDA device and a plan could serve it; on a failure every rank
 *   sends the communicator's device calls to NCCL, with one WARN naming the plan, rank, size
 *   and what went wrong.
 * - on: no self-check.
 * Whatever the setting, with SHUNT_GPU_ACROSS_HOSTS=off (default on) a communicator whose ranks
 * span hosts sends its device calls to NCCL (no self-check is run).
 * Calls on host memory run on the host backend whatever the setting; a call mixing host and
 * device buffers, or buffers of another device than the communicator's, goes to NCCL. */
#ifndef SHUNT_API_GPU_GATE_H
#define SHUNT_API_GPU_GATE_H

#include "comm/comm.h"

/* At creation, on every rank of c (collective under auto): settles c->gpu_verdict. */
void shunt_gpu_gate_init(struct shunt_comm* c);

/* For one call: NULL when a backend can take its buffers (call->on_gpu and call->device are
 * set), else why it goes to NCCL. */
const char* shunt_gpu_gate_call(struct shunt_comm* c, struct shunt_call* call, uint64_t in_bytes,
                                uint64_t out_bytes);

/* After selection: NULL when the GPU backend can run `plan` for this call (or the call is on
 * host memory), else why it goes to NCCL. */
const char* shunt_gpu_gate_plan(const struct shunt_comm* c, const struct shunt_call* call,
                                const struct shunt_plan* plan);

#endif
