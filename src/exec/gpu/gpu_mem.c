/* Device memory shunt allocates itself (exec/backend.h: shunt_gpu_mem_alloc), for ncclMemAlloc:
 * what NCCL gives, VMM memory (gpu_vmm.h: granularity-aligned, shareable by file descriptor,
 * so peers reach it zero-copy once registered); cuMemAlloc memory where the driver has no VMM,
 * as NCCL falls back to cudaMalloc. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "exec/backend.h"
#include "exec/gpu/gpu_vmm.h"
#include "transport/cu.h"
#include "util/status.h"

/* Every allocation made here, so that ncclMemFree can tell its own from NCCL's. */
struct mem {
  void* p;
  size_t vmm_bytes; /* mapped VMM memory; 0: cuMemAlloc memory */
  struct mem* next;
};
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct mem* mems;

int shunt_gpu_mem_alloc(size_t bytes, void** out, char* err, size_t len) {
  const struct shunt_cu* cu = shunt_cu(err, len);
  if (!cu) return SHUNT_E_CUDA;
  CUcontext ctx = NULL;
  if (cu->CtxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx) {
    snprintf(err, len, "no current CUDA context in this thread");
    return SHUNT_E_CUDA;
  }
  struct mem* m = calloc(1, sizeof(*m));
  CUdevice dev = 0;
  char why[256] = "";
  if (m && (cu->CtxGetDevice(&dev) != CUDA_SUCCESS ||
            shunt_gpu_vmm_alloc(bytes, dev, &m->p, &m->vmm_bytes, why, sizeof(why)) != 0)) {
    CUdeviceptr d = 0;
    CUresult e = cu->MemAlloc(&d, bytes ? bytes : 1);
    if (e != CUDA_SUCCESS) {
      free(m);
      snprintf(err, len, "cuMemAlloc of %zu bytes: %s (no VMM memory: %s)", bytes, shunt_cu_error(e), why);
      return e == CUDA_ERROR_OUT_OF_MEMORY ? SHUNT_E_NOMEM : SHUNT_E_CUDA;
    }
    m->p = (void*)(uintptr_t)d;
    m->vmm_bytes = 0;
  }
  if (!m) {
    snprintf(err, len, "out of memory");
    return SHUNT_E_NOMEM;
  }
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
  size_t vmm_bytes = m->vmm_bytes;
  free(m);
  const struct shunt_cu* cu = shunt_cu(NULL, 0);
  if (vmm_bytes)
    shunt_gpu_vmm_free(p, vmm_bytes);
  else if (cu)
    cu->MemFree((CUdeviceptr)(uintptr_t)p);
  return 0;
}
