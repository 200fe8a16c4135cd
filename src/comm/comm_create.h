/* Making and unmaking shunt's communicator state. */
#ifndef SHUNT_COMM_COMM_CREATE_H
#define SHUNT_COMM_COMM_CREATE_H

#include "comm/comm.h"

struct shunt_bootstrap;

/* A communicator's state before its rendezvous: rank and size as the caller gave them,
 * plans off, state PENDING. The handle is `real`, or the struct itself when real is NULL.
 * Returns NULL with a WARN when out of memory. */
struct shunt_comm* shunt_comm_alloc(int rank, int nranks, ncclComm_t real, int cuda_dev, int blocking);

/* Hands boot to c (c owns it from here on, whatever the result). Returns -1 when c was
 * cancelled meanwhile: boot is then aborted at once, so nothing waits on it. */
int shunt_comm_adopt_boot(struct shunt_comm* c, struct shunt_bootstrap* boot);

/* Collective over c->boot's ranks: topology (node of every rank from host identities) and the
 * plan-set agreement (a mismatch disables plans on every rank, loudly). Sets rank and size
 * from the bootstrap. Returns 0, or a SHUNT_E_* code (util/status.h) with a WARN. Does not
 * change the state. */
int shunt_comm_setup(struct shunt_comm* c, const struct shunt_planset* plans, uint64_t plans_hash,
                     uint32_t plans_usable);

/* shunt_comm_alloc + adopt + setup for a bootstrap that is already complete (a split child);
 * state READY. On failure returns NULL and boot is destroyed. */
struct shunt_comm* shunt_comm_create(struct shunt_bootstrap* boot, ncclComm_t real, int cuda_dev, int blocking,
                                     const struct shunt_planset* plans, uint64_t plans_hash, uint32_t plans_usable);

/* Starts fn(arg) as c's background job. A job still running from before is waited for
 * first (NCCL's rule is one operation of a nonblocking communicator at a time). Returns 0, or
 * -1 when no thread could be started (fn did not run). fn must call shunt_comm_job_done(c)
 * as its last touch of c. */
int shunt_comm_start_job(struct shunt_comm* c, void* (*fn)(void*), void* arg);
void shunt_comm_job_done(struct shunt_comm* c);
/* Whether c's job was told to stop (by shunt_comm_stop_job). */
int shunt_comm_cancelled(struct shunt_comm* c);

/* Stops c's background job, if one is still running, and waits for it: marks c cancelled and
 * aborts its bootstrap, so a rendezvous or exchange in progress fails at once. */
void shunt_comm_stop_job(struct shunt_comm* c);

/* Releases everything; abort: do not wait on peers. The worker must have been joined. */
void shunt_comm_free(struct shunt_comm* c, int abort);

#endif
