/* libFuzzer target: any bytes through the plan parser, the static checks, the race checker
 * and the tuning-file parser. Must never crash, leak or hang. */
#include <stddef.h>
#include <stdint.h>

#include "plan/check.h"
#include "plan/parse.h"
#include "plan/tuning.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  struct shunt_plan_errors errs = {0};
  struct shunt_plan* p = shunt_plan_parse((const char*)data, size, "fuzz.json", &errs);
  if (p) {
    struct shunt_check_opts opts = {.max_threadblocks = 132};
    shunt_plan_check(p, &opts, &errs);
    shunt_plan_check_races(p, &errs);
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
