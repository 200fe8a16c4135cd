/* The stand-in's virtual memory management and stream-ordered allocations (fake_cuda.h):
 * cuMemCreate makes a physical allocation (a memfd) that cuMemMap maps into a range
 * cuMemAddressReserve reserved; a device reaches a mapping once cuMemSetAccess granted that
 * device (until then its access is a device fault, as on a GPU: other devices of the process
 * included); a handle made with the POSIX file-descriptor type exports as a file descriptor
 * that another process imports (cuMemImportFromShareableHandle), the memory living while any
 * handle, mapping or exported descriptor holds it (an owner's last release while others hold
 * it is counted: fc_kept.c). cuMemAllocAsync / cuMemFreeAsync allocate from the device's
 * default pool: memory no legacy IPC handle exports. */
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fake_cuda.h"

#define GRANULARITY (2u * 1024u * 1024u) /* as a GPU's: 2 MiB pages */
#define HANDLE_FD 1u                     /* CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR */

struct prop { /* CUmemAllocationProp */
  int type;   /* CU_MEM_ALLOCATION_TYPE_PINNED = 1 */
  int handle_types;
  int loc_type; /* CU_MEM_LOCATION_TYPE_DEVICE = 1 */
  int loc_id;
  void* win32;
  unsigned char flags[8];
};
struct location { /* CUmemLocation */
  int type, id;
};
struct access_desc { /* CUmemAccessDesc */
  int loc_type, loc_id;
  int flags; /* CU_MEM_ACCESS_FLAGS_PROT_NONE 0, READ 1, READWRITE 3 */
};

/* A physical allocation: alive while its handle or a mapping holds it. */
struct vmm {
  int fd;
  size_t size;
  int device;
  unsigned types;
  int refs;      /* handles (create, import, retain) and mappings */
  void* trailer; /* imported: its count among the allocation's importers (fc_kept.c) */
  bool imported;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static void unref(struct vmm* v) {
  pthread_mutex_lock(&mu);
  int left = --v->refs;
  pthread_mutex_unlock(&mu);
  if (left) return;
  if (v->imported)
    fc_kept_unimport(v->trailer);
  else
    fc_kept_on_release(v->fd, v->size, true, "the last release of VMM memory (cuMemRelease, cuMemUnmap)");
  close(v->fd);
  free(v);
}

FC_EXPORT int cuMemGetAllocationGranularity(size_t* g, const struct prop* p, int option) {
  (void)option;
  if (!g || !p || p->type != 1 || p->loc_type != 1 || !fc_ctx_of(p->loc_id)) return FC_ERROR_INVALID_VALUE;
  *g = GRANULARITY;
  return FC_SUCCESS;
}

FC_EXPORT int cuMemCreate(struct vmm** h, size_t size, const struct prop* p, unsigned long long flags) {
  if (!fc_current()) return FC_ERROR_INVALID_CONTEXT;
  if (!fc_sync_allowed()) return FC_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (!h || !p || flags || p->type != 1 || p->loc_type != 1 || !fc_ctx_of(p->loc_id) || size == 0 ||
      size % GRANULARITY)
    return FC_ERROR_INVALID_VALUE;
  struct vmm* v = calloc(1, sizeof(*v));
  if (!v) return FC_ERROR_OUT_OF_MEMORY;
  v->fd = memfd_create("fakecuda-vmm", MFD_CLOEXEC);
  if (v->fd < 0 || fc_kept_size(v->fd, size) != 0) {
    if (v->fd >= 0) close(v->fd);
    free(v);
    return FC_ERROR_OUT_OF_MEMORY;
  }
  v->size = size;
  v->device = p->loc_id;
  v->types = (unsigned)p->handle_types;
  v->refs = 1;
  *h = v;
  return FC_SUCCESS;
}

FC_EXPORT int cuMemRelease(struct vmm* h) {
  if (!h) return FC_ERROR_INVALID_VALUE;
  unref(h);
  return FC_SUCCESS;
}

/* A range of addresses, inaccessible, with a page of slack on each side as guards. */
FC_EXPORT int cuMemAddressReserve(unsigned long long* ptr, size_t size, size_t align, unsigned long long addr,
                                  unsigned long long flags) {
  (void)addr;
  (void)flags;
  if (!ptr || size == 0 || size % GRANULARITY || (align && align % GRANULARITY))
    return FC_ERROR_INVALID_VALUE;
  size_t a = align ? align : GRANULARITY, len = size + 2 * a;
  char* r = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (r == MAP_FAILED) return FC_ERROR_OUT_OF_MEMORY;
  uintptr_t lo = ((uintptr_t)r + a) / a * a; /* aligned, at least one page from either end */
  *ptr = lo;
  return FC_SUCCESS;
}

FC_EXPORT int cuMemAddressFree(unsigned long long ptr, size_t size) {
  if (!ptr || size == 0) return FC_ERROR_INVALID_VALUE;
  for (unsigned long long p = ptr; p < ptr + size; p += GRANULARITY)
    if (fc_mem_vmm_handle(p)) return FC_ERROR_INVALID_VALUE; /* still mapped */
  munmap((void*)(uintptr_t)ptr, size);
  return FC_SUCCESS;
}

FC_EXPORT int cuMemMap(unsigned long long ptr, size_t size, size_t offset, struct vmm* h,
                       unsigned long long flags) {
  if (!ptr || !h || flags || size == 0 || size % GRANULARITY || offset % GRANULARITY ||
      offset + size > h->size)
    return FC_ERROR_INVALID_VALUE;
  if (fc_mem_vmm_handle(ptr) || fc_mem_vmm_handle(ptr + size - 1)) return FC_ERROR_INVALID_VALUE;
  void* p =
      mmap((void*)(uintptr_t)ptr, size, fc_mem_closed_prot(), MAP_SHARED | MAP_FIXED, h->fd, (off_t)offset);
  if (p == MAP_FAILED) return FC_ERROR_OUT_OF_MEMORY;
  pthread_mutex_lock(&mu);
  h->refs++;
  pthread_mutex_unlock(&mu);
  if (fc_mem_track(ptr, size, FC_KIND_VMM, h->device, h, h->types) != 0) {
    unref(h);
    return FC_ERROR_OUT_OF_MEMORY;
  }
  return FC_SUCCESS;
}

FC_EXPORT int cuMemUnmap(unsigned long long ptr, size_t size) {
  void* hs[64];
  int n = fc_mem_untrack(ptr, ptr + size, hs, 64);
  if (n == 0) return FC_ERROR_INVALID_VALUE;
  for (int i = 0; i < n; i++) unref(hs[i]);
  return FC_SUCCESS;
}

extern int cuDeviceCanAccessPeer(int* v, int a, int b);

/* Each device named gets the access asked for; a device that cannot reach the memory's device
 * as a peer is refused, as the driver refuses it. */
FC_EXPORT int cuMemSetAccess(unsigned long long ptr, size_t size, const struct access_desc* d, size_t count) {
  if (!d || count == 0) return FC_ERROR_INVALID_VALUE;
  int owner = fc_mem_device((const void*)(uintptr_t)ptr);
  if (owner < 0 || !fc_mem_vmm_handle(ptr)) return FC_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < count; i++) {
    int can = 0;
    if (d[i].loc_type != 1 || !fc_ctx_of(d[i].loc_id) ||
        (d[i].flags != 0 && d[i].flags != 1 && d[i].flags != 3))
      return FC_ERROR_INVALID_VALUE;
    if (d[i].loc_id != owner && (cuDeviceCanAccessPeer(&can, d[i].loc_id, owner) != FC_SUCCESS || !can))
      return FC_ERROR_INVALID_DEVICE;
  }
  for (size_t i = 0; i < count; i++)
    if (!fc_mem_grant(ptr, ptr + size, d[i].loc_id, d[i].flags)) return FC_ERROR_INVALID_VALUE;
  return FC_SUCCESS;
}

FC_EXPORT int cuMemGetAccess(unsigned long long* flags, const struct location* loc, unsigned long long ptr) {
  int f = 0;
  if (!flags || !loc || loc->type != 1 || !fc_ctx_of(loc->id)) return FC_ERROR_INVALID_VALUE;
  if (fc_mem_access(ptr, loc->id, &f) != 0) return FC_ERROR_INVALID_VALUE; /* not a VMM mapping */
  *flags = (unsigned long long)f;
  return FC_SUCCESS;
}

/* A new physical allocation under the mapping at p (fakecuda_replace): importers of the old
 * one keep it. */
int fc_vmm_replace(uintptr_t p) {
  struct vmm* old = fc_mem_vmm_handle(p);
  size_t n = fc_mem_size_at(p);
  if (!old || !n) return -1;
  struct vmm* v = calloc(1, sizeof(*v));
  if (!v) return -1;
  v->fd = memfd_create("fakecuda-vmm", MFD_CLOEXEC);
  if (v->fd < 0 || fc_kept_size(v->fd, n) != 0 ||
      mmap((void*)p, n, fc_mem_closed_prot(), MAP_SHARED | MAP_FIXED, v->fd, 0) != (void*)p) {
    if (v->fd >= 0) close(v->fd);
    free(v);
    return -1;
  }
  v->size = n;
  v->device = old->device;
  v->types = old->types;
  v->refs = 1; /* the mapping's */
  unref(fc_mem_rehandle(p, v));
  return 0;
}

FC_EXPORT int cuMemRetainAllocationHandle(struct vmm** h, void* addr) {
  struct vmm* v = fc_mem_vmm_handle((uintptr_t)addr);
  if (!v) return FC_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&mu);
  v->refs++;
  pthread_mutex_unlock(&mu);
  *h = v;
  return FC_SUCCESS;
}

/* Only the handle types the allocation was made with export (here: a file descriptor). */
FC_EXPORT int cuMemExportToShareableHandle(void* out, struct vmm* h, int type, unsigned long long flags) {
  if (!out || !h || flags || (unsigned)type != HANDLE_FD || !(h->types & HANDLE_FD))
    return FC_ERROR_INVALID_VALUE;
  int fd = dup(h->fd);
  if (fd < 0) return FC_ERROR_OUT_OF_MEMORY;
  *(int*)out = fd;
  return FC_SUCCESS;
}

/* The caller keeps its descriptor (and closes it), as with the driver. */
FC_EXPORT int cuMemImportFromShareableHandle(struct vmm** h, void* os_handle, int type) {
  struct fc_ctx* c = fc_current();
  if (!c) return FC_ERROR_INVALID_CONTEXT;
  if (!h || (unsigned)type != HANDLE_FD) return FC_ERROR_INVALID_VALUE;
  struct stat st;
  int fd = (int)(intptr_t)os_handle;
  size_t trailer = (size_t)sysconf(_SC_PAGESIZE);
  if (fstat(fd, &st) != 0 || (size_t)st.st_size <= trailer) return FC_ERROR_INVALID_VALUE;
  struct vmm* v = calloc(1, sizeof(*v));
  if (!v) return FC_ERROR_OUT_OF_MEMORY;
  v->fd = dup(fd);
  if (v->fd < 0) {
    free(v);
    return FC_ERROR_OUT_OF_MEMORY;
  }
  v->size = (size_t)st.st_size - trailer;
  v->device = c->device;
  v->types = HANDLE_FD;
  v->refs = 1;
  v->imported = true;
  v->trailer = fc_kept_import(v->fd, v->size);
  *h = v;
  return FC_SUCCESS;
}

/* ---- Stream-ordered allocation ------------------------------------------------------------- */

extern int cuStreamIsCapturing(void* h, int* status);
extern int cuEventCreate(void** e, unsigned flags);
extern int cuEventRecord(void* e, void* stream);
extern int cuEventSynchronize(void* e);
extern int cuEventDestroy_v2(void* e);

/* Graph memory nodes (an allocation inside a capture) are not modelled: refused. */
FC_EXPORT int cuMemAllocAsync(unsigned long long* dptr, size_t bytes, void* stream) {
  struct fc_ctx* c = fc_current();
  if (!c) return FC_ERROR_INVALID_CONTEXT;
  int cap = 0;
  if (cuStreamIsCapturing(stream, &cap) != FC_SUCCESS) return FC_ERROR_INVALID_HANDLE;
  if (cap) return FC_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (!dptr || bytes == 0) return FC_ERROR_INVALID_VALUE;
  return fc_mem_alloc_kind(bytes, c->device, FC_KIND_POOL, dptr);
}

struct pending_free {
  void* event;
  unsigned long long dptr;
};
static void* free_later(void* arg) {
  struct pending_free* f = arg;
  cuEventSynchronize(f->event);
  cuEventDestroy_v2(f->event);
  fc_mem_free_kind(f->dptr, FC_KIND_POOL);
  free(f);
  return NULL;
}

/* Freed once the work queued on the stream before it is done. */
FC_EXPORT int cuMemFreeAsync(unsigned long long dptr, void* stream) {
  int cap = 0;
  if (cuStreamIsCapturing(stream, &cap) != FC_SUCCESS) return FC_ERROR_INVALID_HANDLE;
  if (cap) return FC_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  struct pending_free* f = calloc(1, sizeof(*f));
  if (!f) return FC_ERROR_OUT_OF_MEMORY;
  f->dptr = dptr;
  pthread_t th;
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  int e = cuEventCreate(&f->event, 0);
  if (e == FC_SUCCESS) e = cuEventRecord(f->event, stream);
  if (e == FC_SUCCESS && pthread_create(&th, &at, free_later, f) != 0) e = FC_ERROR_OUT_OF_MEMORY;
  pthread_attr_destroy(&at);
  if (e != FC_SUCCESS) {
    if (f->event) cuEventDestroy_v2(f->event);
    free(f);
  }
  return e;
}
