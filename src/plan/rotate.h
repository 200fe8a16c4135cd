/* Renaming a plan's ranks: the same plan played by other ranks.
 *
 * A broadcast plan is written for one root; shunt serves root r with it by letting
 * communicator rank (p + shift) mod n play plan rank p, shift = (r - plan root) mod n. The
 * renamed plan is a plan of its own: its gpus are reordered (gpus[(p + shift) mod n] is the
 * old gpus[p], id included) and every rank it names is renamed the same way (channel peers,
 * switch channel ranks, remote buffer ranks, the resolved peers and the ranks of buffer
 * entries); its root (a broadcast plan's) is r, everything else (name, ranges, chunk counts, the ops and their
 * tables) is the original's. It moves exactly what the original moves, so it is exact
 * wherever the original is, as long as the renaming keeps the placement (shunt_plan_rotatable).
 *
 * The renamed plan owns its renamed parts and shares every rank-free array with the original
 * (op tables, channel and semaphore ids, semaphores), so it must be freed (shunt_plan_free)
 * before the original. Nothing here depends on CUDA. */
#ifndef SHUNT_PLAN_ROTATE_H
#define SHUNT_PLAN_ROTATE_H

#include <stdbool.h>
#include <stdint.h>

#include "plan/plan.h"

/* Whether renaming by `shift` keeps the ranks that must share a host together: always on a
 * plan free of placement or for one host (ranks_per_node 0 or ngpus), else only a shift
 * that is a multiple of ranks_per_node. */
bool shunt_plan_rotatable(const struct shunt_plan* p, uint32_t shift);

/* The plan p with rank q renamed (q + shift) mod ngpus; NULL when out of memory. shift 0
 * gives a copy. p must have passed the static checks (plan/check.h). */
struct shunt_plan* shunt_plan_rotate(const struct shunt_plan* p, uint32_t shift);

/* The shift that makes p serve `root` (root < p->ngpus). */
static inline uint32_t shunt_plan_root_shift(const struct shunt_plan* p, uint32_t root) {
  return (root + p->ngpus - p->root % p->ngpus) % p->ngpus;
}

#endif
