/* A plan's rank count and name, read from its JSON text without parsing it into a tree.
 *
 * Promises:
 * - For text that shunt_plan_parse accepts, a successful peek gives exactly the plan's ngpus
 *   (the length of the top-level "gpus" array) and its "name".
 * - It allocates nothing and reads each byte at most once: a folder of large plans is sorted
 *   by rank count for a small fraction of what parsing it costs.
 * - It fails (false) on anything it does not recognise as a plan's outline: not an object, no
 *   "gpus" array, "gpus" or "name" given twice, an escape inside a top-level key or the name,
 *   a name longer than the buffer. Text that peeks may still be an invalid plan: the peek is a
 *   sorting aid, the parser and the checks judge. */
#ifndef SHUNT_PLAN_PEEK_H
#define SHUNT_PLAN_PEEK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct shunt_plan_peek {
  uint32_t ngpus;
  char name[128]; /* "" when the top level has no "name" string */
};

bool shunt_plan_peek(const char* text, size_t len, struct shunt_plan_peek* out);

#endif
