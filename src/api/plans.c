#include "api/plans.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "comm/comm.h"
#include "util/log.h"

/* The sets loaded so far, one per rank count: the list grows under the lock; a set is never
 * changed once in it, so a pointer handed out is read without the lock. */
struct loaded {
  uint32_t nranks;
  struct shunt_planset* set;
  struct loaded* next;
};
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct loaded* sets;
static bool told_unset;

static void log_table(const struct shunt_planset* ps, const char* dir, uint32_t nranks) {
  SHUNT_INFO(SHUNT_PLAN,
             "plans from %s for %u ranks: %u usable of %u (set hash %016" PRIx64
             "); %u file(s) for other rank counts not read",
             dir, nranks, shunt_planset_usable(ps), shunt_planset_count(ps), shunt_planset_hash(ps),
             shunt_planset_other_ranks(ps));
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

static struct shunt_planset* load(uint32_t nranks) {
  const char* dir = shunt_plan_dir_from_env();
  if (!dir) {
    if (!told_unset) SHUNT_INFO(SHUNT_PLAN, "SHUNT_PLAN_DIR is not set: every call goes to NCCL");
    told_unset = true;
    return NULL;
  }
  struct shunt_planset_opts opts = {.tuning_path = shunt_tuning_path_from_env(), .nranks = nranks};
  struct shunt_plan_errors errs = {0};
  struct shunt_planset* set = NULL;
  if (shunt_planset_load(dir, &opts, &set, &errs) != 0) {
    char buf[1024];
    SHUNT_WARN("SHUNT_PLAN_DIR: %s", errs.n ? shunt_plan_error_format(&errs.v[0], buf, sizeof(buf)) : dir);
  } else {
    char buf[1024];
    for (uint32_t i = 0; i < errs.n; i++)
      SHUNT_INFO(SHUNT_PLAN, "plan problem: %s", shunt_plan_error_format(&errs.v[i], buf, sizeof(buf)));
  }
  shunt_plan_errors_free(&errs);
  if (set) log_table(set, dir, nranks);
  return set;
}

const struct shunt_planset* shunt_plans_for(uint32_t nranks) {
  pthread_mutex_lock(&lock);
  struct loaded* l = sets;
  while (l && l->nranks != nranks) l = l->next;
  struct shunt_planset* set = l ? l->set : NULL;
  if (!l) {
    set = load(nranks);
    /* Not kept when memory ran out: the next communicator of that size tries again. */
    if (set && (l = malloc(sizeof(*l)))) {
      *l = (struct loaded){nranks, set, sets};
      sets = l;
    } else if (set) {
      shunt_planset_free(set);
      set = NULL;
    }
  }
  pthread_mutex_unlock(&lock);
  return set;
}

uint32_t shunt_plans_query_rpn(const struct shunt_comm* c) {
  if (c->nnodes <= 1) return (uint32_t)c->nranks;
  return c->ranks_per_node > 0 ? (uint32_t)c->ranks_per_node : SHUNT_RPN_IRREGULAR;
}
