/* libFuzzer target: any bytes through the plan parser, the static checks, the race checker
 * (across ranks, and the hazards inside a block the lowering adds barriers for), the size
 * computation of a call on a plan that passed them (exec/split.h: the head and tail
 * of sizes drawn from the input, the extremes among them) and the tuning-file parser. Must
 * never crash, leak or hang. */
#include <stddef.h>
#include <stdint.h>

#include "exec/split.h"
#include "plan/check.h"
#include "plan/parse.h"
#include "plan/tuning.h"

/* Calls of sizes drawn from the input's hash, and the extreme counts, on a checked plan. */
static void sizes(const struct shunt_plan* p, const uint8_t* data, size_t size) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < size; i++) h = (h ^ data[i]) * 1099511628211ull;
  for (int k = 0; k < 6; k++) {
    enum shunt_dtype dt = shunt_dtype_from_code((uint32_t)((h >> 8) % SHUNT_DT_COUNT));
    uint64_t es = shunt_dtype_size(dt);
    uint64_t count = k == 0   ? 1
                     : k == 1 ? UINT64_MAX / es / (p->ngpus ? p->ngpus : 1)
                              : (h >> 20) % (1ull << (4 + 6 * k));
    if (count == 0) count = 1;
    /* Each collective's buffer shapes: allgather's output and reducescatter's input hold every
     * rank's part (count is bounded so that they cannot wrap); the others' sides are equal. */
    uint64_t part = count * es, n = p->ngpus ? p->ngpus : 1;
    struct shunt_call_shape s = {p->coll == SHUNT_COLL_REDUCESCATTER ? part * n : part,
                                 p->coll == SHUNT_COLL_ALLGATHER ? part * n : part,
                                 dt,
                                 shunt_redop_from_code((uint32_t)(h % 6)), /* a call's ops, SUM..PREMULSUM */
                                 SHUNT_PKT_LL16,
                                 0,
                                 false};
    char why[256];
    struct shunt_split sp;
    (void)shunt_split_check(p, &s, &sp, why, sizeof(why));
    h = h * 6364136223846793005ull + 1442695040888963407ull;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  struct shunt_plan_errors errs = {0};
  struct shunt_plan* p = shunt_plan_parse((const char*)data, size, "fuzz.json", &errs);
  if (p) {
    struct shunt_check_opts opts = {.max_threadblocks = 132};
    if (shunt_plan_check(p, &opts, &errs) == 0 && shunt_plan_check_races(p, &errs) == 0) {
      /* The per-element hazard analysis the lowering adds block barriers from. */
      struct shunt_plan_errors notes = {0};
      shunt_plan_missing_barriers(p, &notes);
      shunt_plan_errors_free(&notes);
      if (p->ngpus <= 64) sizes(p, data, size);
    }
    shunt_plan_free(p);
  }
  shunt_plan_errors_free(&errs);
  if (size < 4096) {
    struct shunt_tuning t = {0};
    shunt_tuning_parse((const char*)data, size, "fuzz.tuning", &t, &errs);
    shunt_tuning_free(&t);
    shunt_plan_errors_free(&errs);
  }
  return 0;
}
