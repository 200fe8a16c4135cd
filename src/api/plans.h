/* The process's plan sets: the plans of the folder named by SHUNT_PLAN_DIR for one rank
 * count, loaded at the first communicator of that size.
 *
 * Promises: each rank count's set is loaded once per process (every communicator of that
 * size shares it, read-only, until the process ends) and holds only the plans for that many
 * ranks, so every rank of a communicator holds the same set; at INFO each set's table is
 * printed and every rejected file with its reason; a missing or unreadable folder gives a
 * WARN and an empty set, never a failure of the caller. Safe from any thread. */
#ifndef SHUNT_API_PLANS_H
#define SHUNT_API_PLANS_H

#include "plan/planset.h"

/* The plan set for communicators of nranks ranks (possibly empty; NULL only when
 * SHUNT_PLAN_DIR is unset or memory ran out). */
const struct shunt_planset* shunt_plans_for(uint32_t nranks);

struct shunt_comm;
/* The ranks per node a communicator's selection asks for (shunt_select_query): all ranks on
 * one host, the uniform consecutive count, or SHUNT_RPN_IRREGULAR (only plans free of
 * placement serve). */
uint32_t shunt_plans_query_rpn(const struct shunt_comm* c);

#endif
