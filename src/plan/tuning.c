/* The tuning-file reader. One rule per line: NAME RANKS MIN MAX | NAME RANKS disable. */
#include "plan/tuning.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/status.h"

bool shunt_tuning_parse_size(const char* s, uint64_t* out) {
  if (strcmp(s, "max") == 0) {
    *out = UINT64_MAX;
    return true;
  }
  uint64_t v = 0;
  size_t i = 0;
  if (s[0] < '0' || s[0] > '9') return false;
  for (; s[i] >= '0' && s[i] <= '9'; i++) {
    unsigned d = (unsigned)(s[i] - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  unsigned shift = 0;
  if (s[i]) {
    switch (s[i]) {
      case 'K':
      case 'k':
        shift = 10;
        break;
      case 'M':
      case 'm':
        shift = 20;
        break;
      case 'G':
      case 'g':
        shift = 30;
        break;
      case 'T':
      case 't':
        shift = 40;
        break;
      default:
        return false;
    }
    if (s[i + 1]) return false;
  }
  if (shift && v > (UINT64_MAX >> shift)) return false;
  *out = v << shift;
  return true;
}

const char* shunt_tuning_format_size(uint64_t v, char* buf, size_t len) {
  static const char units[] = "KMGT";
  if (v == UINT64_MAX) {
    snprintf(buf, len, "max");
    return buf;
  }
  int u = -1;
  uint64_t x = v;
  while (x && x % 1024 == 0 && u < 3) {
    x /= 1024;
    u++;
  }
  if (u >= 0)
    snprintf(buf, len, "%" PRIu64 "%c", x, units[u]);
  else
    snprintf(buf, len, "%" PRIu64, v);
  return buf;
}

/* Splits a line (modified in place) into at most 8 whitespace-separated words. */
static int words(char* s, char** w) {
  int n = 0;
  while (*s) {
    while (*s == ' ' || *s == '\t' || *s == '\r') s++;
    if (!*s || *s == '#') break;
    if (n == 8) return 9;
    w[n++] = s;
    while (*s && *s != ' ' && *s != '\t' && *s != '\r') s++;
    if (*s) *s++ = '\0';
  }
  return n;
}

static bool add_rule(struct shunt_tuning* t, const struct shunt_tuning_rule* r) {
  struct shunt_tuning_rule* v = realloc(t->rules, (t->n + 1) * sizeof(*v));
  if (!v) return false;
  t->rules = v;
  t->rules[t->n++] = *r;
  return true;
}

unsigned shunt_tuning_parse(const char* text, size_t len, const char* label, struct shunt_tuning* out,
                            struct shunt_plan_errors* errs) {
  unsigned bad = 0;
  if (!out->path) out->path = strdup(label ? label : "(tuning)");
  const char* file = out->path ? out->path : "(tuning)";
  uint32_t lineno = 0;
  size_t pos = 0;
  while (pos < len) {
    size_t end = pos;
    while (end < len && text[end] != '\n') end++;
    lineno++;
    char line[1024];
    char where[sizeof(line) + 32]; /* "FILE:LINE", the usual spelling for a line of a file */
    snprintf(where, sizeof(where), "%.900s:%u", file, lineno);
    size_t n = end - pos;
    const char* src = text + pos;
    pos = end + 1;
    if (n >= sizeof(line)) {
      shunt_plan_error_add(errs, where, "", "line longer than %zu characters; skipped", sizeof(line) - 1);
      bad++;
      continue;
    }
    memcpy(line, src, n);
    line[n] = '\0';
    if (memchr(line, '\0', n)) {
      shunt_plan_error_add(errs, where, "", "NUL byte in line; skipped");
      bad++;
      continue;
    }
    char* w[9];
    int nw = words(line, w);
    if (nw == 0) continue;
    struct shunt_tuning_rule r = {.line = lineno};
    const char* why = NULL;
    if (nw != 3 && nw != 4)
      why = "expected NAME RANKS MIN MAX or NAME RANKS disable";
    else if (strlen(w[0]) >= sizeof(r.name))
      why = "plan name too long";
    if (!why) {
      snprintf(r.name, sizeof(r.name), "%s", w[0]);
      if (strcmp(w[1], "*") != 0) {
        char* e;
        errno = 0;
        unsigned long v = strtoul(w[1], &e, 10);
        if (errno || *e || w[1][0] < '1' || w[1][0] > '9' || v > 1u << 20)
          why = "RANKS must be a rank count (1..1048576) or *";
        else
          r.nranks = (uint32_t)v;
      }
    }
    if (!why && nw == 3) {
      if (strcmp(w[2], "disable") == 0)
        r.disable = true;
      else
        why = "expected MIN MAX or the word disable after RANKS";
    }
    if (!why && nw == 4) {
      if (!shunt_tuning_parse_size(w[2], &r.min))
        why = "MIN is not a size (digits with an optional K/M/G/T suffix, or max)";
      else if (!shunt_tuning_parse_size(w[3], &r.max))
        why = "MAX is not a size (digits with an optional K/M/G/T suffix, or max)";
      else if (r.min > r.max)
        why = "MIN is greater than MAX";
    }
    if (why) {
      shunt_plan_error_add(errs, where, "", "%s; skipped", why);
      bad++;
      continue;
    }
    if (!add_rule(out, &r)) {
      shunt_plan_error_add(errs, where, "", "out of memory; skipped");
      bad++;
    }
  }
  return bad;
}

int shunt_tuning_load(const char* path, struct shunt_tuning* out, struct shunt_plan_errors* errs) {
  FILE* f = fopen(path, "rb");
  if (!f) {
    int e = errno;
    shunt_plan_error_add(errs, path, "", "cannot open tuning file: %s", strerror(e));
    return shunt_errno_status(e);
  }
  size_t cap = 4096, n = 0;
  char* buf = malloc(cap);
  while (buf) {
    size_t r = fread(buf + n, 1, cap - n, f);
    n += r;
    if (n < cap) break;
    if (cap >= ((size_t)16 << 20)) {
      free(buf);
      buf = NULL;
      fclose(f);
      shunt_plan_error_add(errs, path, "", "tuning file larger than 16 MiB");
      return SHUNT_E_INVALID;
    }
    char* nb = realloc(buf, cap * 2);
    if (!nb) {
      free(buf);
      buf = NULL;
      break;
    }
    buf = nb;
    cap *= 2;
  }
  bool rerr = ferror(f);
  fclose(f);
  if (!buf || rerr) {
    free(buf);
    shunt_plan_error_add(errs, path, "", "cannot read tuning file");
    return buf ? SHUNT_E_SYSTEM : SHUNT_E_NOMEM;
  }
  free(out->path);
  out->path = strdup(path);
  int bad = (int)shunt_tuning_parse(buf, n, path, out, errs);
  free(buf);
  return bad;
}

void shunt_tuning_free(struct shunt_tuning* t) {
  free(t->rules);
  free(t->path);
  memset(t, 0, sizeof(*t));
}

const struct shunt_tuning_rule* shunt_tuning_find(const struct shunt_tuning* t, const char* name,
                                                  uint32_t nranks) {
  const struct shunt_tuning_rule *exact = NULL, *any = NULL;
  for (uint32_t i = 0; t && i < t->n; i++) {
    const struct shunt_tuning_rule* r = &t->rules[i];
    if (strcmp(r->name, name) != 0) continue;
    if (r->nranks == nranks)
      exact = r;
    else if (r->nranks == 0)
      any = r;
  }
  return exact ? exact : any;
}
