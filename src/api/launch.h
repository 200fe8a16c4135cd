/* Running a plan-served call on the communicator's backend, and releasing the backend.
 *
 * Promises: the backend's shared state (the host world) is made at the first plan call and
 * grown when a call needs more; both are collective, and every rank reaches them at the same
 * call because every rank selects the same plans for the same calls. On the host backend a
 * call completes before returning. A backend failure (a timed-out plan) becomes the
 * communicator's asynchronous error and is returned. */
#ifndef SHUNT_API_LAUNCH_H
#define SHUNT_API_LAUNCH_H

#include <nccl.h>

#include "comm/comm.h"

ncclResult_t shunt_launch(struct shunt_comm* c, const struct shunt_call* call);

/* Before shunt_comm_free: releases the backend without waiting on peers. */
void shunt_launch_release(struct shunt_comm* c);

#endif
