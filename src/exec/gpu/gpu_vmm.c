/* VMM memory and peer descriptions of device allocations (gpu_vmm.h). */
#include "exec/gpu/gpu_vmm.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "transport/cuda_driver.h"
#include "util/log.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

/* From the CUDA driver API (cuda.h). */
typedef unsigned long long CUmemGenericAllocationHandle;
typedef struct {
  int type; /* CU_MEM_ALLOCATION_TYPE_PINNED */
  int requested_handle_types;
  int loc_type, loc_id; /* CU_MEM_LOCATION_TYPE_DEVICE, ordinal */
  void* win32_metadata;
  unsigned char alloc_flags[8];
} CUmemAllocationProp;
typedef struct {
  int loc_type, loc_id;
  int flags;
} CUmemAccessDesc;
#define CU_MEM_ALLOCATION_TYPE_PINNED 1
#define CU_MEM_LOCATION_TYPE_DEVICE 1
#define CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR 1
#define CU_MEM_ACCESS_FLAGS_PROT_READWRITE 3
#define CU_MEM_ALLOC_GRANULARITY_RECOMMENDED 1
#define CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES 14

static struct {
  CUresult (*granularity)(size_t*, const CUmemAllocationProp*, int);
  CUresult (*create)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*, unsigned long long);
  CUresult (*release)(CUmemGenericAllocationHandle);
  CUresult (*reserve)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long);
  CUresult (*address_free)(CUdeviceptr, size_t);
  CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
  CUresult (*unmap)(CUdeviceptr, size_t);
  CUresult (*set_access)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t);
  CUresult (*retain)(CUmemGenericAllocationHandle*, void*);
  CUresult (*export_)(void*, CUmemGenericAllocationHandle, int, unsigned long long);
  CUresult (*import)(CUmemGenericAllocationHandle*, void*, int);
  bool all;
} vmm;
static pthread_once_t vmm_once = PTHREAD_ONCE_INIT;

static void vmm_find(void) {
  void** f[] = {(void**)&vmm.granularity, (void**)&vmm.create,       (void**)&vmm.release,
                (void**)&vmm.reserve,     (void**)&vmm.address_free, (void**)&vmm.map,
                (void**)&vmm.unmap,       (void**)&vmm.set_access,   (void**)&vmm.retain,
                (void**)&vmm.export_,     (void**)&vmm.import};
  const char* names[] = {"cuMemGetAllocationGranularity",
                         "cuMemCreate",
                         "cuMemRelease",
                         "cuMemAddressReserve",
                         "cuMemAddressFree",
                         "cuMemMap",
                         "cuMemUnmap",
                         "cuMemSetAccess",
                         "cuMemRetainAllocationHandle",
                         "cuMemExportToShareableHandle",
                         "cuMemImportFromShareableHandle"};
  vmm.all = true;
  for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) {
    *f[i] = shunt_driver_sym(names[i]);
    vmm.all = vmm.all && *f[i];
  }
}
static bool have_vmm(void) {
  pthread_once(&vmm_once, vmm_find);
  return vmm.all;
}

/* Reserves, maps h there and grants `device` access; the mapping holds h from then on. */
static CUresult map_handle(CUmemGenericAllocationHandle h, size_t bytes, size_t align, int device,
                           CUdeviceptr* out) {
  CUdeviceptr p = 0;
  CUresult e = vmm.reserve(&p, bytes, align, 0, 0);
  if (e != CUDA_SUCCESS) return e;
  e = vmm.map(p, bytes, 0, h, 0);
  if (e == CUDA_SUCCESS) {
    CUmemAccessDesc d = {CU_MEM_LOCATION_TYPE_DEVICE, device, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    e = vmm.set_access(p, bytes, &d, 1);
    if (e != CUDA_SUCCESS) vmm.unmap(p, bytes);
  }
  if (e != CUDA_SUCCESS) {
    vmm.address_free(p, bytes);
    return e;
  }
  *out = p;
  return CUDA_SUCCESS;
}

int shunt_gpu_vmm_alloc(size_t bytes, int device, void** out, size_t* mapped, char* err, size_t len) {
  if (!have_vmm()) {
    snprintf(err, len, "the CUDA driver has no virtual memory management");
    return -1;
  }
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof(prop));
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.requested_handle_types = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  prop.loc_type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.loc_id = device;
  size_t g = 0;
  CUresult e = vmm.granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
  if (e != CUDA_SUCCESS || g == 0) {
    snprintf(err, len, "cuMemGetAllocationGranularity: %s", shunt_cu_error(e));
    return -1;
  }
  size_t n = (bytes ? bytes : 1) + g - 1;
  n -= n % g;
  CUmemGenericAllocationHandle h = 0;
  e = vmm.create(&h, n, &prop, 0);
  if (e != CUDA_SUCCESS) {
    snprintf(err, len, "cuMemCreate of %zu bytes: %s", n, shunt_cu_error(e));
    return -1;
  }
  CUdeviceptr p = 0;
  e = map_handle(h, n, g, device, &p);
  vmm.release(h); /* the mapping keeps the memory */
  if (e != CUDA_SUCCESS) {
    snprintf(err, len, "mapping %zu bytes of VMM memory: %s", n, shunt_cu_error(e));
    return -1;
  }
  *out = (void*)(uintptr_t)p;
  *mapped = n;
  return 0;
}

/* ---- Descriptors kept open for peers ------------------------------------------------------- */

/* One per exported allocation of this process: peers take a copy of it (pidfd_getfd) while
 * the registration exchange runs, so it stays open as long as the allocation may be asked for. */
struct exported {
  CUdeviceptr start;
  uint64_t buffer_id;
  int fd;
  struct exported* next;
};
static pthread_mutex_t exp_mu = PTHREAD_MUTEX_INITIALIZER;
static struct exported* exports;

static void forget_locked(CUdeviceptr start) {
  for (struct exported** pp = &exports; *pp; pp = &(*pp)->next)
    if ((*pp)->start == start) {
      struct exported* x = *pp;
      *pp = x->next;
      close(x->fd);
      free(x);
      return;
    }
}

void shunt_gpu_vmm_free(void* p, size_t mapped) {
  if (!p || !have_vmm()) return;
  pthread_mutex_lock(&exp_mu);
  forget_locked((CUdeviceptr)(uintptr_t)p);
  pthread_mutex_unlock(&exp_mu);
  vmm.unmap((CUdeviceptr)(uintptr_t)p, mapped);
  vmm.address_free((CUdeviceptr)(uintptr_t)p, mapped);
}

/* ---- Peer descriptions -------------------------------------------------------------------- */

#define VMM_MAGIC 0x316d6d76746e6873ull /* "shntvmm1" */
struct vmm_desc {
  uint64_t magic;
  int64_t pid;
  int32_t fd;
  int32_t pad;
  uint64_t size;
  char rest[32];
};
_Static_assert(sizeof(struct vmm_desc) == sizeof(CUipcMemHandle), "a VMM description fits an IPC handle");

/* The exported descriptor of the VMM allocation at start (one per allocation), or -1. */
static int exported_fd(const struct shunt_cu* cu, CUdeviceptr start) {
  unsigned long long id = 0;
  if (cu->PointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, start) != CUDA_SUCCESS) return -1;
  int fd = -1;
  pthread_mutex_lock(&exp_mu);
  for (struct exported* x = exports; x && fd < 0; x = x->next)
    if (x->start == start && x->buffer_id == id) fd = x->fd;
  if (fd < 0) {
    forget_locked(start); /* an allocation that was freed: another now starts there */
    CUmemGenericAllocationHandle h = 0;
    struct exported* x = malloc(sizeof(*x));
    if (x && vmm.retain(&h, (void*)(uintptr_t)start) == CUDA_SUCCESS) {
      if (vmm.export_(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) != CUDA_SUCCESS) fd = -1;
      vmm.release(h);
    }
    if (fd >= 0) {
      *x = (struct exported){start, id, fd, exports};
      exports = x;
    } else {
      free(x);
    }
  }
  pthread_mutex_unlock(&exp_mu);
  return fd;
}

bool shunt_gpu_peer_mem_describe(const struct shunt_cu* cu, CUdeviceptr start, CUipcMemHandle* h) {
  if (cu->IpcGetMemHandle(h, start) == CUDA_SUCCESS) return true;
  /* Not cuMemAlloc memory: VMM memory whose handle exports as a file descriptor? */
  unsigned long long types = 0;
  size_t size = 0;
  if (!have_vmm() ||
      cu->PointerGetAttribute(&types, CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, start) != CUDA_SUCCESS ||
      !(types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) ||
      cu->PointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, start) != CUDA_SUCCESS || size == 0)
    return false;
  int fd = exported_fd(cu, start);
  if (fd < 0) return false;
  struct vmm_desc d;
  memset(&d, 0, sizeof(d));
  d.magic = VMM_MAGIC;
  d.pid = getpid();
  d.fd = fd;
  d.size = size;
  memcpy(h, &d, sizeof(d));
  return true;
}

/* Peers' VMM allocations mapped here, to unmap by base. */
struct opened {
  CUdeviceptr base;
  size_t size;
  struct opened* next;
};
static pthread_mutex_t open_mu = PTHREAD_MUTEX_INITIALIZER;
static struct opened* opens;

CUresult shunt_gpu_peer_mem_open(const struct shunt_cu* cu, const CUipcMemHandle* h, CUdeviceptr* base) {
  struct vmm_desc d;
  memcpy(&d, h, sizeof(d));
  if (d.magic != VMM_MAGIC) return cu->IpcOpenMemHandle(base, *h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
  CUdevice dev = 0;
  struct opened* o = malloc(sizeof(*o));
  if (!o || !have_vmm() || cu->CtxGetDevice(&dev) != CUDA_SUCCESS) {
    free(o);
    return CUDA_ERROR_INVALID_VALUE;
  }
  /* The owner's descriptor, copied into this process (needs the right to trace it: same user,
   * and a ptrace scope that allows it). */
  int pfd = (int)syscall(SYS_pidfd_open, (pid_t)d.pid, 0);
  int fd = pfd >= 0 ? (int)syscall(SYS_pidfd_getfd, pfd, d.fd, 0) : -1;
  int why = errno;
  if (pfd >= 0) close(pfd);
  if (fd < 0) {
    SHUNT_INFO(SHUNT_INIT, "no copy of process %lld's VMM memory descriptor: %s", (long long)d.pid,
               strerror(why));
    free(o);
    return CUDA_ERROR_INVALID_VALUE;
  }
  CUmemGenericAllocationHandle mh = 0;
  CUresult e = vmm.import(&mh, (void*)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  close(fd);
  if (e == CUDA_SUCCESS) {
    e = map_handle(mh, d.size, 0, dev, base);
    vmm.release(mh);
  }
  if (e != CUDA_SUCCESS) {
    free(o);
    return e;
  }
  o->base = *base;
  o->size = d.size;
  pthread_mutex_lock(&open_mu);
  o->next = opens;
  opens = o;
  pthread_mutex_unlock(&open_mu);
  return CUDA_SUCCESS;
}

void shunt_gpu_peer_mem_close(const struct shunt_cu* cu, CUdeviceptr base) {
  struct opened* o = NULL;
  pthread_mutex_lock(&open_mu);
  for (struct opened** pp = &opens; *pp; pp = &(*pp)->next)
    if ((*pp)->base == base) {
      o = *pp;
      *pp = o->next;
      break;
    }
  pthread_mutex_unlock(&open_mu);
  if (!o) {
    cu->IpcCloseMemHandle(base);
    return;
  }
  vmm.unmap(o->base, o->size);
  vmm.address_free(o->base, o->size);
  free(o);
}
