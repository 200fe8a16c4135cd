/* The real NCCL: found, loaded and bound once, at first need.
 *
 * Promises: the library is loaded so that its calls of its own API stay inside it (it is
 * opened with RTLD_DEEPBIND; builds with AddressSanitizer, which refuses that flag, open it
 * without and rely on shunt's pass-through forwarders). shunt itself is never chosen,
 * whatever its file is called. Every table entry is the real library's function or NULL
 * when the loaded library lacks it. */
#ifndef SHUNT_FALLBACK_REAL_NCCL_H
#define SHUNT_FALLBACK_REAL_NCCL_H

#include "fallback/nccl_funcs.h"

struct shunt_real_nccl {
#define SHUNT_SLOT_R(who, name, params, args) ncclResult_t(*name) params;
#define SHUNT_SLOT_S(who, ret, name, params, args, fail) ret(*name) params;
#define SHUNT_SLOT_V(who, name, params, args) void(*name) params;
  SHUNT_NCCL_ALL_FUNCS(SHUNT_SLOT_R, SHUNT_SLOT_S, SHUNT_SLOT_V)
#undef SHUNT_SLOT_R
#undef SHUNT_SLOT_S
#undef SHUNT_SLOT_V
  const char* path; /* absolute path of the loaded file */
  int version;      /* its ncclGetVersion code */
};

const struct shunt_real_nccl* shunt_real_nccl_load_slow(void);

extern const struct shunt_real_nccl* _Atomic shunt_real_nccl_table;

/* The real library, loading it on first call; NULL when none could be loaded (the reason,
 * naming every path tried, was logged as a WARN and is the last error). Thread-safe. */
static inline const struct shunt_real_nccl* shunt_real_nccl(void) {
  const struct shunt_real_nccl* t = shunt_real_nccl_table;
  return __builtin_expect(t != NULL, 1) ? t : shunt_real_nccl_load_slow();
}

/* Why loading failed ("" when it succeeded or was not tried yet). */
const char* shunt_real_nccl_error(void);

/* Whether the real library was opened with RTLD_DEEPBIND. */
int shunt_real_nccl_deepbind(void);

#endif
