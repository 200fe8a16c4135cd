#include "api/unavailable.h"

#include <stdatomic.h>

#include "util/log.h"

/* Sequence number of shunt's last error at the moment the real NCCL last failed a call. */
_Atomic unsigned long shunt_real_failure_mark;

ncclResult_t shunt_unavailable(const char* name, const struct shunt_real_nccl* real) {
  if (!real) {
    SHUNT_WARN("%s: cannot be served: %s", name, shunt_real_nccl_error());
    return ncclSystemError;
  }
  SHUNT_WARN("%s: the loaded NCCL (%s, version %d) does not provide this function", name, real->path,
             real->version);
  return ncclInvalidUsage;
}

ncclResult_t shunt_own_handle_unsupported(const char* name) {
  SHUNT_WARN("%s: this communicator has no NCCL communicator behind it (SHUNT_FALLBACK=0, or NCCL could not "
             "make one), and shunt does not serve this call itself",
             name);
  return ncclInvalidUsage;
}

void shunt_note_real_failure(void) { shunt_real_failure_mark = shunt_last_error_seq() + 1; }
