/* shunt-plan check: parse, static checks and race checks; one line per problem, then, for a
 * plan without any, a note per block barrier the lowering adds. */
#include <stdio.h>

#include "commands.h"
#include "plan/check.h"
#include "plan/parse.h"

int cmd_check(int argc, char** argv) {
  struct shunt_check_opts opts = {0};
  if (take_max_threadblocks(&argc, argv, &opts.max_threadblocks) != 0 || argc < 1) {
    fprintf(stderr, "usage: shunt-plan check [--max-threadblocks N] FILE...\n");
    return 2;
  }
  int failed = 0;
  for (int i = 0; i < argc; i++) {
    struct shunt_plan_errors errs = {0};
    struct shunt_plan* p = shunt_plan_load_file(argv[i], &errs);
    if (p) {
      shunt_plan_check(p, &opts, &errs);
      shunt_plan_check_races(p, &errs);
    }
    char buf[1200];
    for (uint32_t k = 0; k < errs.n; k++)
      printf("%s\n", shunt_plan_error_format(&errs.v[k], buf, sizeof(buf)));
    if (errs.dropped) printf("%s: %u more problem(s) not shown\n", argv[i], errs.dropped);
    if (p && !errs.n) {
      /* Hazards a block barrier orders are not errors: say where the lowering adds one. */
      struct shunt_plan_errors notes = {0};
      shunt_plan_missing_barriers(p, &notes);
      for (uint32_t k = 0; k < notes.n; k++)
        printf("%s: %s: note: the lowering adds a block barrier: %s\n", argv[i], notes.v[k].path,
               notes.v[k].reason);
      if (notes.dropped) printf("%s: %u more note(s) not shown\n", argv[i], notes.dropped);
      shunt_plan_errors_free(&notes);
    }
    if (errs.n)
      failed = 1;
    else if (shunt_coll_rooted(p->coll))
      /* The static checks see one mode and one root; the plan serves more (plan/planset.h). */
      printf(
          "%s: ok (%s from root %u: serves both in-place modes and, its ranks renamed, other roots; "
          "shunt-plan verify runs each)\n",
          argv[i], p->collective, p->root);
    else
      printf("%s: ok\n", argv[i]);
    shunt_plan_free(p);
    shunt_plan_errors_free(&errs);
  }
  return failed;
}
