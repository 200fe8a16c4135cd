/* The in-job tuning cache (SHUNT_TUNING_CACHE; docs/tuning.md; its engine is api/tune.h): one tuning file per
 * fingerprint of what makes decisions valid (shunt's version, the NCCL behind it, the device kind, ranks,
 * ranks per node, the plan-set hash), holding each decided bucket and, as ordinary tuning rules,
 * the ranges the winners took.
 *
 * Promises: a file is written whole under a temporary name and renamed, so a reader sees an old
 * file or a new one, never a part (two jobs writing at once: the last rename wins, whole). A
 * file whose fingerprint line differs from the one asked for (a hash collision, a stale file)
 * is not read. Every problem (a folder that cannot be made or read, a bad line, a short file)
 * gives one WARN and the untuned choices; nothing here aborts. */
#ifndef SHUNT_PLAN_TUNE_CACHE_H
#define SHUNT_PLAN_TUNE_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "plan/plan.h"

/* A bucket (api/tune.h), as the cache names it. */
/* The winner's name in a decision NCCL won. */
#define SHUNT_TUNE_NCCL_NAME "nccl"

struct shunt_tune_key {
  uint32_t coll;    /* shunt_coll_code (util/vocab.h), as the file holds it */
  uint32_t inplace; /* 0 or 1 */
  uint32_t need;    /* the call's reduction op, shunt_redop_code; 0 for collectives without one */
  uint32_t scale;   /* 0 or 1: the call scales its input (float avg, PreMulSum) */
  uint32_t root;    /* broadcast: the root; else 0 */
  uint32_t cls;     /* size class: bytes in [2^cls, 2^(cls+1)), class 0 also holds 0 */
  uint32_t device;  /* 0: host buffers (host backend); 1: device buffers (GPU backend or NCCL) */
};

/* The most candidates one bucket weighs (the shipped folders offer at most five plans for one
 * call, and NCCL). */
#define SHUNT_TUNE_MAX_CAND 8

/* One candidate's time in a decision: the slowest rank's median where it was sampled, its
 * screen time where the screen left it out. */
struct shunt_tune_time {
  char name[128];
  double us;
};

/* One decision: the bucket, the name of the plan that won it, and the times it was decided on
 * (ntimes 0: none kept). */
struct shunt_tune_saved {
  struct shunt_tune_key key;
  char winner[128];
  uint32_t ntimes;
  struct shunt_tune_time times[SHUNT_TUNE_MAX_CAND];
};

/* The size class of a call of `bytes`. */
uint32_t shunt_tune_class(uint64_t bytes);

/* The cache file for `fingerprint` in SHUNT_TUNING_CACHE (default $XDG_CACHE_HOME/shunt, else
 * $HOME/.cache/shunt), the folder made if missing. False (with one WARN) when there is none. */
bool shunt_tune_cache_path(const char* fingerprint, char* path, size_t len);

/* Reads the decisions of `path` when its fingerprint line is `fingerprint` (NULL: whatever it
 * is): *out (malloc'ed, the caller frees) and *n. A missing file is no error (0 decisions); anything else
 * wrong gives one WARN and 0 decisions. */
void shunt_tune_cache_read(const char* path, const char* fingerprint, struct shunt_tune_saved** out,
                           uint32_t* n);

/* Writes the decisions to `path` atomically; false (with one WARN) when it cannot. */
bool shunt_tune_cache_write(const char* path, const char* fingerprint, uint32_t nranks,
                            const struct shunt_tune_saved* d, uint32_t n);

#endif
