/* The process's plan set: the folder named by SHUNT_PLAN_DIR, loaded once at first need.
 *
 * Promises: loaded once per process (every communicator shares it, read-only); at INFO
 * the plan table is printed and every rejected file with its reason; a missing or
 * unreadable folder gives a WARN and an empty set, never a failure of the caller. */
#ifndef SHUNT_API_PLANS_H
#define SHUNT_API_PLANS_H

#include "plan/planset.h"

/* The plan set (possibly empty; NULL only when SHUNT_PLAN_DIR is unset or memory ran out). */
const struct shunt_planset* shunt_plans(void);

struct shunt_comm;
/* The ranks per node a communicator's selection asks for (shunt_select_query): all ranks on
 * one host, the uniform consecutive count, or SHUNT_RPN_IRREGULAR (only plans free of
 * placement serve). */
uint32_t shunt_plans_query_rpn(const struct shunt_comm* c);

#endif
