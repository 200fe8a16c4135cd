/* Placement: the ranks per node shunt derives from a plan's memory channels, and selection
 * over the shipped plans for one host, for several hosts of each multi-node shape, and for
 * an irregular placement. */
#include <string.h>

#include "common/check.h"
#include "plan/planset.h"

static const struct shunt_plan_entry* find(const struct shunt_planset* ps, const char* name) {
  for (uint32_t i = 0; i < shunt_planset_count(ps); i++) {
    const struct shunt_plan_entry* e = shunt_planset_entry(ps, i);
    if (e->plan && !strcmp(e->plan->name, name)) return e;
  }
  return NULL;
}

static const char* pick(const struct shunt_planset* ps, enum shunt_coll c, uint32_t n, uint32_t rpn,
                        uint64_t bytes) {
  struct shunt_select_query q = {.coll = c,
                                 .nranks = n,
                                 .ranks_per_node = rpn,
                                 .inplace = false,
                                 .dtype = SHUNT_DT_FLOAT32,
                                 .op = SHUNT_REDOP_SUM,
                                 .bytes = bytes};
  struct shunt_selection s = shunt_planset_select(ps, &q);
  return s.entry ? s.entry->plan->name : "(none)";
}

int main(void) {
  struct shunt_planset* ps = NULL;
  struct shunt_plan_errors e = {0};
  CHECK(shunt_planset_load(PLAN_DIR, NULL, &ps, &e) == 0 && ps);
  if (!ps) CHECK_DONE();
  /* Derived: memory channels all-to-all = one host; port only = any placement; memory inside
   * groups of M consecutive ranks = M. */
  static const struct {
    const char* name;
    uint32_t rpn;
  } want[] = {{"allreduce_8r_ll_outofplace", 8},    {"allgather_4r_simple_inplace", 4},
              {"allreduce_8r_port_outofplace", 0},  {"allgather_2r_port_inplace", 0},
              {"allreduce_2x4_hier_outofplace", 4}, {"allreduce_4x2_hier_inplace", 2},
              {"allgather_2x8_hier_outofplace", 8}, {"allgather_2x2_hier_inplace", 2}};
  for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
    const struct shunt_plan_entry* x = find(ps, want[i].name);
    CHECK_MSG(x != NULL, "%s not shipped", want[i].name);
    if (x)
      CHECK_MSG(x->plan->ranks_per_node == want[i].rpn, "%s: ranks per node %u, want %u", want[i].name,
                x->plan->ranks_per_node, want[i].rpn);
  }
  /* One host (0: all ranks on it): the one-host families, never a multi-node plan. */
  CHECK_STR_CONTAINS(pick(ps, SHUNT_COLL_ALLREDUCE, 8, 0, 4096), "allreduce_8r_allpairs_outofplace");
  CHECK_STR_CONTAINS(pick(ps, SHUNT_COLL_ALLREDUCE, 8, 0, 64u << 10), "allreduce_8r_ll_outofplace");
  CHECK_STR_CONTAINS(pick(ps, SHUNT_COLL_ALLREDUCE, 8, 8, 4u << 20), "allreduce_8r_scratch_outofplace");
  CHECK_STR_CONTAINS(pick(ps, SHUNT_COLL_ALLREDUCE, 8, 8, 16u << 20), "allreduce_8r_simple_outofplace");
  CHECK_STR_CONTAINS(pick(ps, SHUNT_COLL_ALLREDUCE, 8, 8, 128u << 20), "allreduce_8r_port_outofplace");
  /* Several hosts: the plan for that shape at every size, ahead of the port-only plan. */
  CHECK_STR_CONTAINS(pick(ps, SHUNT_COLL_ALLREDUCE, 8, 4, 4096), "allreduce_2x4_hier_outofplace");
  CHECK_STR_CONTAINS(pick(ps, SHUNT_COLL_ALLREDUCE, 8, 4, 128u << 20), "allreduce_2x4_hier_outofplace");
  CHECK_STR_CONTAINS(pick(ps, SHUNT_COLL_ALLREDUCE, 8, 2, 4096), "allreduce_4x2_hier_outofplace");
  CHECK_STR_CONTAINS(pick(ps, SHUNT_COLL_ALLGATHER, 16, 8, 1u << 20), "allgather_2x8_hier_outofplace");
  CHECK_STR_CONTAINS(pick(ps, SHUNT_COLL_ALLGATHER, 4, 2, 64), "allgather_2x2_hier_outofplace");
  /* One host below 64 MiB: the memory plans win over the port-only plans that serve the same sizes. */
  CHECK_STR_CONTAINS(pick(ps, SHUNT_COLL_ALLGATHER, 2, 2, 64), "allgather_2r_ll_outofplace");
  /* Irregular hosts, and every rank on a host of its own: only port-only plans, at every size. */
  CHECK_STR_CONTAINS(pick(ps, SHUNT_COLL_ALLREDUCE, 8, SHUNT_RPN_IRREGULAR, 4096),
                     "allreduce_8r_port_outofplace");
  CHECK_STR_CONTAINS(pick(ps, SHUNT_COLL_ALLREDUCE, 8, SHUNT_RPN_IRREGULAR, 128u << 20),
                     "allreduce_8r_port_outofplace");
  CHECK_STR_CONTAINS(pick(ps, SHUNT_COLL_ALLREDUCE, 8, 1, 4096), "allreduce_8r_port_outofplace");
  CHECK_STR_CONTAINS(pick(ps, SHUNT_COLL_ALLREDUCE, 2, 1, 128u << 20), "allreduce_2r_port_outofplace");
  CHECK_STR_CONTAINS(pick(ps, SHUNT_COLL_ALLGATHER, 4, 1, 1), "allgather_4r_port_outofplace");
  /* A rank count with no port plan: none. */
  CHECK_STR_CONTAINS(pick(ps, SHUNT_COLL_ALLREDUCE, 6, 1, 4096), "(none)");
  shunt_planset_free(ps);
  shunt_plan_errors_free(&e);
  CHECK_DONE();
}
