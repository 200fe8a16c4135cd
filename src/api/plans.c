#include "api/plans.h"

#include <inttypes.h>
#include <pthread.h>

#include "comm/comm.h"
#include "util/log.h"

/* Written once under pthread_once, then only read. */
static pthread_once_t once = PTHREAD_ONCE_INIT;
static struct shunt_planset* set;

static void log_table(const struct shunt_planset* ps, const char* dir) {
  SHUNT_INFO(SHUNT_PLAN, "plans from %s: %u usable of %u (set hash %016" PRIx64 ")", dir,
             shunt_planset_usable(ps), shunt_planset_count(ps), shunt_planset_hash(ps));
  for (uint32_t i = 0; i < shunt_planset_count(ps); i++) {
    const struct shunt_plan_entry* e = shunt_planset_entry(ps, i);
    const struct shunt_plan* p = e->plan;
    if (e->status == SHUNT_PLAN_OK)
      SHUNT_INFO(SHUNT_PLAN, "  %-36s %-10s %2u ranks %-6s %-11s [%" PRIu64 ", %" PRIu64 "] (%s)", e->file,
                 p->collective, p->ngpus, p->ll ? "LL" : p->protocol,
                 p->inplace ? "in-place" : "out-of-place", e->min_bytes, e->max_bytes, e->range_source);
    else
      SHUNT_INFO(SHUNT_PLAN, "  %-36s %s: %s", e->file,
                 e->status == SHUNT_PLAN_DISABLED ? "disabled" : "rejected", e->reason);
  }
}

static void load(void) {
  const char* dir = shunt_plan_dir_from_env();
  if (!dir) {
    SHUNT_INFO(SHUNT_PLAN, "SHUNT_PLAN_DIR is not set: every call goes to NCCL");
    return;
  }
  struct shunt_planset_opts opts = {.tuning_path = shunt_tuning_path_from_env()};
  struct shunt_plan_errors errs = {0};
  if (shunt_planset_load(dir, &opts, &set, &errs) != 0) {
    char buf[1024];
    SHUNT_WARN("SHUNT_PLAN_DIR: %s", errs.n ? shunt_plan_error_format(&errs.v[0], buf, sizeof(buf)) : dir);
  } else {
    char buf[1024];
    for (uint32_t i = 0; i < errs.n; i++)
      SHUNT_INFO(SHUNT_PLAN, "plan problem: %s", shunt_plan_error_format(&errs.v[i], buf, sizeof(buf)));
  }
  shunt_plan_errors_free(&errs);
  if (set) log_table(set, dir);
}

const struct shunt_planset* shunt_plans(void) {
  pthread_once(&once, load);
  return set;
}

uint32_t shunt_plans_query_rpn(const struct shunt_comm* c) {
  if (c->nnodes <= 1) return (uint32_t)c->nranks;
  return c->ranks_per_node > 0 ? (uint32_t)c->ranks_per_node : SHUNT_RPN_IRREGULAR;
}
