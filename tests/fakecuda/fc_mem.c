/* The stand-in's memory (fake_cuda.h): device allocations are memfd mappings, so another
 * process maps the same pages through an IPC handle (/proc/PID/fd/FD); each lies between two
 * guard pages and is inaccessible to the host (fc_guard.c opens it to device work); pinned
 * host memory is plain memory; pointer attributes answer from the tables here. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fake_cuda.h"

#define MAX_ALLOCS 4096
#define IPC_MAGIC 0x66616b6563756461ull /* "fakecuda" */
#define WINDOW (64u * 1024u)            /* what one device fault opens: fewer faults, still local */

enum {
  KIND_DEVICE = FC_KIND_DEVICE,
  KIND_IPC = FC_KIND_IPC,
  KIND_HOST = FC_KIND_HOST,
  KIND_DECLARED = FC_KIND_DECLARED,
  KIND_VMM = FC_KIND_VMM,
  KIND_POOL = FC_KIND_POOL,
  KIND_MANAGED = FC_KIND_MANAGED
};

struct alloc {
  uintptr_t lo, hi;
  int kind, device, fd;     /* fd: for pinned host memory, its CU_MEMHOSTALLOC flags */
  unsigned long long id;    /* unique per allocation, as the driver's buffer id */
  uintptr_t map_lo, map_hi; /* the mapping with its guard pages (device memory), else 0 */
  /* KIND_IPC: the exporter and its allocation's id, the opens of that mapping, and its count
   * among the allocation's importers (fc_kept.c). */
  long long peer_pid;
  unsigned long long peer_id;
  int refs;
  void* trailer;
  /* KIND_VMM: the allocation handle mapped here, its shareable handle types, and the access
   * cuMemSetAccess granted each device (CU_MEM_ACCESS_FLAGS_PROT_*; 0 until granted). */
  void* handle;
  unsigned handle_types;
  unsigned char access[FC_MAX_DEVICES];
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct alloc allocs[MAX_ALLOCS];
static int nallocs;
static unsigned long long next_id = 1;

static uintptr_t page(void) {
  static uintptr_t p;
  if (!p) p = (uintptr_t)sysconf(_SC_PAGESIZE);
  return p;
}
static uintptr_t up(uintptr_t n, uintptr_t a) {
  return (n + a - 1) / a * a;
}

/* Device pages are closed to the host unless a test asks for the old leniency. */
static int closed_prot(void) {
  return fc_lenient("device-memory") ? PROT_READ | PROT_WRITE : PROT_NONE;
}

/* Maps the first `bytes` of fd between two guard pages, closed (fc_guard.c); its address, or
 * NULL; map_lo and map_hi get the whole mapping. */
static void* map_guarded(int fd, size_t bytes, uintptr_t* map_lo, uintptr_t* map_hi) {
  fc_guard_install();
  if (fc_lenient("guard-pages")) {
    /* No guard pages: allocations may then lie side by side, as a GPU's often do (a test of a
     * range across two allocations needs that). */
    void* q = mmap(NULL, bytes, closed_prot(), MAP_SHARED, fd, 0);
    if (q == MAP_FAILED) return NULL;
    *map_lo = (uintptr_t)q;
    *map_hi = (uintptr_t)q + bytes;
    return q;
  }
  size_t len = up(bytes, page()) + 2 * page();
  void* r = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (r == MAP_FAILED) return NULL;
  void* p = mmap((char*)r + page(), bytes, closed_prot(), MAP_SHARED | MAP_FIXED, fd, 0);
  if (p == MAP_FAILED) {
    munmap(r, len);
    return NULL;
  }
  *map_lo = (uintptr_t)r;
  *map_hi = (uintptr_t)r + len;
  return p;
}

static int add_rec(struct alloc a, unsigned long long* id) {
  pthread_mutex_lock(&mu);
  int rc = -1;
  if (nallocs < MAX_ALLOCS) {
    a.id = next_id++;
    if (id) *id = a.id;
    allocs[nallocs++] = a;
    rc = 0;
  }
  pthread_mutex_unlock(&mu);
  return rc;
}

static int add(uintptr_t lo, size_t bytes, int kind, int device, int fd) {
  struct alloc a = {.lo = lo, .hi = lo + bytes, .kind = kind, .device = device, .fd = fd, .refs = 1};
  return add_rec(a, NULL);
}

/* Unmaps a device allocation's mapping; the caller holds mu, so that no window of it is opened
 * or closed once its address can be another mapping's. */
static void unmap_locked(const struct alloc* a) {
  if (a->map_lo)
    munmap((void*)a->map_lo, a->map_hi - a->map_lo);
  else
    munmap((void*)a->lo, a->hi - a->lo);
}

/* Removes the allocation starting at p of one of the kinds; its record, or kind 0. With unmap,
 * its mapping goes too, under the same lock. */
static struct alloc take(uintptr_t p, int kind, bool unmap) {
  struct alloc a = {.fd = -1};
  pthread_mutex_lock(&mu);
  for (int i = 0; i < nallocs; i++)
    if (allocs[i].lo == p && allocs[i].kind == kind) {
      a = allocs[i];
      allocs[i] = allocs[--nallocs];
      if (unmap) unmap_locked(&a);
      break;
    }
  pthread_mutex_unlock(&mu);
  return a;
}

/* Whether device (-1: any) may reach VMM mapping r. */
static bool granted(const struct alloc* r, int device) {
  if (device >= 0 && device < FC_MAX_DEVICES) return r->access[device] != 0;
  for (int d = 0; d < FC_MAX_DEVICES; d++)
    if (r->access[d]) return true;
  return false;
}

int fc_mem_fault_open(uintptr_t a, int device, bool open, struct fc_window* w) {
  int at = FC_AT_NONE;
  pthread_mutex_lock(&mu);
  for (int i = 0; i < nallocs && at == FC_AT_NONE; i++) {
    const struct alloc* r = &allocs[i];
    if (!r->map_lo || a < r->map_lo || a >= r->map_hi) continue;
    uintptr_t data_hi = r->lo + up(r->hi - r->lo, page());
    bool closed = r->kind == KIND_VMM && !granted(r, device);
    at = a >= r->lo && a < data_hi ? (closed ? FC_AT_CLOSED : FC_AT_DATA) : FC_AT_GUARD;
    w->base = r->lo;
    w->bytes = r->hi - r->lo;
    w->device = r->device;
    w->id = r->id;
    if (at == FC_AT_DATA && open) {
      uintptr_t lo = a / WINDOW * WINDOW, hi = lo + WINDOW;
      w->lo = lo > r->lo ? lo : r->lo;
      w->hi = hi < data_hi ? hi : data_hi;
      mprotect((void*)w->lo, w->hi - w->lo, PROT_READ | PROT_WRITE);
    }
  }
  pthread_mutex_unlock(&mu);
  return at;
}

void fc_mem_close(const struct fc_window* w, int n) {
  if (n == 0) return;
  int prot = closed_prot();
  pthread_mutex_lock(&mu);
  for (int k = 0; k < n; k++)
    for (int i = 0; i < nallocs; i++)
      if (allocs[i].id == w[k].id) {
        mprotect((void*)w[k].lo, w[k].hi - w[k].lo, prot);
        break;
      }
  pthread_mutex_unlock(&mu);
}

int fc_mem_track(uintptr_t lo, size_t bytes, int kind, int device, void* handle, unsigned types) {
  fc_guard_install();
  /* A VMM mapping has no guard pages of its own: the reservation around it is inaccessible. */
  struct alloc a = {.lo = lo,
                    .hi = lo + bytes,
                    .kind = kind,
                    .device = device,
                    .fd = -1,
                    .map_lo = lo,
                    .map_hi = lo + bytes,
                    .refs = 1,
                    .handle = handle,
                    .handle_types = types};
  return add_rec(a, NULL);
}

int fc_mem_untrack(uintptr_t lo, uintptr_t hi, void** handles, int max) {
  int n = 0;
  pthread_mutex_lock(&mu);
  for (int i = 0; i < nallocs;)
    if (allocs[i].kind == KIND_VMM && allocs[i].lo >= lo && allocs[i].hi <= hi) {
      if (n < max) handles[n++] = allocs[i].handle;
      /* Back to a hole of the reservation, under the lock (see unmap_locked). */
      mmap((void*)allocs[i].lo, allocs[i].hi - allocs[i].lo, PROT_NONE,
           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
      allocs[i] = allocs[--nallocs];
    } else {
      i++;
    }
  pthread_mutex_unlock(&mu);
  return n;
}

int fc_mem_grant(uintptr_t lo, uintptr_t hi, int device, int flags) {
  int n = 0;
  pthread_mutex_lock(&mu);
  for (int i = 0; i < nallocs; i++)
    if (allocs[i].kind == KIND_VMM && allocs[i].lo < hi && allocs[i].hi > lo)
      allocs[i].access[device] = (unsigned char)flags, n++;
  pthread_mutex_unlock(&mu);
  return n;
}

int fc_mem_access(uintptr_t p, int device, int* flags) {
  int rc = -1;
  pthread_mutex_lock(&mu);
  for (int i = 0; i < nallocs && rc; i++)
    if (allocs[i].kind == KIND_VMM && p >= allocs[i].lo && p < allocs[i].hi) {
      *flags = allocs[i].access[device];
      rc = 0;
    }
  pthread_mutex_unlock(&mu);
  return rc;
}

void* fc_mem_vmm_handle(uintptr_t p) {
  void* h = NULL;
  pthread_mutex_lock(&mu);
  for (int i = 0; i < nallocs && !h; i++)
    if (allocs[i].kind == KIND_VMM && p >= allocs[i].lo && p < allocs[i].hi) h = allocs[i].handle;
  pthread_mutex_unlock(&mu);
  return h;
}

void* fc_mem_rehandle(uintptr_t lo, void* handle) {
  void* old = NULL;
  pthread_mutex_lock(&mu);
  for (int i = 0; i < nallocs && !old; i++)
    if (allocs[i].kind == KIND_VMM && allocs[i].lo == lo) {
      old = allocs[i].handle;
      allocs[i].handle = handle;
      allocs[i].id = next_id++;
    }
  pthread_mutex_unlock(&mu);
  return old;
}

size_t fc_mem_size_at(uintptr_t lo) {
  size_t n = 0;
  pthread_mutex_lock(&mu);
  for (int i = 0; i < nallocs && !n; i++)
    if (allocs[i].lo == lo) n = allocs[i].hi - allocs[i].lo;
  pthread_mutex_unlock(&mu);
  return n;
}

int fc_mem_closed_prot(void) {
  return closed_prot();
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

/* A memfd of `bytes` mapped as device memory of `device` (guarded, closed); its record is
 * added. 0, or a driver error. */
static int device_alloc(size_t bytes, int device, int kind, unsigned long long* dptr) {
  int fd = memfd_create("fakecuda", MFD_CLOEXEC);
  if (fd < 0) return FC_ERROR_OUT_OF_MEMORY;
  uintptr_t mlo = 0, mhi = 0;
  void* p = fc_kept_size(fd, bytes) == 0 ? map_guarded(fd, bytes, &mlo, &mhi) : NULL;
  if (!p) {
    close(fd);
    return FC_ERROR_OUT_OF_MEMORY;
  }
  /* A real allocation holds garbage: so does this one, so nothing relies on zeroes. Written
   * through a view of its own, as the allocation's pages are closed to the host. */
  size_t head = bytes < 4096 ? bytes : 4096;
  void* v = mmap(NULL, head, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (v != MAP_FAILED) {
    memset(v, 0xa5, head);
    munmap(v, head);
  }
  struct alloc a = {.lo = (uintptr_t)p,
                    .hi = (uintptr_t)p + bytes,
                    .kind = kind,
                    .device = device,
                    .fd = fd,
                    .map_lo = mlo,
                    .map_hi = mhi,
                    .refs = 1};
  if (add_rec(a, NULL) != 0) {
    munmap((void*)mlo, mhi - mlo);
    close(fd);
    return FC_ERROR_OUT_OF_MEMORY;
  }
  *dptr = (uintptr_t)p;
  return FC_SUCCESS;
}

int fc_mem_alloc_kind(size_t bytes, int device, int kind, unsigned long long* dptr) {
  return device_alloc(bytes, device, kind, dptr);
}

FC_EXPORT int cuMemAlloc_v2(unsigned long long* dptr, size_t bytes) {
  FC_NEED_CTX();
  struct fc_ctx* c = fc_current();
  if (!fc_sync_allowed()) return FC_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (bytes == 0) return FC_ERROR_INVALID_VALUE;
  fc_ctx_enter(c->device, false); /* allocations take the context lock */
  int rc = device_alloc(bytes, c->device, KIND_DEVICE, dptr);
  fc_ctx_leave(c->device);
  return rc;
}

/* A dma-buf of device memory, as a NIC registers it: here the allocation's memfd, so the
 * range must start where the allocation does (offset 0 of the file is dptr). */
FC_EXPORT int cuMemGetHandleForAddressRange(void* handle, unsigned long long dptr, size_t size, int type,
                                            unsigned long long flags) {
  struct alloc a;
  if (!fc_dma_buf()) return FC_ERROR_NOT_SUPPORTED; /* as a device without DMA_BUF_SUPPORTED */
  if (type != 1 || flags || !find((uintptr_t)dptr, &a) || a.kind != KIND_DEVICE || a.lo != dptr ||
      size > a.hi - a.lo || size % 4096)
    return FC_ERROR_INVALID_VALUE;
  int fd = dup(a.fd);
  if (fd < 0) return FC_ERROR_OUT_OF_MEMORY;
  *(int*)handle = fd;
  return FC_SUCCESS;
}

/* As if the device allocation at p were freed and another allocated at the same address: new
 * memory (zeroed), a new buffer id; mappings other processes hold still show the old memory
 * (kept and counted, as any free while imported: fc_kept.c). */
FC_EXPORT int fakecuda_replace(void* p) {
  if (fc_mem_vmm_handle((uintptr_t)p)) return fc_vmm_replace((uintptr_t)p);
  pthread_mutex_lock(&mu);
  int rc = -1;
  for (int i = 0; i < nallocs; i++)
    if (allocs[i].lo == (uintptr_t)p && allocs[i].kind == KIND_DEVICE) {
      size_t bytes = allocs[i].hi - allocs[i].lo;
      int fd = memfd_create("fakecuda", MFD_CLOEXEC);
      if (fd >= 0 && fc_kept_size(fd, bytes) == 0 &&
          mmap(p, bytes, closed_prot(), MAP_SHARED | MAP_FIXED, fd, 0) == p) {
        fc_kept_on_release(allocs[i].fd, bytes, false, "cuMemFree (fakecuda_replace)");
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

/* Freed memory: while CUDA IPC importers map it the driver keeps its pages (counted, or the
 * strict mode's abort: fc_kept.c); otherwise it is gone for every holder: the memfd shrinks to
 * nothing, so a mapping left elsewhere (a dma-buf a NIC holds) faults at its next access. */
static void release_fd(const struct alloc* a) {
  if (!fc_kept_on_release(a->fd, a->hi - a->lo, false, "cuMemFree of memory exported through CUDA IPC") &&
      ftruncate(a->fd, 0) != 0) { /* nothing to do: the holders keep the pages */
  }
  close(a->fd);
}

int fc_mem_free_kind(unsigned long long dptr, int kind) {
  struct alloc a = take((uintptr_t)dptr, kind, true);
  if (!a.kind) return FC_ERROR_INVALID_VALUE;
  if (kind == KIND_MANAGED) return FC_SUCCESS;
  release_fd(&a);
  return FC_SUCCESS;
}

/* cuMemFree frees what cuMemAlloc, cuMemAllocAsync and cuMemAllocManaged gave. */
FC_EXPORT int cuMemFree_v2(unsigned long long dptr) {
  if (!fc_sync_allowed()) return FC_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  /* A free waits for the context's queued work, under the context lock. */
  int dev = fc_mem_device((const void*)(uintptr_t)dptr);
  fc_ctx_enter(dev, true);
  int rc = FC_SUCCESS;
  if (fc_mem_free_kind(dptr, KIND_POOL) != FC_SUCCESS && fc_mem_free_kind(dptr, KIND_MANAGED) != FC_SUCCESS) {
    struct alloc a = take((uintptr_t)dptr, KIND_DEVICE, true);
    if (a.kind) {
      release_fd(&a);
    } else {
      rc = FC_ERROR_INVALID_VALUE;
    }
  }
  fc_ctx_leave(dev);
  return rc;
}

/* Managed memory: one address for host and device, reachable from both (pages migrate on a GPU). */
FC_EXPORT int cuMemAllocManaged(unsigned long long* dptr, size_t bytes, unsigned flags) {
  struct fc_ctx* c = fc_current();
  if (!c) return FC_ERROR_INVALID_CONTEXT;
  if (!fc_sync_allowed()) return FC_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (bytes == 0 || (flags != 1 && flags != 2)) return FC_ERROR_INVALID_VALUE;
  void* m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return FC_ERROR_OUT_OF_MEMORY;
  if (add((uintptr_t)m, bytes, KIND_MANAGED, c->device, -1) != 0) {
    munmap(m, bytes);
    return FC_ERROR_OUT_OF_MEMORY;
  }
  *dptr = (uintptr_t)m;
  return FC_SUCCESS;
}

FC_EXPORT int cuMemHostAlloc(void** p, size_t bytes, unsigned flags) {
  FC_NEED_CTX();
  if (!fc_sync_allowed()) return FC_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  int dev = fc_current() ? fc_current()->device : -1;
  fc_ctx_enter(dev, false); /* pinned allocations take the context lock */
  fc_ctx_leave(dev);
  void* m = NULL;
  if (posix_memalign(&m, 4096, bytes ? bytes : 1) != 0) return FC_ERROR_OUT_OF_MEMORY;
  /* The device it was allocated against, as cuPointerGetAttribute documents it; its memory type
   * says host. */
  struct fc_ctx* c = fc_current();
  if (add((uintptr_t)m, bytes ? bytes : 1, KIND_HOST, c ? c->device : 0, (int)flags) != 0) {
    free(m);
    return FC_ERROR_OUT_OF_MEMORY;
  }
  *p = m;
  return FC_SUCCESS;
}

FC_EXPORT int cuMemFreeHost(void* p) {
  struct alloc a = take((uintptr_t)p, KIND_HOST, false);
  if (!a.kind) return FC_ERROR_INVALID_VALUE;
  free(p);
  return FC_SUCCESS;
}

/* Only memory allocated with CU_MEMHOSTALLOC_DEVICEMAP (2) is mapped into the device. */
FC_EXPORT int cuMemHostGetDevicePointer_v2(unsigned long long* d, void* p, unsigned flags) {
  FC_NEED_CTX();
  struct alloc a;
  if (flags != 0 || !find((uintptr_t)p, &a) || a.kind != KIND_HOST || !(a.fd & 2))
    return FC_ERROR_INVALID_VALUE;
  *d = (uintptr_t)p;
  return FC_SUCCESS;
}

FC_EXPORT int cuPointerGetAttribute(void* data, int attribute, unsigned long long ptr) {
  FC_NEED_INIT();
  struct alloc a;
  if (!find((uintptr_t)ptr, &a)) return FC_ERROR_INVALID_VALUE;
  switch (attribute) {
    case 2: /* memory type */
      *(unsigned*)data = a.kind == KIND_HOST ? 1u : 2u;
      return FC_SUCCESS;
    case 7: /* buffer id */
      *(unsigned long long*)data = a.id;
      return FC_SUCCESS;
    case 8: /* is managed */
      *(int*)data = a.kind == KIND_MANAGED;
      return FC_SUCCESS;
    case 10: /* is legacy CUDA IPC capable: cuMemAlloc memory only */
      *(int*)data = a.kind == KIND_DEVICE;
      return FC_SUCCESS;
    case 13: /* mapped */
      *(int*)data = 1;
      return FC_SUCCESS;
    case 14: /* allowed handle types (cuMemExportToShareableHandle) */
      *(unsigned long long*)data = a.kind == KIND_VMM ? a.handle_types : 0;
      return FC_SUCCESS;
    case 9: /* device ordinal */
      *(int*)data = a.device;
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
  uint64_t id; /* the exporter's allocation: one mapping per context however often opened */
  char pad[24];
};
_Static_assert(sizeof(struct ipc_handle) == 64, "CUipcMemHandle is 64 bytes");

/* CUipcMemHandle is 64 chars: the caller's handle may lie at any address. */
FC_EXPORT int cuIpcGetMemHandle(void* out, unsigned long long dptr) {
  struct alloc a;
  if (!find((uintptr_t)dptr, &a) || a.kind != KIND_DEVICE || a.lo != dptr) return FC_ERROR_INVALID_VALUE;
  struct ipc_handle h;
  memset(&h, 0, sizeof(h));
  h.magic = IPC_MAGIC;
  h.pid = getpid();
  h.fd = a.fd;
  h.bytes = a.hi - a.lo;
  h.id = a.id;
  memcpy(out, &h, sizeof(h));
  return FC_SUCCESS;
}

/* As the driver: a handle opened again in the same context gives the mapping it gave before,
 * counted; cuIpcCloseMemHandle unmaps it when the count drops to zero. */
static bool reopen(const struct ipc_handle* h, int device, unsigned long long* dptr) {
  bool hit = false;
  pthread_mutex_lock(&mu);
  for (int i = 0; i < nallocs && !hit; i++) {
    struct alloc* r = &allocs[i];
    if (r->kind == KIND_IPC && r->device == device && r->peer_pid == h->pid && r->peer_id == h->id) {
      r->refs++;
      *dptr = r->lo;
      hit = true;
    }
  }
  pthread_mutex_unlock(&mu);
  return hit;
}

FC_EXPORT int cuIpcOpenMemHandle_v2(unsigned long long* dptr, struct ipc_handle h, unsigned flags) {
  (void)flags;
  struct fc_ctx* c = fc_current();
  if (!c) return FC_ERROR_INVALID_CONTEXT;
  if (h.magic != IPC_MAGIC) return FC_ERROR_INVALID_VALUE;
  if (h.pid == getpid()) return FC_ERROR_INVALID_CONTEXT; /* as the driver: not in its own process */
  if (reopen(&h, c->device, dptr)) return FC_SUCCESS;
  char path[64];
  snprintf(path, sizeof(path), "/proc/%lld/fd/%lld", (long long)h.pid, (long long)h.fd);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return FC_ERROR_INVALID_HANDLE;
  uintptr_t mlo = 0, mhi = 0;
  void* p = map_guarded(fd, h.bytes, &mlo, &mhi);
  if (!p) {
    close(fd);
    return FC_ERROR_OUT_OF_MEMORY;
  }
  struct alloc a = {.lo = (uintptr_t)p,
                    .hi = (uintptr_t)p + h.bytes,
                    .kind = KIND_IPC,
                    .device = c->device,
                    .fd = fd,
                    .map_lo = mlo,
                    .map_hi = mhi,
                    .peer_pid = h.pid,
                    .peer_id = h.id,
                    .refs = 1,
                    .trailer = fc_kept_import(fd, h.bytes)};
  if (add_rec(a, NULL) != 0) {
    fc_kept_unimport(a.trailer);
    munmap((void*)mlo, mhi - mlo);
    close(fd);
    return FC_ERROR_OUT_OF_MEMORY;
  }
  *dptr = (uintptr_t)p;
  return FC_SUCCESS;
}

FC_EXPORT int cuIpcCloseMemHandle(unsigned long long dptr) {
  pthread_mutex_lock(&mu);
  int rc = FC_ERROR_INVALID_VALUE;
  for (int i = 0; i < nallocs; i++)
    if (allocs[i].lo == dptr && allocs[i].kind == KIND_IPC) {
      rc = FC_SUCCESS;
      if (--allocs[i].refs > 0) break;
      struct alloc a = allocs[i];
      allocs[i] = allocs[--nallocs];
      unmap_locked(&a);
      fc_kept_unimport(a.trailer);
      close(a.fd);
      break;
    }
  pthread_mutex_unlock(&mu);
  return rc;
}

/* Bytes of pinned host memory (cuMemHostAlloc) not yet freed, for tests of what a teardown keeps. */
FC_EXPORT long long fakecuda_host_alloc_bytes(void) {
  long long n = 0;
  pthread_mutex_lock(&mu);
  for (int i = 0; i < nallocs; i++)
    if (allocs[i].kind == KIND_HOST) n += (long long)(allocs[i].hi - allocs[i].lo);
  pthread_mutex_unlock(&mu);
  return n;
}
