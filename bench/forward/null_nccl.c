/* The cheapest possible NCCL for measuring what forwarding adds: ncclCommCount only writes
 * its answer. Not a test double: it serves nothing else. */
#include <nccl.h>

__attribute__((visibility("default"))) ncclResult_t ncclGetVersion(int* version) {
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

__attribute__((visibility("default"))) ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  (void)comm;
  *count = 1;
  return ncclSuccess;
}
