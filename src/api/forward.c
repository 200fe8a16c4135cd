/* Pass-through exports: every NCCL function that shunt does not implement itself goes
 * straight to the real library with its arguments untouched. */
#include <nccl.h>

#include "api/export.h"
#include "api/handles.h"
#include "api/unavailable.h"
#include "fallback/nccl_funcs.h"
#include "fallback/real_nccl.h"

/* nccl.h marks ncclResetDebugInit deprecated; shunt must still export it. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

#define SHUNT_FWD_R_F(name, params, args)                                   \
  SHUNT_EXPORT ncclResult_t p##name params { SHUNT_FORWARD(name, args); }   \
  SHUNT_ALIAS(name, ncclResult_t, params)
#define SHUNT_FWD_S_F(ret, name, params, args, fail)                        \
  SHUNT_EXPORT ret p##name params {                                         \
    const struct shunt_real_nccl* real = shunt_real_nccl();                 \
    if (__builtin_expect(!real || !real->name, 0)) {                        \
      (void)shunt_unavailable(#name, real);                                 \
      return fail;                                                          \
    }                                                                       \
    return real->name args;                                                 \
  }                                                                         \
  SHUNT_ALIAS(name, ret, params)
#define SHUNT_FWD_V_F(name, params, args)                                   \
  SHUNT_EXPORT void p##name params {                                        \
    const struct shunt_real_nccl* real = shunt_real_nccl();                 \
    if (__builtin_expect(!real || !real->name, 0)) {                        \
      (void)shunt_unavailable(#name, real);                                 \
      return;                                                               \
    }                                                                       \
    real->name args;                                                        \
  }                                                                         \
  SHUNT_ALIAS(name, void, params)
/* As F, but a communicator that shunt made alone never reaches NCCL. */
#define SHUNT_FWD_R_FC(name, params, args)                                  \
  SHUNT_EXPORT ncclResult_t p##name params {                                \
    if (__builtin_expect(shunt_handle_is_own(comm), 0)) return shunt_own_handle_unsupported(#name); \
    SHUNT_FORWARD(name, args);                                              \
  }                                                                         \
  SHUNT_ALIAS(name, ncclResult_t, params)
#define SHUNT_FWD_S_FC(ret, name, params, args, fail)                       \
  SHUNT_EXPORT ret p##name params {                                         \
    if (__builtin_expect(shunt_handle_is_own(comm), 0)) {                   \
      (void)shunt_own_handle_unsupported(#name);                            \
      return fail;                                                          \
    }                                                                       \
    const struct shunt_real_nccl* real = shunt_real_nccl();                 \
    if (__builtin_expect(!real || !real->name, 0)) {                        \
      (void)shunt_unavailable(#name, real);                                 \
      return fail;                                                          \
    }                                                                       \
    return real->name args;                                                 \
  }                                                                         \
  SHUNT_ALIAS(name, ret, params)
#define SHUNT_FWD_R_O(name, params, args)
#define SHUNT_FWD_S_O(ret, name, params, args, fail)
#define SHUNT_FWD_V_O(name, params, args)

#define SHUNT_FWD_R(who, ...) SHUNT_FWD_R_##who(__VA_ARGS__)
#define SHUNT_FWD_S(who, ...) SHUNT_FWD_S_##who(__VA_ARGS__)
#define SHUNT_FWD_V(who, ...) SHUNT_FWD_V_##who(__VA_ARGS__)

SHUNT_NCCL_CORE_FUNCS(SHUNT_FWD_R, SHUNT_FWD_S, SHUNT_FWD_V)
SHUNT_NCCL_DEVICE_FUNCS(SHUNT_FWD_R, SHUNT_FWD_S, SHUNT_FWD_V)

/* NCCL exports this one without a pnccl twin; so does shunt. */
SHUNT_EXPORT void ncclResetDebugInitInternal(void) {
  const struct shunt_real_nccl* real = shunt_real_nccl();
  if (!real || !real->ncclResetDebugInitInternal) {
    (void)shunt_unavailable("ncclResetDebugInitInternal", real);
    return;
  }
  real->ncclResetDebugInitInternal();
}
