/* Reading cJSON trees with errors that carry the JSON path (internal to the parser). */
#ifndef SHUNT_PLAN_JSON_H
#define SHUNT_PLAN_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "plan/arena.h"
#include "plan/error.h"

struct jctx {
  const char* file;
  struct shunt_plan_errors* errs;
  struct shunt_arena* arena;
  const char* text;
  size_t len;
  /* The JSON text of every number, in document order: cJSON keeps only a double, which
   * cannot hold every uint64. Each number node's valueint is its ordinal here. */
  uint32_t* num_off;
  uint32_t nnum;
  char path[512];
  size_t plen;
  bool failed;
};

/* Indexes the number tokens of c->text and numbers the tree's number nodes to match.
 * False (with an error) when out of memory. */
bool jctx_index_numbers(struct jctx* c, cJSON* root);

/* Path building: push returns a mark for pop. */
size_t jpush_key(struct jctx* c, const char* key);
size_t jpush_index(struct jctx* c, uint32_t i);
void jpop(struct jctx* c, size_t mark);

/* Records one error at the current path (plus an optional key) and marks the parse failed.
 * Only the first failure is recorded. */
void jfail(struct jctx* c, const char* key, const char* fmt, ...) SHUNT_PRINTF(3, 4);

/* Validates an object's keys: duplicates and legacy-format keys fail; keys not in `known`
 * (NULL-terminated) are ignored with an INFO line. */
bool jkeys(struct jctx* c, const cJSON* obj, const char* const* known);

/* Looks up key; fails when it is required and missing or when its JSON type is not `type`
 * (cJSON_String, cJSON_Number, cJSON_Array, cJSON_Object, or cJSON_True|cJSON_False). */
const cJSON* jget(struct jctx* c, const cJSON* obj, const char* key, int type, bool required);

/* Integer readers: the node must be an integer literal within [lo, hi]. `what` names the
 * node in errors (a key, or NULL for an array element at the current path). */
bool jnum_u64(struct jctx* c, const cJSON* node, const char* what, uint64_t lo, uint64_t hi, uint64_t* out);
bool jnum_i64(struct jctx* c, const cJSON* node, const char* what, int64_t lo, int64_t hi, int64_t* out);

/* obj[key] as an integer; when absent and not required, *out = def. */
bool jkey_u32(struct jctx* c, const cJSON* obj, const char* key, bool required, uint32_t def, uint32_t* out);
bool jkey_u64(struct jctx* c, const cJSON* obj, const char* key, bool required, uint64_t def, uint64_t* out);
bool jkey_i32(struct jctx* c, const cJSON* obj, const char* key, bool required, int32_t def, int32_t* out);
bool jkey_bool(struct jctx* c, const cJSON* obj, const char* key, bool required, bool def, bool* out);
/* obj[key] as a string copied into the arena; NULL when absent and not required. */
bool jkey_str(struct jctx* c, const cJSON* obj, const char* key, bool required, const char** out);
/* obj[key] as an array of non-negative integers below 2^31 (arena-allocated). */
bool jkey_u32_array(struct jctx* c, const cJSON* obj, const char* key, bool required, uint32_t* n,
                    uint32_t** out);

/* The number of elements of an array node (cJSON counts by walking the list). */
uint32_t jcount(const cJSON* arr);

#endif
