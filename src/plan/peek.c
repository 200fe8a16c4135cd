/* The outline of a plan (peek.h): one pass over the top-level object, skipping every value
 * but "gpus" (counted) and "name" (copied). */
#include "plan/peek.h"

#include <string.h>

struct scan {
  const char* s;
  size_t at, len;
};

static void ws(struct scan* c) {
  while (c->at < c->len) {
    char ch = c->s[c->at];
    if (ch != ' ' && ch != '\t' && ch != '\n' && ch != '\r') return;
    c->at++;
  }
}

/* At an opening quote: moves past the closing one. *escaped: the string held a backslash. */
static bool skip_string(struct scan* c, bool* escaped) {
  if (escaped) *escaped = false;
  for (c->at++; c->at < c->len; c->at++) {
    char ch = c->s[c->at];
    if (ch == '\\') {
      if (escaped) *escaped = true;
      c->at++;
    } else if (ch == '"') {
      c->at++;
      return true;
    }
  }
  return false;
}

/* Moves past one value: a string, an object or array (brackets counted, strings inside
 * skipped whole), or a scalar up to the next delimiter. */
static bool skip_value(struct scan* c) {
  if (c->at >= c->len) return false;
  char ch = c->s[c->at];
  if (ch == '"') return skip_string(c, NULL);
  if (ch == '{' || ch == '[') {
    size_t depth = 0;
    while (c->at < c->len) {
      ch = c->s[c->at];
      if (ch == '"') {
        if (!skip_string(c, NULL)) return false;
        continue;
      }
      if (ch == '{' || ch == '[') depth++;
      if (ch == '}' || ch == ']') {
        if (depth == 0) return false;
        if (--depth == 0) {
          c->at++;
          return true;
        }
      }
      c->at++;
    }
    return false;
  }
  size_t from = c->at;
  while (c->at < c->len) {
    ch = c->s[c->at];
    if (ch == ',' || ch == '}' || ch == ']' || ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r') break;
    c->at++;
  }
  return c->at > from;
}

/* At '[': counts the elements and moves past the closing bracket. */
static bool count_array(struct scan* c, uint32_t* n) {
  *n = 0;
  c->at++;
  ws(c);
  if (c->at < c->len && c->s[c->at] == ']') {
    c->at++;
    return true;
  }
  for (;;) {
    ws(c);
    if (!skip_value(c)) return false;
    (*n)++;
    ws(c);
    if (c->at >= c->len) return false;
    char ch = c->s[c->at++];
    if (ch == ']') return true;
    if (ch != ',') return false;
  }
}

static bool key_is(const struct scan* c, size_t from, size_t to, const char* k) {
  size_t n = strlen(k);
  return to - from == n && memcmp(c->s + from, k, n) == 0;
}

bool shunt_plan_peek(const char* text, size_t len, struct shunt_plan_peek* out) {
  struct scan c = {text, 0, len};
  bool have_gpus = false, have_name = false;
  out->ngpus = 0;
  out->name[0] = '\0';
  ws(&c);
  if (c.at >= len || text[c.at] != '{') return false;
  c.at++;
  ws(&c);
  if (c.at < len && text[c.at] == '}') return false;
  for (;;) {
    ws(&c);
    if (c.at >= len || text[c.at] != '"') return false;
    size_t kfrom = c.at + 1;
    bool escaped;
    if (!skip_string(&c, &escaped) || escaped) return false;
    size_t kto = c.at - 1;
    ws(&c);
    if (c.at >= len || text[c.at] != ':') return false;
    c.at++;
    ws(&c);
    if (c.at >= len) return false;
    if (key_is(&c, kfrom, kto, "gpus")) {
      if (have_gpus || text[c.at] != '[' || !count_array(&c, &out->ngpus)) return false;
      have_gpus = true;
    } else if (key_is(&c, kfrom, kto, "name") && text[c.at] == '"') {
      size_t vfrom = c.at + 1;
      if (have_name || !skip_string(&c, &escaped) || escaped) return false;
      size_t n = c.at - 1 - vfrom;
      if (n >= sizeof(out->name)) return false;
      memcpy(out->name, text + vfrom, n);
      out->name[n] = '\0';
      have_name = true;
    } else if (!skip_value(&c)) {
      return false;
    }
    ws(&c);
    if (c.at >= len) return false;
    char ch = text[c.at++];
    if (ch == '}') break;
    if (ch != ',') return false;
  }
  ws(&c);
  return have_gpus && c.at == len;
}
