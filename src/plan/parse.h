/* JSON text -> Plan (plan/plan.h), with the cJSON library.
 *
 * Promises:
 * - The whole current format (docs/plan-format.md §2-§5) is read into the Plan; a legacy plan
 *   (MSCCL++ <= v0.7, recognised by keys such as inputChunks, i_buff, connectedTo) is
 *   rejected naming that format.
 * - Rejected, with the first problem found as one error (file, JSON path, reason): invalid
 *   JSON, nesting deeper than cJSON's limit, a missing required key, a key of the wrong type,
 *   an unknown op name, a duplicate key in an object the parser reads, integers with a
 *   fraction or exponent or outside their field's range (e.g. negative, or above 2^64-1).
 * - Unknown extra keys are ignored with an INFO line (subsystem PLAN).
 * - Integers are read from their JSON text, not through a double, so 2^64-1 is exact.
 * - Parsing does not run the static checks (plan/check.h); a parsed plan may still be
 *   inconsistent. Thread-safe apart from cJSON's global error pointer, which is not used. */
#ifndef SHUNT_PLAN_PARSE_H
#define SHUNT_PLAN_PARSE_H

#include <stddef.h>

#include "plan/error.h"
#include "plan/plan.h"

/* Plan files larger than this are rejected before they are read. */
#define SHUNT_PLAN_MAX_FILE_BYTES ((size_t)64 << 20)

/* Parses len bytes of text (need not be NUL-terminated). `file` names the source in errors
 * and becomes plan->file. Returns the plan, or NULL with one error appended to errs. */
struct shunt_plan* shunt_plan_parse(const char* text, size_t len, const char* file,
                                    struct shunt_plan_errors* errs);

/* Reads a plan file (regular file, at most SHUNT_PLAN_MAX_FILE_BYTES) into a NUL-terminated
 * buffer the caller frees; NULL with one error appended to errs. */
char* shunt_plan_read_file(const char* path, size_t* len, struct shunt_plan_errors* errs);
/* Reads and parses a file (shunt_plan_read_file, then shunt_plan_parse). */
struct shunt_plan* shunt_plan_load_file(const char* path, struct shunt_plan_errors* errs);

/* The 64-bit FNV-1a hash used for plan contents and plan-set hashes (stable across hosts). */
#define SHUNT_FNV64_INIT 0xcbf29ce484222325ull
uint64_t shunt_fnv64(uint64_t h, const void* data, size_t len);

#endif
