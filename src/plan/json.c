/* Path-aware readers over cJSON trees for the plan parser. */
#include "plan/json.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"

static bool num_char(char ch) {
  return (ch >= '0' && ch <= '9') || ch == '-' || ch == '+' || ch == 'e' || ch == 'E' || ch == '.';
}

/* Numbers the tree's number nodes in document order (cJSON keeps children in order). */
static void number_nodes(cJSON* n, uint32_t* next) {
  for (; n; n = n->next) {
    if (cJSON_IsNumber(n)) n->valueint = (int)(*next)++;
    if (n->child) number_nodes(n->child, next);
  }
}

bool jctx_index_numbers(struct jctx* c, cJSON* root) {
  /* Same lexing as cJSON: strings end at an unescaped quote; outside strings a '-' or digit
   * starts a number. The parse succeeded, so every such start is a number value. */
  uint32_t n = 0, cap = 0;
  uint32_t* off = NULL;
  bool in_str = false;
  for (size_t i = 0; i < c->len; i++) {
    char ch = c->text[i];
    if (in_str) {
      if (ch == '\\')
        i++;
      else if (ch == '"')
        in_str = false;
      continue;
    }
    if (ch == '"') {
      in_str = true;
    } else if (ch == '-' || (ch >= '0' && ch <= '9')) {
      if (n == cap) {
        uint32_t ncap = cap ? cap * 2 : 256;
        uint32_t* o = realloc(off, ncap * sizeof(*o));
        if (!o) {
          free(off);
          jfail(c, NULL, "out of memory indexing numbers");
          return false;
        }
        off = o;
        cap = ncap;
      }
      off[n++] = (uint32_t)i;
      while (i + 1 < c->len && num_char(c->text[i + 1])) i++;
    }
  }
  c->num_off = off;
  c->nnum = n;
  uint32_t seen = 0;
  number_nodes(root, &seen);
  if (seen != n) {
    jfail(c, NULL, "internal: %u number nodes but %u number tokens", seen, n);
    return false;
  }
  return true;
}

/* The path grows by a component for every node the parser enters (millions in a plan folder):
 * appended by hand, not formatted, and cut short (never overrun) when it fills the buffer. */
static void path_append(struct jctx* c, const char* s, size_t n) {
  size_t room = sizeof(c->path) - 1 - c->plen;
  if (n > room) n = room;
  memcpy(c->path + c->plen, s, n);
  c->plen += n;
  c->path[c->plen] = '\0';
}

size_t jpush_key(struct jctx* c, const char* key) {
  size_t mark = c->plen;
  if (c->plen) path_append(c, ".", 1);
  path_append(c, key, strlen(key));
  return mark;
}

size_t jpush_index(struct jctx* c, uint32_t i) {
  size_t mark = c->plen;
  char digits[12], *d = digits + sizeof(digits);
  *--d = ']';
  do *--d = (char)('0' + i % 10);
  while (i /= 10);
  *--d = '[';
  path_append(c, d, (size_t)(digits + sizeof(digits) - d));
  return mark;
}

void jpop(struct jctx* c, size_t mark) {
  c->plen = mark;
  c->path[mark] = '\0';
}

void jfail(struct jctx* c, const char* key, const char* fmt, ...) {
  if (c->failed) return;
  c->failed = true;
  char path[sizeof(c->path) + 64];
  snprintf(path, sizeof(path), "%s%s%s", c->path, key && c->plen ? "." : "", key ? key : "");
  char reason[384];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(reason, sizeof(reason), fmt, ap);
  va_end(ap);
  shunt_plan_error_add(c->errs, c->file, path, "%s", reason);
}

/* Keys only the legacy (MSCCL++ <= v0.7) format uses. */
static const char* const legacy_keys[] = {
    "inputChunks", "outputChunks", "scratchChunks", "chunkGroups", "connectedTo", "rankGroups",     "i_buff",
    "o_buff",      "i_cids",       "o_cids",        "srcbuff",     "dstbuff",     "srcoff",         "dstoff",
    "srcs",        "dsts",         "ctype",         "cids",        "cnt",         "nthread_blocks", NULL};

/* Key comparisons run for every key of every node: the first byte decides most of them
 * without a call. */
static bool same_key(const char* a, const char* b) {
  return a[0] == b[0] && strcmp(a, b) == 0;
}

static bool in_list(const char* s, const char* const* list) {
  for (; *list; list++)
    if (same_key(s, *list)) return true;
  return false;
}

static int cmp_str(const void* a, const void* b) {
  return strcmp(*(const char* const*)a, *(const char* const*)b);
}

bool jkeys(struct jctx* c, const cJSON* obj, const char* const* known) {
  if (c->failed) return false;
  uint32_t n = 0;
  for (const cJSON* k = obj->child; k; k = k->next) {
    if (!k->string) continue;
    n++;
    /* A known key is no legacy one (the lists are disjoint): only the others are looked up. */
    if (!in_list(k->string, known) && in_list(k->string, legacy_keys)) {
      jfail(c, NULL,
            "legacy MSCCL++ plan format (v0.7 or older; key '%s'): not supported, regenerate the plan with "
            "MSCCL++ v0.8 or newer",
            k->string);
      return false;
    }
  }
  /* Duplicates: cJSON keeps both and lookups see the first, so the file would mean
   * different things to different readers; reject. Quadratic for small objects. */
  if (n <= 32) {
    for (const cJSON* a = obj->child; a; a = a->next)
      for (const cJSON* b = a->next; b; b = b->next)
        if (a->string && b->string && strcmp(a->string, b->string) == 0) {
          jfail(c, a->string, "duplicate key");
          return false;
        }
  } else {
    const char** names = malloc(n * sizeof(*names));
    if (!names) {
      jfail(c, NULL, "out of memory");
      return false;
    }
    uint32_t i = 0;
    for (const cJSON* k = obj->child; k; k = k->next)
      if (k->string) names[i++] = k->string;
    qsort(names, n, sizeof(*names), cmp_str);
    for (i = 1; i < n; i++)
      if (strcmp(names[i - 1], names[i]) == 0) {
        jfail(c, names[i], "duplicate key");
        free(names);
        return false;
      }
    free(names);
  }
  for (const cJSON* k = obj->child; k; k = k->next)
    if (k->string && !in_list(k->string, known))
      SHUNT_INFO(SHUNT_PLAN, "%s: %s%s%s: unknown key ignored", c->file, c->path, c->plen ? "." : "",
                 k->string);
  return true;
}

static const char* type_name(const cJSON* n) {
  if (cJSON_IsString(n)) return "a string";
  if (cJSON_IsNumber(n)) return "a number";
  if (cJSON_IsArray(n)) return "an array";
  if (cJSON_IsObject(n)) return "an object";
  if (cJSON_IsBool(n)) return "a boolean";
  if (cJSON_IsNull(n)) return "null";
  return "an invalid value";
}

static const char* want_name(int type) {
  switch (type) {
    case cJSON_String:
      return "a string";
    case cJSON_Number:
      return "an integer";
    case cJSON_Array:
      return "an array";
    case cJSON_Object:
      return "an object";
    default:
      return "a boolean";
  }
}

const cJSON* jget(struct jctx* c, const cJSON* obj, const char* key, int type, bool required) {
  if (c->failed) return NULL;
  const cJSON* v = NULL;
  for (const cJSON* k = obj->child; k; k = k->next)
    if (k->string && same_key(k->string, key)) {
      v = k;
      break;
    }
  if (!v) {
    if (required) jfail(c, key, "missing required key");
    return NULL;
  }
  if ((v->type & 0xff & type) == 0) {
    jfail(c, key, "expected %s, got %s", want_name(type), type_name(v));
    return NULL;
  }
  return v;
}

/* The JSON text of a number node and its length. */
static const char* num_text(struct jctx* c, const cJSON* node, size_t* len) {
  uint32_t k = (uint32_t)node->valueint;
  if (k >= c->nnum) {
    *len = 0;
    return "";
  }
  const char* s = c->text + c->num_off[k];
  size_t n = 0;
  while (c->num_off[k] + n < c->len && num_char(s[n])) n++;
  *len = n;
  return s;
}

/* Parses an integer literal exactly: sign, magnitude (saturated at UINT64_MAX + overflow flag). */
static bool parse_int_text(const char* s, size_t n, bool* neg, uint64_t* mag, bool* overflow) {
  size_t i = 0;
  *neg = false;
  *overflow = false;
  *mag = 0;
  if (i < n && s[i] == '-') {
    *neg = true;
    i++;
  }
  if (i == n) return false;
  for (; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') return false;
    unsigned d = (unsigned)(s[i] - '0');
    if (*mag > (UINT64_MAX - d) / 10)
      *overflow = true;
    else
      *mag = *mag * 10 + d;
  }
  return true;
}

static void fail_num(struct jctx* c, const char* what, const char* fmt, const char* s, size_t n,
                     const char* range) {
  char buf[72];
  snprintf(buf, sizeof(buf), "%.*s", (int)(n < 64 ? n : 64), s);
  char reason[256];
  snprintf(reason, sizeof(reason), fmt, buf);
  jfail(c, what, "%s%s", reason, range);
}

bool jnum_u64(struct jctx* c, const cJSON* node, const char* what, uint64_t lo, uint64_t hi, uint64_t* out) {
  if (c->failed) return false;
  if (!cJSON_IsNumber(node)) {
    jfail(c, what, "expected an integer, got %s", type_name(node));
    return false;
  }
  size_t n;
  const char* s = num_text(c, node, &n);
  bool neg, ovf;
  uint64_t mag;
  /* The allowed range is formatted only for an error: every number of every plan comes here. */
  char range[96];
#define RANGE_U64() snprintf(range, sizeof(range), " (allowed %" PRIu64 "..%" PRIu64 ")", lo, hi)
  if (!parse_int_text(s, n, &neg, &mag, &ovf)) {
    fail_num(c, what, "expected an integer, got %s", s, n, "");
    return false;
  }
  if (neg && (mag != 0 || ovf)) {
    RANGE_U64();
    fail_num(c, what, "negative value %s", s, n, range);
    return false;
  }
  if (ovf || mag < lo || mag > hi) {
    RANGE_U64();
    fail_num(c, what, "value %s out of range", s, n, range);
    return false;
  }
#undef RANGE_U64
  *out = mag;
  return true;
}

bool jnum_i64(struct jctx* c, const cJSON* node, const char* what, int64_t lo, int64_t hi, int64_t* out) {
  if (c->failed) return false;
  if (!cJSON_IsNumber(node)) {
    jfail(c, what, "expected an integer, got %s", type_name(node));
    return false;
  }
  size_t n;
  const char* s = num_text(c, node, &n);
  bool neg, ovf;
  uint64_t mag;
  char range[96];
#define RANGE_I64() snprintf(range, sizeof(range), " (allowed %" PRId64 "..%" PRId64 ")", lo, hi)
  if (!parse_int_text(s, n, &neg, &mag, &ovf)) {
    fail_num(c, what, "expected an integer, got %s", s, n, "");
    return false;
  }
  int64_t v;
  if (ovf || mag > (uint64_t)INT64_MAX + (neg ? 1u : 0u)) {
    RANGE_I64();
    fail_num(c, what, "value %s out of range", s, n, range);
    return false;
  }
  v = neg ? (mag == (uint64_t)INT64_MAX + 1u ? INT64_MIN : -(int64_t)mag) : (int64_t)mag;
  if (v < lo || v > hi) {
    RANGE_I64();
    fail_num(c, what, neg && lo >= 0 ? "negative value %s" : "value %s out of range", s, n, range);
    return false;
  }
#undef RANGE_I64
  *out = v;
  return true;
}

bool jkey_u32(struct jctx* c, const cJSON* obj, const char* key, bool required, uint32_t def, uint32_t* out) {
  const cJSON* v = jget(c, obj, key, cJSON_Number, required);
  if (!v) {
    *out = def;
    return !c->failed;
  }
  uint64_t x;
  if (!jnum_u64(c, v, key, 0, UINT32_MAX, &x)) return false;
  *out = (uint32_t)x;
  return true;
}

bool jkey_u64(struct jctx* c, const cJSON* obj, const char* key, bool required, uint64_t def, uint64_t* out) {
  const cJSON* v = jget(c, obj, key, cJSON_Number, required);
  if (!v) {
    *out = def;
    return !c->failed;
  }
  return jnum_u64(c, v, key, 0, UINT64_MAX, out);
}

bool jkey_i32(struct jctx* c, const cJSON* obj, const char* key, bool required, int32_t def, int32_t* out) {
  const cJSON* v = jget(c, obj, key, cJSON_Number, required);
  if (!v) {
    *out = def;
    return !c->failed;
  }
  int64_t x;
  if (!jnum_i64(c, v, key, INT32_MIN, INT32_MAX, &x)) return false;
  *out = (int32_t)x;
  return true;
}

bool jkey_bool(struct jctx* c, const cJSON* obj, const char* key, bool required, bool def, bool* out) {
  const cJSON* v = jget(c, obj, key, cJSON_True | cJSON_False, required);
  *out = v ? cJSON_IsTrue(v) : def;
  return !c->failed;
}

bool jkey_str(struct jctx* c, const cJSON* obj, const char* key, bool required, const char** out) {
  const cJSON* v = jget(c, obj, key, cJSON_String, required);
  *out = NULL;
  if (!v) return !c->failed;
  *out = shunt_arena_strdup(c->arena, v->valuestring);
  if (!*out) jfail(c, key, "out of memory");
  return !c->failed;
}

uint32_t jcount(const cJSON* arr) {
  uint32_t n = 0;
  for (const cJSON* e = arr ? arr->child : NULL; e; e = e->next) n++;
  return n;
}

bool jkey_u32_array(struct jctx* c, const cJSON* obj, const char* key, bool required, uint32_t* n,
                    uint32_t** out) {
  *n = 0;
  *out = NULL;
  const cJSON* a = jget(c, obj, key, cJSON_Array, required);
  if (!a) return !c->failed;
  uint32_t cnt = jcount(a);
  uint32_t* v = shunt_arena_calloc(c->arena, cnt, sizeof(*v));
  if (!v) {
    jfail(c, key, "out of memory");
    return false;
  }
  size_t m = jpush_key(c, key);
  uint32_t i = 0;
  for (const cJSON* e = a->child; e; e = e->next, i++) {
    size_t m2 = jpush_index(c, i);
    uint64_t x;
    bool ok = jnum_u64(c, e, NULL, 0, INT32_MAX, &x);
    jpop(c, m2);
    if (!ok) break;
    v[i] = (uint32_t)x;
  }
  jpop(c, m);
  if (c->failed) return false;
  *n = cnt;
  *out = v;
  return true;
}
