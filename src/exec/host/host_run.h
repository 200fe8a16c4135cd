/* The host backend: runs a Program on host memory over a world (transport/world.h), every plan
 * threadblock a fiber on the calling thread (transport/fiber.h); the stacks and per-run arrays
 * are kept by the caller between runs (struct shunt_host_keep).
 *
 * Promises:
 * - shunt_host_run returns when every threadblock has finished and every port-channel
 *   transfer this rank started is complete; user buffers are host pointers.
 * - User buffers that peers reach (Program.remote_access) are staged through the world's
 *   shared staging regions: copied in before (in place: the whole output, which holds the
 *   input) and out after. A user buffer that already is the world's staging region is used
 *   in place. Avg and PreMulSum are computed by scaling each contribution once at staging
 *   (floating avg, PreMulSum) or dividing the result (integer avg), as NCCL does.
 * - Each run advances the world's epoch; the packet flag and the double-scratch half
 *   follow from it, so equal run counts agree on every rank.
 * - Threadblocks left blocked: the world is marked broken (later runs refuse) and the code says
 *   why: the world's failure code (transport/world.h: a peer gone, the network) with its
 *   message; SHUNT_E_ABORTED when the communicator was aborted; else SHUNT_E_TIMEOUT. The
 *   last two name, for every blocked threadblock, rank, block, op index and name, what it
 *   waits on, the value awaited and the value seen. */
#ifndef SHUNT_EXEC_HOST_RUN_H
#define SHUNT_EXEC_HOST_RUN_H

#include <stddef.h>
#include <stdint.h>

#include "exec/program.h"
#include "transport/world.h"
#include "util/status.h"

/* What the caller keeps between runs (their fibers and per-run arrays), tied to no world: made
 * at the first run, grown as needed, freed by its owner. */
struct shunt_host_keep;
void shunt_host_keep_free(struct shunt_host_keep* k);

struct shunt_host_run_opts {
  uint64_t timeout_ms;       /* 0: SHUNT_HOST_TIMEOUT_MS from the environment, else 30000 */
  const void* premul_scalar; /* PREMULSUM: one element of the program's dtype */
};

/* keep: the caller's (*keep NULL at first), kept between runs. */
int shunt_host_run_kept(struct shunt_world* w, const struct shunt_program* p, const void* user_in,
                        void* user_out, const struct shunt_host_run_opts* opts, struct shunt_host_keep** keep,
                        char* err, size_t len);
/* The same, with what the run needs made and freed by it. */
int shunt_host_run(struct shunt_world* w, const struct shunt_program* p, const void* user_in, void* user_out,
                   const struct shunt_host_run_opts* opts, char* err, size_t len);

#endif
