/* Pieces of the plan parser shared between its files. */
#ifndef SHUNT_PLAN_PARSE_INTERNAL_H
#define SHUNT_PLAN_PARSE_INTERNAL_H

#include "plan/json.h"
#include "plan/plan.h"

/* obj[key] as a channel type string (required). */
bool parse_chan_type(struct jctx* c, const cJSON* obj, const char* key, bool allow_none, bool allow_switch,
                     enum shunt_chan_type* out);
/* A string node holding "i", "o" or "s". */
bool parse_buf_type(struct jctx* c, const cJSON* v, const char* key, enum shunt_buf_type* out);
/* An `ops` array at the current path; nested = inside a pipeline. */
void parse_op_list(struct jctx* c, const cJSON* arr, bool nested, uint32_t* n, struct shunt_plan_op** out);
/* Fills the derived ("resolved") fields of a parsed plan. */
void resolve_plan(struct jctx* c, struct shunt_plan* p);

#endif
