/* SHUNT_* environment parsing with one rule for bad values: WARN, then the default. */
#include "util/env.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util/log.h"

const char* shunt_env_str(const char* name, const char* alias) {
  const char* v = getenv(name);
  if ((!v || !*v) && alias) v = getenv(alias);
  return (v && *v) ? v : NULL;
}

int shunt_env_choice(const char* name, const char* alias, const char* const* choices, int n, int def) {
  const char* v = shunt_env_str(name, alias);
  if (!v) return def;
  for (int i = 0; i < n; i++)
    if (strcasecmp(v, choices[i]) == 0) return i;
  char accepted[512];
  size_t o = 0;
  accepted[0] = '\0';
  for (int i = 0; i < n && o < sizeof(accepted); i++)
    o += (size_t)snprintf(accepted + o, sizeof(accepted) - o, "%s%s", i ? ", " : "", choices[i]);
  SHUNT_WARN("%s=%.64s is not valid (accepted: %s); using %s", name, v, accepted, choices[def]);
  return def;
}

int64_t shunt_env_int(const char* name, int64_t def, int64_t lo, int64_t hi) {
  const char* v = shunt_env_str(name, NULL);
  if (!v) return def;
  char* end;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (errno || end == v || *end || x < lo || x > hi) {
    SHUNT_WARN("%s=%.64s is not valid (accepted: an integer from %" PRId64 " to %" PRId64 "); using %" PRId64,
               name, v, lo, hi, def);
    return def;
  }
  return x;
}

int shunt_env_bool(const char* name, int def) {
  static const char* const names[] = {"0", "1", "false", "true", "no", "yes", "off", "on"};
  const char* v = shunt_env_str(name, NULL);
  if (!v) return def;
  for (int i = 0; i < 8; i++)
    if (strcasecmp(v, names[i]) == 0) return i % 2;
  SHUNT_WARN("%s=%.64s is not valid (accepted: 0/1, false/true, no/yes, off/on); using %d", name, v, def);
  return def;
}
