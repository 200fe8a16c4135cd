/* What a call answers when the real NCCL cannot serve it. */
#ifndef SHUNT_API_UNAVAILABLE_H
#define SHUNT_API_UNAVAILABLE_H

#include <nccl.h>

#include "fallback/real_nccl.h"

/* Logs why `name` cannot be forwarded (no real library, or the loaded one lacks the
 * function) and returns the matching error code: ncclSystemError or ncclInvalidUsage. */
ncclResult_t shunt_unavailable(const char* name, const struct shunt_real_nccl* real);

/* Logs that `name` cannot take a communicator shunt made without NCCL; ncclInvalidUsage. */
ncclResult_t shunt_own_handle_unsupported(const char* name);

/* Remembers that the real library reported a failure, so ncclGetLastError prefers its text
 * over an older shunt message. */
void shunt_note_real_failure(void);

/* The body of a pass-through: returns the real library's `name` applied to `args` (a
 * parenthesised argument list), or the reason it cannot be reached; failures are noted. */
#define SHUNT_FORWARD(name, args)                                                       \
  do {                                                                                  \
    const struct shunt_real_nccl* real_ = shunt_real_nccl();                            \
    if (__builtin_expect(!real_ || !real_->name, 0)) return shunt_unavailable(#name, real_); \
    ncclResult_t rc_ = real_->name args;                                                \
    if (__builtin_expect(rc_ != ncclSuccess && rc_ != ncclInProgress, 0)) shunt_note_real_failure(); \
    return rc_;                                                                         \
  } while (0)

#endif
