/* A same-host allgather of small fixed-size records through shared memory, for decisions every
 * rank of a communicator must take identically at one call (which buffers peers reach in place).
 *
 * Promises:
 * - Made collectively over the bootstrap (shunt_gpu_agree_new on every rank at the same call);
 *   every rank learns whether all could map it, so either every rank has a board or none has.
 * - shunt_gpu_agree_round: every rank calls it at the same call with the same `seq` (1, 2, ...,
 *   one more per round); on return all[q] is rank q's record of that round. Nothing else is
 *   exchanged: a round costs a few shared-memory writes and reads plus the wait for the last rank
 *   to arrive, not a bootstrap message. Records are kept two rounds, so a fast rank may start the
 *   next round while a slow one still reads this one.
 * - A rank that does not arrive within SHUNT_BOOTSTRAP_TIMEOUT seconds (default 300), or
 *   stop(arg) turning true while waiting (a broken world: a peer may never come), makes the
 *   round fail (SHUNT_E_TIMEOUT, or SHUNT_E_ABORTED when stop said so, with a message); the
 *   communicator is then broken, as after any rank that
 *   never reached a collective.
 * Private to src/exec/gpu. */
#ifndef SHUNT_EXEC_GPU_AGREE_H
#define SHUNT_EXEC_GPU_AGREE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "transport/world.h"

#define SHUNT_GPU_AGREE_RECORD 512 /* bytes of one rank's record */

struct shunt_gpu_agree;

/* NULL (with why) on every rank when any rank could not make or map it. */
struct shunt_gpu_agree* shunt_gpu_agree_new(uint32_t rank, uint32_t nranks,
                                            const struct shunt_world_exchange* ex, char* err, size_t len);
void shunt_gpu_agree_free(struct shunt_gpu_agree* a);

/* mine: this rank's record (at most SHUNT_GPU_AGREE_RECORD bytes, `bytes` on every rank);
 * all: nranks records of `bytes`; stop: NULL, or asked now and then while waiting. */
int shunt_gpu_agree_round(struct shunt_gpu_agree* a, uint64_t seq, const void* mine, size_t bytes, void* all,
                          bool (*stop)(void*), void* arg, char* err, size_t len);

#endif
