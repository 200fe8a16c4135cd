/* Helpers for the plan tests: a small valid plan to break on purpose, string edits, temp
 * folders. */
#ifndef SHUNT_TESTS_PLAN_UTIL_H
#define SHUNT_TESTS_PLAN_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct base_opts {
  const char* name; /* default "base" */
  const char* coll; /* default "allreduce" */
  bool inplace;
  const char* min;       /* JSON text; default "0" */
  const char* max;       /* default "18446744073709551615" */
  const char* reduce_op; /* NULL: none */
};

/* A 2-rank plan that passes every check and the race check: put to the peer's scratch,
 * nop, signal, wait, nop, re, nop, sem_release + barrier in block 0; sem_acquire, nop,
 * barrier in block 1. Returned string is malloc'ed. */
char* base_plan(const struct base_opts* o);

/* Replaces the n-th (1-based; 0 = every) occurrence of `from` in s by `to`; returns a new
 * malloc'ed string and frees s. Aborts the test when `from` is absent. */
char* edit(char* s, const char* from, const char* to, int n);

/* mkdtemp under TMPDIR or /tmp; returns a malloc'ed path. */
char* temp_dir(void);
void write_file(const char* dir, const char* name, const char* text);
void remove_tree(const char* dir);

#endif
