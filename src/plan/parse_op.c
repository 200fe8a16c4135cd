/* Parsing one op (docs/plan-format.md §5.2) and its buffer entries. */
#include <string.h>

#include "plan/parse_internal.h"

static bool op_type_of(const char* s, enum shunt_op_type* out) {
  for (int t = 0; t < SHUNT_OP_COUNT; t++)
    if (strcmp(s, shunt_op_name((enum shunt_op_type)t)) == 0) {
      *out = (enum shunt_op_type)t;
      return true;
    }
  return false;
}

static bool parse_ref(struct jctx* c, const cJSON* e, struct shunt_plan_ref* r) {
  static const char* const known[] = {"type", "buffer_id", "switch_channel_id", "index", "size",
                                      "rank", NULL};
  if (!cJSON_IsObject(e)) {
    jfail(c, NULL, "expected an object");
    return false;
  }
  if (!jkeys(c, e, known)) return false;
  const cJSON* t = jget(c, e, "type", cJSON_String, false);
  const cJSON* b = jget(c, e, "buffer_id", cJSON_Number, false);
  const cJSON* s = jget(c, e, "switch_channel_id", cJSON_Number, false);
  if (c->failed) return false;
  if ((t != NULL) + (b != NULL) + (s != NULL) != 1) {
    jfail(c, NULL, "a buffer entry needs exactly one of 'type', 'buffer_id', 'switch_channel_id'");
    return false;
  }
  r->global = -1;
  r->peer = -1;
  uint64_t id = 0;
  if (t) {
    r->kind = SHUNT_REF_LOCAL;
    if (!parse_buf_type(c, t, "type", &r->type)) return false;
  } else if (b) {
    r->kind = SHUNT_REF_REMOTE;
    if (!jnum_u64(c, b, "buffer_id", 0, INT32_MAX, &id)) return false;
  } else {
    r->kind = SHUNT_REF_SWITCH;
    if (!jnum_u64(c, s, "switch_channel_id", 0, INT32_MAX, &id)) return false;
  }
  r->id = (uint32_t)id;
  return jkey_u32(c, e, "index", true, 0, &r->index) && jkey_u32(c, e, "size", true, 0, &r->size) &&
         jkey_i32(c, e, "rank", false, -1, &r->rank);
}

static bool parse_refs(struct jctx* c, const cJSON* op, const char* key, uint32_t* n,
                       struct shunt_plan_ref** out) {
  const cJSON* a = jget(c, op, key, cJSON_Array, false);
  *n = 0;
  *out = NULL;
  if (!a) return !c->failed;
  uint32_t cnt = jcount(a);
  struct shunt_plan_ref* v = shunt_arena_calloc(c->arena, cnt, sizeof(*v));
  if (!v) {
    jfail(c, key, "out of memory");
    return false;
  }
  size_t m = jpush_key(c, key);
  uint32_t i = 0;
  for (const cJSON* e = a->child; e && !c->failed; e = e->next, i++) {
    size_t m2 = jpush_index(c, i);
    parse_ref(c, e, &v[i]);
    jpop(c, m2);
  }
  jpop(c, m);
  *n = cnt;
  *out = v;
  return !c->failed;
}

static bool parse_redop(struct jctx* c, const cJSON* op, enum shunt_plan_redop* out) {
  const cJSON* v = jget(c, op, "reduce_op", cJSON_String, false);
  *out = SHUNT_PLAN_REDOP_NONE;
  if (!v) return !c->failed;
  for (enum shunt_plan_redop r = SHUNT_PLAN_REDOP_SUM; r <= SHUNT_PLAN_REDOP_MAX; r++)
    if (strcmp(v->valuestring, shunt_plan_redop_name(r)) == 0) {
      *out = r;
      return true;
    }
  jfail(c, "reduce_op", "unknown reduce_op '%.64s' (expected sum, prod, min or max)", v->valuestring);
  return false;
}

static bool parse_op(struct jctx* c, const cJSON* oj, bool nested, struct shunt_plan_op* o) {
  static const char* const known[] = {
      "name",       "channel_type",     "channel_ids",   "src_buff",     "dst_buff", "tbg_info",
      "barrier_id", "num_threadblocks", "semaphore_ids", "iter_context", "ops",      "reduce_op",
      NULL};
  if (!cJSON_IsObject(oj)) {
    jfail(c, NULL, "expected an object");
    return false;
  }
  if (!jkeys(c, oj, known)) return false;
  const cJSON* name = jget(c, oj, "name", cJSON_String, true);
  if (!name) return false;
  if (!op_type_of(name->valuestring, &o->type)) {
    if (strcmp(name->valuestring, "glre") == 0)
      jfail(c, "name",
            "op 'glre' (an unfused group load-reduce) cannot run; the DSL fuses it with gstore into glres");
    else
      jfail(c, "name", "unknown op '%.64s'", name->valuestring);
    return false;
  }
  if (cJSON_GetObjectItemCaseSensitive(oj, "channel_type")) {
    o->has_channel_type = true;
    if (!parse_chan_type(c, oj, "channel_type", true, true, &o->channel_type)) return false;
  }
  uint32_t n, *ids;
  if (!jkey_u32_array(c, oj, "channel_ids", false, &n, &ids)) return false;
  o->nchannel_ids = n;
  o->channel_ids = ids;
  o->channel_global = shunt_arena_calloc(c->arena, n, sizeof(*o->channel_global));
  if (!o->channel_global) {
    jfail(c, "channel_ids", "out of memory");
    return false;
  }
  for (uint32_t i = 0; i < n; i++) o->channel_global[i] = -1;
  if (!parse_refs(c, oj, "src_buff", &o->nsrc, &o->src) || !parse_refs(c, oj, "dst_buff", &o->ndst, &o->dst))
    return false;
  const cJSON* tbg = jget(c, oj, "tbg_info", cJSON_Object, false);
  if (tbg) {
    static const char* const tk[] = {"tb_id", "tbg_size", NULL};
    size_t m = jpush_key(c, "tbg_info");
    o->has_tbg = jkeys(c, tbg, tk) && jkey_u32(c, tbg, "tb_id", true, 0, &o->tbg_id) &&
                 jkey_u32(c, tbg, "tbg_size", true, 0, &o->tbg_size);
    jpop(c, m);
  }
  if (c->failed) return false;
  const cJSON* bid = jget(c, oj, "barrier_id", cJSON_Number, false);
  const cJSON* nblk = jget(c, oj, "num_threadblocks", cJSON_Number, false);
  if (c->failed) return false;
  if (bid || nblk) {
    o->has_barrier = true;
    if (!jkey_u32(c, oj, "barrier_id", true, 0, &o->barrier_id) ||
        !jkey_u32(c, oj, "num_threadblocks", true, 0, &o->num_threadblocks))
      return false;
  }
  if (!jkey_u32_array(c, oj, "semaphore_ids", false, &o->nsemaphore_ids, &o->semaphore_ids)) return false;
  if (!parse_redop(c, oj, &o->reduce_op)) return false;

  const cJSON* ic = jget(c, oj, "iter_context", cJSON_Object, false);
  const cJSON* inner = jget(c, oj, "ops", cJSON_Array, false);
  if (c->failed) return false;
  if (o->type != SHUNT_OP_PIPELINE) {
    if (ic || inner) {
      jfail(c, ic ? "iter_context" : "ops", "only a pipeline op may have this key");
      return false;
    }
    return true;
  }
  if (nested) {
    jfail(c, "name", "a pipeline inside a pipeline is not allowed");
    return false;
  }
  if (!ic) {
    jfail(c, "iter_context", "missing required key");
    return false;
  }
  static const char* const ick[] = {"unit_size", "num_chunks", NULL};
  size_t m = jpush_key(c, "iter_context");
  bool ok = jkeys(c, ic, ick) && jkey_u64(c, ic, "unit_size", true, 0, &o->unit_size) &&
            jkey_u32(c, ic, "num_chunks", true, 0, &o->num_chunks);
  jpop(c, m);
  if (!ok) return false;
  if (!inner) {
    jfail(c, "ops", "missing required key");
    return false;
  }
  m = jpush_key(c, "ops");
  parse_op_list(c, inner, true, &o->nops, &o->ops);
  jpop(c, m);
  return !c->failed;
}

void parse_op_list(struct jctx* c, const cJSON* arr, bool nested, uint32_t* n, struct shunt_plan_op** out) {
  uint32_t cnt = jcount(arr);
  struct shunt_plan_op* v = shunt_arena_calloc(c->arena, cnt, sizeof(*v));
  *n = 0;
  *out = NULL;
  if (!v) {
    jfail(c, NULL, "out of memory");
    return;
  }
  uint32_t i = 0;
  for (const cJSON* e = arr->child; e && !c->failed; e = e->next, i++) {
    size_t m = jpush_index(c, i);
    v[i].json_index = i;
    parse_op(c, e, nested, &v[i]);
    jpop(c, m);
  }
  *n = cnt;
  *out = v;
}
