/* Device memory shunt allocates itself (exec/backend.h: shunt_gpu_mem_alloc), for ncclMemAlloc:
 * cuMemAlloc memory, which CUDA IPC exports, so peers reach it zero-copy once registered. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "exec/backend.h"
#include "transport/cu.h"

/* Every allocation made here, so that ncclMemFree can tell its own from NCCL's. */
struct mem {
  void* p;
  struct mem* next;
};
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct mem* mems;

int shunt_gpu_mem_alloc(size_t bytes, void** out, char* err, size_t len) {
  const struct shunt_cu* cu = shunt_cu(err, len);
  if (!cu) return -1;
  CUcontext ctx = NULL;
  if (cu->CtxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx) {
    snprintf(err, len, "no current CUDA context in this thread");
    return -1;
  }
  struct mem* m = malloc(sizeof(*m));
  CUdeviceptr d = 0;
  CUresult e = m ? cu->MemAlloc(&d, bytes ? bytes : 1) : CUDA_ERROR_OUT_OF_MEMORY;
  if (e != CUDA_SUCCESS) {
    free(m);
    snprintf(err, len, "cuMemAlloc of %zu bytes: %s", bytes, shunt_cu_error(e));
    return -1;
  }
  m->p = (void*)(uintptr_t)d;
  pthread_mutex_lock(&mu);
  m->next = mems;
  mems = m;
  pthread_mutex_unlock(&mu);
  *out = m->p;
  return 0;
}

int shunt_gpu_mem_free(void* p) {
  pthread_mutex_lock(&mu);
  struct mem** pp = &mems;
  while (*pp && (*pp)->p != p) pp = &(*pp)->next;
  struct mem* m = *pp;
  if (m) *pp = m->next;
  pthread_mutex_unlock(&mu);
  if (!m) return -1;
  free(m);
  const struct shunt_cu* cu = shunt_cu(NULL, 0);
  if (cu) cu->MemFree((CUdeviceptr)(uintptr_t)p);
  return 0;
}
