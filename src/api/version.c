/* The calls that must answer even without a real NCCL: version, error strings, last error. */
#include <nccl.h>
#include <stdatomic.h>

#include "api/export.h"
#include "api/unavailable.h"
#include "fallback/real_nccl.h"
#include "util/log.h"

extern _Atomic unsigned long shunt_real_failure_mark;

SHUNT_EXPORT ncclResult_t pncclGetVersion(int* version) {
  if (!version) {
    SHUNT_WARN("ncclGetVersion: version argument is NULL");
    return ncclInvalidArgument;
  }
  const struct shunt_real_nccl* real = shunt_real_nccl();
  /* Clients gate features on this code, so it is the real library's when there is one. */
  *version = real ? real->version : NCCL_VERSION_CODE;
  return ncclSuccess;
}
SHUNT_ALIAS(ncclGetVersion, ncclResult_t, (int* version))

static const char* own_error_string(ncclResult_t r) {
  switch ((int)r) {
    case 0: return "no error";
    case 1: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case 2: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case 3: return "internal error - please report this issue to the NCCL developers";
    case 4: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case 5: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case 6: return "remote process exited or there was a network error";
    case 7: return "NCCL operation in progress";
    case 8: return "timeout";
    default: return "unknown result code";
  }
}

SHUNT_EXPORT const char* pncclGetErrorString(ncclResult_t result) {
  const struct shunt_real_nccl* real = shunt_real_nccl();
  if (real && real->ncclGetErrorString) return real->ncclGetErrorString(result);
  return own_error_string(result);
}
SHUNT_ALIAS(ncclGetErrorString, const char*, (ncclResult_t result))

SHUNT_EXPORT const char* pncclGetLastError(ncclComm_t comm) {
  /* Per thread, so the returned text stays valid while other threads log. */
  static _Thread_local char buf[1024];
  const struct shunt_real_nccl* real = shunt_real_nccl();
  unsigned long seq = shunt_last_error_seq();
  /* The newer of shunt's last WARN and the real library's last failure wins. */
  if (real && real->ncclGetLastError && (seq == 0 || shunt_real_failure_mark > seq))
    return real->ncclGetLastError(comm);
  return shunt_last_error(buf, sizeof(buf));
}
SHUNT_ALIAS(ncclGetLastError, const char*, (ncclComm_t comm))
