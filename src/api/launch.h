/* Running a plan-served call on the communicator's backend (exec/backend.h), and releasing the
 * backends.
 *
 * Promises: a backend's world is made at its first plan call and grown when a call needs more;
 * both are collective, and every rank reaches them at the same call because every rank selects
 * the same plans for the same calls. On the host backend a call completes before returning; on
 * the GPU backend it is enqueued on the call's stream. A backend failure becomes the
 * communicator's asynchronous error and is returned. */
#ifndef SHUNT_API_LAUNCH_H
#define SHUNT_API_LAUNCH_H

#include <nccl.h>
#include <stdbool.h>

#include "comm/comm.h"
#include "exec/split.h"

/* The one place a SHUNT code (util/status.h) becomes an ncclResult_t. A failure of the system
 * around shunt (a wait that ran out, memory, a system call, a peer gone, the network, an abort)
 * is ncclSystemError; a fault of shunt's own or of its use of the device (invalid, unfit, a CUDA
 * call) is ncclInternalError; SHUNT_OK is ncclSuccess. */
ncclResult_t shunt_nccl_result(int code);

/* Runs `call` on its plan, its shape `split` as the selection computed it (exec/split.h). */
ncclResult_t shunt_launch(struct shunt_comm* c, const struct shunt_call* call,
                          const struct shunt_split* split);

/* The communicator's backend of that kind, made on first use (NULL: out of memory). */
struct shunt_backend* shunt_launch_backend(struct shunt_comm* c, bool gpu, int device);

/* The asynchronous error, after asking the GPU backend whether a kernel failed since. */
ncclResult_t shunt_launch_poll(struct shunt_comm* c);

/* Makes every wait of this rank's host runs give up, and its GPU kernels' too when `gpu`
 * (teardown, from any thread). */
void shunt_launch_abort(struct shunt_comm* c, bool gpu);

/* Before shunt_comm_free: releases the backends without waiting on peers. */
void shunt_launch_release(struct shunt_comm* c);

#endif
