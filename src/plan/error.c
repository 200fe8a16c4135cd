#include "plan/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void shunt_plan_errors_free(struct shunt_plan_errors* e) {
  free(e->v);
  memset(e, 0, sizeof(*e));
}

void shunt_plan_errors_clear(struct shunt_plan_errors* e) {
  e->n = 0;
  e->dropped = 0;
}

static struct shunt_plan_error* slot(struct shunt_plan_errors* e) {
  if (e->n >= SHUNT_PLAN_ERRORS_MAX) return NULL;
  if (e->n == e->cap) {
    uint32_t cap = e->cap ? e->cap * 2 : 8;
    struct shunt_plan_error* v = realloc(e->v, cap * sizeof(*v));
    if (!v) return NULL;
    e->v = v;
    e->cap = cap;
  }
  return &e->v[e->n++];
}

void shunt_plan_error_add(struct shunt_plan_errors* e, const char* file, const char* path, const char* fmt,
                          ...) {
  struct shunt_plan_error* s = slot(e);
  if (!s) {
    e->dropped++;
    return;
  }
  snprintf(s->file, sizeof(s->file), "%s", file ? file : "");
  snprintf(s->path, sizeof(s->path), "%s", path ? path : "");
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s->reason, sizeof(s->reason), fmt, ap);
  va_end(ap);
}

void shunt_plan_errors_append(struct shunt_plan_errors* dst, const struct shunt_plan_errors* src) {
  for (uint32_t i = 0; i < src->n; i++) {
    struct shunt_plan_error* s = slot(dst);
    if (!s) {
      dst->dropped += src->n - i;
      break;
    }
    *s = src->v[i];
  }
  dst->dropped += src->dropped;
}

const char* shunt_plan_error_format(const struct shunt_plan_error* err, char* buf, size_t len) {
  if (err->path[0])
    snprintf(buf, len, "%s: %s: %s", err->file, err->path, err->reason);
  else
    snprintf(buf, len, "%s: %s", err->file, err->reason);
  return buf;
}
