/* The cheapest possible NCCL for measuring what forwarding adds: each function only writes
 * its answer. Not a test double: it serves nothing else. */
#include <nccl.h>
#include <stdint.h>

#include "fallback/nccl_compat.h"

__attribute__((visibility("default"))) ncclResult_t ncclGetVersion(int* version) {
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

__attribute__((visibility("default"))) ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  (void)comm;
  *count = 1;
  return ncclSuccess;
}

/* Newer than 2.28: a pass-through that checks its communicator, and one that takes none. */
__attribute__((visibility("default"))) ncclResult_t ncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat,
                                                                     uint64_t* value) {
  (void)comm;
  (void)stat;
  *value = 1;
  return ncclSuccess;
}

__attribute__((visibility("default"))) ncclResult_t ncclParamGetI32(ncclParamHandle_t h, int32_t* out) {
  (void)h;
  *out = 1;
  return ncclSuccess;
}
