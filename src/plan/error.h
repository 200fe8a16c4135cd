/* Errors about plans, as values: which file, where in it (a JSON path such as
 * gpus[1].threadblocks[0].ops[3].src_buff[0].index, or "line 12" for tuning files) and why.
 *
 * Promises: adding never fails loudly; when memory is short or the list is long (more than
 * SHUNT_PLAN_ERRORS_MAX) further errors are counted in `dropped` instead of stored. */
#ifndef SHUNT_PLAN_ERROR_H
#define SHUNT_PLAN_ERROR_H

#include <stddef.h>
#include <stdint.h>

#include "util/log.h"

#define SHUNT_PLAN_ERRORS_MAX 256

struct shunt_plan_error {
  char file[256];
  char path[256];
  char reason[384];
};

struct shunt_plan_errors {
  uint32_t n, cap;
  uint32_t dropped;
  struct shunt_plan_error* v;
};

/* A zeroed struct is an empty list; free releases its storage and empties it. */
void shunt_plan_errors_free(struct shunt_plan_errors* e);
void shunt_plan_errors_clear(struct shunt_plan_errors* e);
void shunt_plan_error_add(struct shunt_plan_errors* e, const char* file, const char* path, const char* fmt,
                          ...) SHUNT_PRINTF(4, 5);
/* Appends all of src to dst. */
void shunt_plan_errors_append(struct shunt_plan_errors* dst, const struct shunt_plan_errors* src);
/* "file: path: reason" (path omitted when empty) into buf; returns buf. */
const char* shunt_plan_error_format(const struct shunt_plan_error* err, char* buf, size_t len);

#endif
