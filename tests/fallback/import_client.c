/* A client library for scripts/check-nccl-imports.sh: it imports ncclAllReduce and, built with
 * IMPORT_MISSING, a function no NCCL defines. Never run, only inspected. */
#include <nccl.h>

#ifdef IMPORT_MISSING
ncclResult_t ncclNoSuchFunction(int x);
#endif

int client_entry(void* buf) {
  int r = (int)ncclAllReduce(buf, buf, 1, ncclFloat, ncclSum, (ncclComm_t)0, (cudaStream_t)0);
#ifdef IMPORT_MISSING
  r += (int)ncclNoSuchFunction(r);
#endif
  return r;
}
