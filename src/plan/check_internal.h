/* Shared between the check files: where an op is, and error helpers. */
#ifndef SHUNT_PLAN_CHECK_INTERNAL_H
#define SHUNT_PLAN_CHECK_INTERNAL_H

#include "plan/check.h"

struct cctx {
  const struct shunt_plan* p;
  struct shunt_plan_errors* errs;
  unsigned nerr;
};

/* Position of an op: gpus[r].threadblocks[b].ops[i] or, inside pipeline ops[i], .ops[j]. */
struct oppos {
  uint32_t r, b, i;
  int32_t j; /* -1 when not inside a pipeline */
};

void cerr(struct cctx* c, const char* path, const char* fmt, ...) SHUNT_PRINTF(3, 4);
/* Path of an op plus a suffix (e.g. ".src_buff[0].index"). */
void oppath(const struct oppos* at, const char* suffix, char* buf, size_t len);
void operr(struct cctx* c, const struct oppos* at, const char* suffix, const char* fmt, ...)
    SHUNT_PRINTF(4, 5);

/* Calls fn for every op of every block of every GPU, pipeline bodies after their pipeline;
 * `pipe` is the enclosing pipeline or NULL. */
typedef void (*op_visit_fn)(struct cctx* c, const struct oppos* at, const struct shunt_plan_op* o,
                            const struct shunt_plan_op* pipe, void* arg);
void visit_ops(struct cctx* c, op_visit_fn fn, void* arg);

void check_ops(struct cctx* c);     /* check_ops.c */
void check_balance(struct cctx* c); /* check_sync.c */
/* check_xrace.c: slices read across ranks vs the signals that order them. */
void check_cross_races(struct cctx* c);
/* check_step.c: ranks kept in step across back-to-back calls. */
void check_step(struct cctx* c);

#endif
