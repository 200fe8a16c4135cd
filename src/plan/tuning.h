/* Tuning files (SHUNT_TUNING; format in docs/tuning.md): per-cluster overrides of plans'
 * size ranges, by plan name and rank count, or disabling a plan.
 *
 * Promises: a bad line gives one error naming file:line and is skipped; the other lines
 * still apply. A rule for an exact rank count beats a rule for any count ("*"); among rules
 * of the same kind the last line wins. Nothing here touches the environment. */
#ifndef SHUNT_PLAN_TUNING_H
#define SHUNT_PLAN_TUNING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "plan/error.h"

struct shunt_tuning_rule {
  char name[128];  /* plan name (the plan's "name" key) */
  uint32_t nranks; /* 0: any rank count */
  bool disable;
  uint64_t min, max; /* inclusive, when !disable */
  uint32_t line;
  bool used; /* set by the plan set when a plan took this rule */
};

struct shunt_tuning {
  char* path; /* as given, for "file:line" sources */
  uint32_t n;
  struct shunt_tuning_rule* rules;
};

/* Parses text; errors use `label` as the file name. Returns the number of bad lines. */
unsigned shunt_tuning_parse(const char* text, size_t len, const char* label, struct shunt_tuning* out,
                            struct shunt_plan_errors* errs);
/* Reads and parses a file; returns a (negative) SHUNT_E_* code (util/status.h) with an error
 * when it cannot be read, else the number of bad lines. */
int shunt_tuning_load(const char* path, struct shunt_tuning* out, struct shunt_plan_errors* errs);
void shunt_tuning_free(struct shunt_tuning* t);
/* The rule that applies to (name, nranks), or NULL. */
const struct shunt_tuning_rule* shunt_tuning_find(const struct shunt_tuning* t, const char* name,
                                                  uint32_t nranks);

/* Parses a size: decimal digits with an optional K, M, G or T suffix (powers of 1024), or
 * "max" (2^64-1). False on anything else or overflow. */
bool shunt_tuning_parse_size(const char* s, uint64_t* out);
/* The inverse: "0", "64K", "1M", "12345", "max" (the largest suffix that divides exactly). */
const char* shunt_tuning_format_size(uint64_t v, char* buf, size_t len);

#endif
