/* Reading SHUNT_* configuration variables.
 *
 * Promises: an unset variable yields the default silently; a set but invalid value yields
 * a WARN naming the variable and the accepted values, and then the default. Aliases (older
 * names such as MSCCLPP_*) are consulted when the main name is unset. */
#ifndef SHUNT_UTIL_ENV_H
#define SHUNT_UTIL_ENV_H

#include <stdint.h>

/* The raw value of name, else of alias (may be NULL), else NULL. Empty strings count as unset. */
const char* shunt_env_str(const char* name, const char* alias);

/* One of choices[0..n) (case-insensitive); returns its index, or def when unset or invalid. */
int shunt_env_choice(const char* name, const char* alias, const char* const* choices, int n, int def);

/* A decimal integer in [lo, hi]; def when unset or invalid. */
int64_t shunt_env_int(const char* name, int64_t def, int64_t lo, int64_t hi);

/* A boolean (0/1, true/false, yes/no, on/off); def when unset or invalid. */
int shunt_env_bool(const char* name, int def);

#endif
