/* Making and unmaking shunt's communicator state. */
#ifndef SHUNT_COMM_COMM_CREATE_H
#define SHUNT_COMM_COMM_CREATE_H

#include "comm/comm.h"

struct shunt_bootstrap;

/* Collective over boot's ranks: topology (node of every rank from host identities), the
 * plan-set agreement (a mismatch disables plans on every rank, loudly) and the state.
 * Takes ownership of boot on success. Returns NULL with a WARN on failure. */
struct shunt_comm* shunt_comm_create(struct shunt_bootstrap* boot, ncclComm_t real, int cuda_dev, int blocking,
                                     const struct shunt_planset* plans, uint64_t plans_hash, uint32_t plans_usable);

/* Releases everything; abort: do not wait on peers. */
void shunt_comm_free(struct shunt_comm* c, int abort);

#endif
