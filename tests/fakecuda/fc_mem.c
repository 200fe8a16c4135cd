/* The stand-in's memory (fake_cuda.h): device allocations are memfd mappings, so another
 * process maps the same pages through an IPC handle (/proc/PID/fd/FD); pinned host memory is
 * plain memory; pointer attributes answer from the tables here. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fake_cuda.h"

#define MAX_ALLOCS 4096
#define IPC_MAGIC 0x66616b6563756461ull /* "fakecuda" */

enum { KIND_DEVICE = 1, KIND_IPC, KIND_HOST, KIND_DECLARED };

struct alloc {
  uintptr_t lo, hi;
  int kind, device, fd;
  unsigned long long id; /* unique per allocation, as the driver's buffer id */
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct alloc allocs[MAX_ALLOCS];
static int nallocs;
static unsigned long long next_id = 1;

static int add(uintptr_t lo, size_t bytes, int kind, int device, int fd) {
  pthread_mutex_lock(&mu);
  int rc = -1;
  if (nallocs < MAX_ALLOCS) {
    allocs[nallocs++] = (struct alloc){lo, lo + bytes, kind, device, fd, next_id++};
    rc = 0;
  }
  pthread_mutex_unlock(&mu);
  return rc;
}

/* Removes the allocation starting at p of one of the kinds; its record, or kind 0. */
static struct alloc take(uintptr_t p, int kind) {
  struct alloc a = {0, 0, 0, 0, -1, 0};
  pthread_mutex_lock(&mu);
  for (int i = 0; i < nallocs; i++)
    if (allocs[i].lo == p && allocs[i].kind == kind) {
      a = allocs[i];
      allocs[i] = allocs[--nallocs];
      break;
    }
  pthread_mutex_unlock(&mu);
  return a;
}

static bool find(uintptr_t p, struct alloc* out) {
  pthread_mutex_lock(&mu);
  bool hit = false;
  for (int i = nallocs - 1; i >= 0 && !hit; i--)
    if (p >= allocs[i].lo && p < allocs[i].hi) *out = allocs[i], hit = true;
  pthread_mutex_unlock(&mu);
  return hit;
}

int fc_mem_device(const void* p) {
  struct alloc a;
  return find((uintptr_t)p, &a) && a.kind != KIND_HOST ? a.device : -1;
}

/* A test's own memory declared device memory of device 0 (buffer-kind tests). */
FC_EXPORT int fakecuda_add_device(const void* p, size_t bytes) {
  return add((uintptr_t)p, bytes, KIND_DECLARED, 0, -1);
}

static int alloc_device(struct fc_ctx* c, unsigned long long* dptr, size_t bytes);
FC_EXPORT int cuMemAlloc_v2(unsigned long long* dptr, size_t bytes) {
  struct fc_ctx* c = fc_current();
  if (!c) return FC_ERROR_INVALID_CONTEXT;
  if (!fc_sync_allowed()) return FC_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (bytes == 0) return FC_ERROR_INVALID_VALUE;
  fc_ctx_enter(c->device, false); /* allocations take the context lock */
  int rc = alloc_device(c, dptr, bytes);
  fc_ctx_leave(c->device);
  return rc;
}

static int alloc_device(struct fc_ctx* c, unsigned long long* dptr, size_t bytes) {
  int fd = memfd_create("fakecuda", MFD_CLOEXEC);
  if (fd < 0) return FC_ERROR_OUT_OF_MEMORY;
  if (ftruncate(fd, (off_t)bytes) != 0) {
    close(fd);
    return FC_ERROR_OUT_OF_MEMORY;
  }
  void* p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    close(fd);
    return FC_ERROR_OUT_OF_MEMORY;
  }
  /* A real allocation holds garbage: so does this one, so nothing relies on zeroes. */
  memset(p, 0xa5, bytes < 4096 ? bytes : 4096);
  if (add((uintptr_t)p, bytes, KIND_DEVICE, c->device, fd) != 0) {
    munmap(p, bytes);
    close(fd);
    return FC_ERROR_OUT_OF_MEMORY;
  }
  *dptr = (uintptr_t)p;
  return FC_SUCCESS;
}

/* A dma-buf of device memory, as a NIC registers it: here the allocation's memfd, so the
 * range must start where the allocation does (offset 0 of the file is dptr). */
FC_EXPORT int cuMemGetHandleForAddressRange(void* handle, unsigned long long dptr, size_t size, int type,
                                            unsigned long long flags) {
  struct alloc a;
  if (type != 1 || flags || !find((uintptr_t)dptr, &a) || a.kind != KIND_DEVICE || a.lo != dptr ||
      size > a.hi - a.lo || size % 4096)
    return FC_ERROR_INVALID_VALUE;
  int fd = dup(a.fd);
  if (fd < 0) return FC_ERROR_OUT_OF_MEMORY;
  *(int*)handle = fd;
  return FC_SUCCESS;
}

/* As if the device allocation at p were freed and another allocated at the same address: new
 * memory (zeroed), a new buffer id; mappings other processes hold still show the old memory. */
FC_EXPORT int fakecuda_replace(void* p) {
  pthread_mutex_lock(&mu);
  int rc = -1;
  for (int i = 0; i < nallocs; i++)
    if (allocs[i].lo == (uintptr_t)p && allocs[i].kind == KIND_DEVICE) {
      size_t bytes = allocs[i].hi - allocs[i].lo;
      int fd = memfd_create("fakecuda", MFD_CLOEXEC);
      if (fd >= 0 && ftruncate(fd, (off_t)bytes) == 0 &&
          mmap(p, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == p) {
        close(allocs[i].fd);
        allocs[i].fd = fd;
        allocs[i].id = next_id++;
        rc = 0;
      } else if (fd >= 0) {
        close(fd);
      }
      break;
    }
  pthread_mutex_unlock(&mu);
  return rc;
}

FC_EXPORT int cuMemFree_v2(unsigned long long dptr) {
  if (!fc_sync_allowed()) return FC_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  /* A free waits for the context's queued work, under the context lock. */
  int dev = fc_mem_device((const void*)(uintptr_t)dptr);
  fc_ctx_enter(dev, true);
  struct alloc a = take((uintptr_t)dptr, KIND_DEVICE);
  if (a.kind) munmap((void*)a.lo, a.hi - a.lo), close(a.fd);
  fc_ctx_leave(dev);
  return a.kind ? FC_SUCCESS : FC_ERROR_INVALID_VALUE;
}

FC_EXPORT int cuMemHostAlloc(void** p, size_t bytes, unsigned flags) {
  (void)flags;
  if (!fc_sync_allowed()) return FC_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  int dev = fc_current() ? fc_current()->device : -1;
  fc_ctx_enter(dev, false); /* pinned allocations take the context lock */
  fc_ctx_leave(dev);
  void* m = NULL;
  if (posix_memalign(&m, 4096, bytes ? bytes : 1) != 0) return FC_ERROR_OUT_OF_MEMORY;
  if (add((uintptr_t)m, bytes ? bytes : 1, KIND_HOST, -1, -1) != 0) {
    free(m);
    return FC_ERROR_OUT_OF_MEMORY;
  }
  *p = m;
  return FC_SUCCESS;
}

FC_EXPORT int cuMemFreeHost(void* p) {
  struct alloc a = take((uintptr_t)p, KIND_HOST);
  if (!a.kind) return FC_ERROR_INVALID_VALUE;
  free(p);
  return FC_SUCCESS;
}

FC_EXPORT int cuMemHostGetDevicePointer_v2(unsigned long long* d, void* p, unsigned flags) {
  (void)flags;
  struct alloc a;
  if (!find((uintptr_t)p, &a) || a.kind != KIND_HOST) return FC_ERROR_INVALID_VALUE;
  *d = (uintptr_t)p;
  return FC_SUCCESS;
}

FC_EXPORT int cuPointerGetAttribute(void* data, int attribute, unsigned long long ptr) {
  struct alloc a;
  if (!find((uintptr_t)ptr, &a)) return FC_ERROR_INVALID_VALUE;
  switch (attribute) {
    case 2: /* memory type */
      *(unsigned*)data = a.kind == KIND_HOST ? 1u : 2u;
      return FC_SUCCESS;
    case 7: /* buffer id */
      *(unsigned long long*)data = a.id;
      return FC_SUCCESS;
    case 9: /* device ordinal */
      *(int*)data = a.kind == KIND_HOST ? 0 : a.device;
      return FC_SUCCESS;
    case 11: /* range start */
      *(unsigned long long*)data = a.lo;
      return FC_SUCCESS;
    case 12: /* range size */
      *(size_t*)data = a.hi - a.lo;
      return FC_SUCCESS;
    default:
      return FC_ERROR_INVALID_VALUE;
  }
}

struct ipc_handle {
  uint64_t magic;
  int64_t pid;
  int64_t fd;
  uint64_t bytes;
  char pad[32];
};
_Static_assert(sizeof(struct ipc_handle) == 64, "CUipcMemHandle is 64 bytes");

FC_EXPORT int cuIpcGetMemHandle(struct ipc_handle* h, unsigned long long dptr) {
  struct alloc a;
  if (!find((uintptr_t)dptr, &a) || a.kind != KIND_DEVICE || a.lo != dptr) return FC_ERROR_INVALID_VALUE;
  memset(h, 0, sizeof(*h));
  h->magic = IPC_MAGIC;
  h->pid = getpid();
  h->fd = a.fd;
  h->bytes = a.hi - a.lo;
  return FC_SUCCESS;
}

FC_EXPORT int cuIpcOpenMemHandle_v2(unsigned long long* dptr, struct ipc_handle h, unsigned flags) {
  (void)flags;
  struct fc_ctx* c = fc_current();
  if (!c) return FC_ERROR_INVALID_CONTEXT;
  if (h.magic != IPC_MAGIC) return FC_ERROR_INVALID_VALUE;
  if (h.pid == getpid()) return FC_ERROR_INVALID_CONTEXT; /* as the driver: not in its own process */
  char path[64];
  snprintf(path, sizeof(path), "/proc/%lld/fd/%lld", (long long)h.pid, (long long)h.fd);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return FC_ERROR_INVALID_HANDLE;
  void* p = mmap(NULL, h.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    close(fd);
    return FC_ERROR_OUT_OF_MEMORY;
  }
  if (add((uintptr_t)p, h.bytes, KIND_IPC, c->device, fd) != 0) {
    munmap(p, h.bytes);
    close(fd);
    return FC_ERROR_OUT_OF_MEMORY;
  }
  *dptr = (uintptr_t)p;
  return FC_SUCCESS;
}

FC_EXPORT int cuIpcCloseMemHandle(unsigned long long dptr) {
  struct alloc a = take((uintptr_t)dptr, KIND_IPC);
  if (!a.kind) return FC_ERROR_INVALID_VALUE;
  munmap((void*)a.lo, a.hi - a.lo);
  close(a.fd);
  return FC_SUCCESS;
}
