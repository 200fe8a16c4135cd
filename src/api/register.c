/* ncclMemAlloc / ncclMemFree and ncclCommRegister / ncclCommDeregister: memory and buffers the
 * GPU executor reaches zero-copy (exec/backend.h), and NCCL's own registration beside it. */
#include <nccl.h>
#include <stdint.h>
#include <stdlib.h>

#include "api/export.h"
#include "api/handles.h"
#include "api/launch.h"
#include "api/unavailable.h"
#include "comm/comm.h"
#include "exec/backend.h"
#include "exec/memkind.h"
#include "fallback/real_nccl.h"
#include "util/log.h"

#define REG_MAGIC 0x73687265u /* "shre" */

/* The handle ncclCommRegister gives: NCCL's registration and shunt's. */
struct reg_handle {
  uint32_t magic;
  ncclComm_t comm; /* the handle it was made on */
  void* real;      /* NCCL's handle, or NULL */
  void* mine;      /* the GPU backend's, or NULL */
};

/* shunt serves it when the CUDA driver is in the process with a current context; otherwise
 * (or when that fails) NCCL does. */
SHUNT_EXPORT ncclResult_t pncclMemAlloc(void** ptr, size_t size) {
  if (!ptr) {
    SHUNT_WARN("MemAlloc: ptr argument is NULL");
    return ncclInvalidArgument;
  }
  char why[256];
  if (shunt_gpu_mem_alloc(size, ptr, why, sizeof(why)) == 0) return ncclSuccess;
  SHUNT_INFO(SHUNT_ALLOC, "MemAlloc of %zu bytes goes to NCCL: %s", size, why);
  SHUNT_FORWARD(ncclMemAlloc, (ptr, size));
}
SHUNT_ALIAS(ncclMemAlloc, ncclResult_t, (void** ptr, size_t size))

SHUNT_EXPORT ncclResult_t pncclMemFree(void* ptr) {
  if (ptr && shunt_gpu_mem_free(ptr) == 0) return ncclSuccess;
  SHUNT_FORWARD(ncclMemFree, (ptr));
}
SHUNT_ALIAS(ncclMemFree, ncclResult_t, (void* ptr))

SHUNT_EXPORT ncclResult_t pncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle) {
  SHUNT_COMM_REF c = shunt_handles_get(comm);
  if (!c) SHUNT_FORWARD(ncclCommRegister, (comm, buff, size, handle)); /* not ours: NCCL's to judge */
  if (!handle) {
    SHUNT_WARN("CommRegister: handle argument is NULL");
    return ncclInvalidArgument;
  }
  struct reg_handle* h = calloc(1, sizeof(*h));
  if (!h) return ncclSystemError;
  h->magic = REG_MAGIC;
  h->comm = comm;
  if (c->real) {
    const struct shunt_real_nccl* real = shunt_real_nccl();
    ncclResult_t rc =
        real && real->ncclCommRegister ? real->ncclCommRegister(c->real, buff, size, &h->real) : ncclSuccess;
    if (rc != ncclSuccess) {
      free(h);
      return rc;
    }
  }
  int dev = shunt_mem_device(buff);
  if (dev >= 0 && atomic_load(&c->gpu_verdict) == SHUNT_GPU_USE) {
    char why[256];
    struct shunt_backend* b = shunt_launch_backend(c, true, dev);
    h->mine = b ? shunt_backend_register(b, buff, size, why, sizeof(why)) : NULL;
    if (!h->mine) SHUNT_INFO(SHUNT_ALLOC, "rank %d: buffer %p not registered for zero-copy: %s", c->rank, buff,
                             b ? why : "out of memory");
  }
  *handle = h;
  return ncclSuccess;
}
SHUNT_ALIAS(ncclCommRegister, ncclResult_t, (const ncclComm_t comm, void* buff, size_t size, void** handle))

SHUNT_EXPORT ncclResult_t pncclCommDeregister(const ncclComm_t comm, void* handle) {
  SHUNT_COMM_REF c = shunt_handles_get(comm);
  struct reg_handle* h = handle;
  if (!c || !h || h->magic != REG_MAGIC || h->comm != comm) SHUNT_FORWARD(ncclCommDeregister, (comm, handle));
  if (h->mine) shunt_backend_deregister(atomic_load(&c->gpu), h->mine);
  ncclResult_t rc = ncclSuccess;
  if (h->real) {
    const struct shunt_real_nccl* real = shunt_real_nccl();
    rc = real && real->ncclCommDeregister ? real->ncclCommDeregister(c->real, h->real) : ncclSuccess;
  }
  h->magic = 0;
  free(h);
  return rc;
}
SHUNT_ALIAS(ncclCommDeregister, ncclResult_t, (const ncclComm_t comm, void* handle))
