/* ncclMemAlloc / ncclMemFree and ncclCommRegister / ncclCommDeregister: memory and buffers the
 * GPU executor reaches zero-copy (exec/backend.h), and NCCL's own registration beside it. */
#include <nccl.h>
#include <pthread.h>
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

/* Windows: NCCL's handle is what the application gets (NCCL's window functions take it); shunt
 * keeps its registration beside it, found by that handle. Alone, shunt's record is the handle. */
struct win_rec {
  ncclComm_t comm;
  ncclWindow_t win;
  void* mine;
  int own; /* the handle is this record (no NCCL window) */
  struct win_rec* next;
};
static pthread_mutex_t win_mu = PTHREAD_MUTEX_INITIALIZER;
static struct win_rec* wins;

SHUNT_EXPORT ncclResult_t pncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
                                                  int winFlags) {
  SHUNT_COMM_REF c = shunt_handles_get(comm);
  if (!c) SHUNT_FORWARD(ncclCommWindowRegister, (comm, buff, size, win, winFlags));
  if (!win) {
    SHUNT_WARN("CommWindowRegister: win argument is NULL");
    return ncclInvalidArgument;
  }
  struct win_rec* w = calloc(1, sizeof(*w));
  if (!w) return ncclSystemError;
  w->comm = comm;
  if (c->real) {
    const struct shunt_real_nccl* real = shunt_real_nccl();
    if (!real || !real->ncclCommWindowRegister) {
      free(w);
      return shunt_unavailable("ncclCommWindowRegister", real);
    }
    ncclResult_t rc = real->ncclCommWindowRegister(c->real, buff, size, &w->win, winFlags);
    if (rc != ncclSuccess) {
      free(w);
      return rc;
    }
  } else {
    w->own = 1;
    w->win = (ncclWindow_t)w;
  }
  int dev = shunt_mem_device(buff);
  if (dev >= 0 && atomic_load(&c->gpu_verdict) == SHUNT_GPU_USE) {
    char why[256];
    struct shunt_backend* b = shunt_launch_backend(c, true, dev);
    w->mine = b ? shunt_backend_register(b, buff, size, why, sizeof(why)) : NULL;
  }
  pthread_mutex_lock(&win_mu);
  w->next = wins;
  wins = w;
  pthread_mutex_unlock(&win_mu);
  *win = w->win;
  return ncclSuccess;
}
SHUNT_ALIAS(ncclCommWindowRegister, ncclResult_t,
            (ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags))

SHUNT_EXPORT ncclResult_t pncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  SHUNT_COMM_REF c = shunt_handles_get(comm);
  if (!c) SHUNT_FORWARD(ncclCommWindowDeregister, (comm, win));
  pthread_mutex_lock(&win_mu);
  struct win_rec** pp = &wins;
  while (*pp && !((*pp)->comm == comm && (*pp)->win == win)) pp = &(*pp)->next;
  struct win_rec* w = *pp;
  if (w) *pp = w->next;
  pthread_mutex_unlock(&win_mu);
  if (!w) {
    if (c->real) SHUNT_FORWARD(ncclCommWindowDeregister, (c->real, win));
    SHUNT_WARN("CommWindowDeregister: not a window of this communicator");
    return ncclInvalidArgument;
  }
  if (w->mine) shunt_backend_deregister(atomic_load(&c->gpu), w->mine);
  ncclResult_t rc = ncclSuccess;
  if (!w->own) {
    const struct shunt_real_nccl* real = shunt_real_nccl();
    rc = real && real->ncclCommWindowDeregister ? real->ncclCommWindowDeregister(c->real, win)
                                                : shunt_unavailable("ncclCommWindowDeregister", real);
  }
  free(w);
  return rc;
}
SHUNT_ALIAS(ncclCommWindowDeregister, ncclResult_t, (ncclComm_t comm, ncclWindow_t win))
