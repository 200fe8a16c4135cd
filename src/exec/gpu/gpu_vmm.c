/* VMM memory and peer descriptions of device allocations (gpu_vmm.h). */
#include "exec/gpu/gpu_vmm.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exec/gpu/gpu_fdpass.h"
#include "transport/cuda_driver.h"
#include "util/log.h"
#include "util/status.h"

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
  int type, id; /* CU_MEM_LOCATION_TYPE_DEVICE, ordinal */
} CUmemLocation;
typedef struct {
  int loc_type, loc_id;
  int flags;
} CUmemAccessDesc;
#define CU_MEM_ALLOCATION_TYPE_PINNED 1
#define CU_MEM_LOCATION_TYPE_DEVICE 1
#define CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR 1
#define CU_MEM_ACCESS_FLAGS_PROT_READWRITE 3
#define CU_MEM_ALLOC_GRANULARITY_RECOMMENDED 1
#define CU_POINTER_ATTRIBUTE_IS_MANAGED 8
#define CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE 10
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
  CUresult (*get_access)(unsigned long long*, const CUmemLocation*, CUdeviceptr);
  CUresult (*retain)(CUmemGenericAllocationHandle*, void*);
  CUresult (*export_)(void*, CUmemGenericAllocationHandle, int, unsigned long long);
  CUresult (*import)(CUmemGenericAllocationHandle*, void*, int);
  CUresult (*device_count)(int*);
  CUresult (*can_access_peer)(int*, CUdevice, CUdevice);
  bool all;
} vmm;
static pthread_once_t vmm_once = PTHREAD_ONCE_INIT;

static void vmm_find(void) {
  void** f[] = {(void**)&vmm.granularity,  (void**)&vmm.create,         (void**)&vmm.release,
                (void**)&vmm.reserve,      (void**)&vmm.address_free,   (void**)&vmm.map,
                (void**)&vmm.unmap,        (void**)&vmm.set_access,     (void**)&vmm.get_access,
                (void**)&vmm.retain,       (void**)&vmm.export_,        (void**)&vmm.import,
                (void**)&vmm.device_count, (void**)&vmm.can_access_peer};
  const char* names[] = {"cuMemGetAllocationGranularity",
                         "cuMemCreate",
                         "cuMemRelease",
                         "cuMemAddressReserve",
                         "cuMemAddressFree",
                         "cuMemMap",
                         "cuMemUnmap",
                         "cuMemSetAccess",
                         "cuMemGetAccess",
                         "cuMemRetainAllocationHandle",
                         "cuMemExportToShareableHandle",
                         "cuMemImportFromShareableHandle",
                         "cuDeviceGetCount",
                         "cuDeviceCanAccessPeer"};
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

/* Grants `device` access to [p, p + bytes), and with peers every other device that can access
 * `device`'s memory as a peer, as NCCL's ncclMemAlloc does: ranks that are threads of one
 * process on other devices reach the memory in place only once granted (a device touching VMM
 * memory it was not granted faults, and the fault is sticky). A peer the driver refuses is left
 * out: its rank then stages (gpu_reg.c asks cuMemGetAccess). */
static CUresult grant(CUdeviceptr p, size_t bytes, int device, bool peers) {
  CUmemAccessDesc d = {CU_MEM_LOCATION_TYPE_DEVICE, device, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  CUresult e = vmm.set_access(p, bytes, &d, 1);
  int n = 0;
  if (e != CUDA_SUCCESS || !peers || vmm.device_count(&n) != CUDA_SUCCESS) return e;
  for (int o = 0; o < n; o++) {
    int can = 0;
    if (o == device || vmm.can_access_peer(&can, o, device) != CUDA_SUCCESS || !can) continue;
    d.loc_id = o;
    if (vmm.set_access(p, bytes, &d, 1) != CUDA_SUCCESS)
      SHUNT_INFO(SHUNT_ALLOC, "device %d may not reach VMM memory of device %d: its ranks stage it", o,
                 device);
  }
  return CUDA_SUCCESS;
}

/* Reserves, maps h there and grants access (grant); the mapping holds h from then on. */
static CUresult map_handle(CUmemGenericAllocationHandle h, size_t bytes, size_t align, int device, bool peers,
                           CUdeviceptr* out) {
  CUdeviceptr p = 0;
  CUresult e = vmm.reserve(&p, bytes, align, 0, 0);
  if (e != CUDA_SUCCESS) return e;
  e = vmm.map(p, bytes, 0, h, 0);
  if (e == CUDA_SUCCESS) {
    e = grant(p, bytes, device, peers);
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
    return SHUNT_E_CUDA;
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
    return SHUNT_E_CUDA;
  }
  size_t n = (bytes ? bytes : 1) + g - 1;
  n -= n % g;
  CUmemGenericAllocationHandle h = 0;
  e = vmm.create(&h, n, &prop, 0);
  if (e != CUDA_SUCCESS) {
    snprintf(err, len, "cuMemCreate of %zu bytes: %s", n, shunt_cu_error(e));
    return e == CUDA_ERROR_OUT_OF_MEMORY ? SHUNT_E_NOMEM : SHUNT_E_CUDA;
  }
  CUdeviceptr p = 0;
  e = map_handle(h, n, g, device, true, &p);
  vmm.release(h); /* the mapping keeps the memory */
  if (e != CUDA_SUCCESS) {
    snprintf(err, len, "mapping %zu bytes of VMM memory: %s", n, shunt_cu_error(e));
    return SHUNT_E_CUDA;
  }
  *out = (void*)(uintptr_t)p;
  *mapped = n;
  return 0;
}

/* ---- Descriptors offered to peers ----------------------------------------------------------- */

/* One per VMM allocation of this process that a registration exported: its descriptor, offered
 * to peer processes (gpu_fdpass.h) while a registration holds it. A descriptor keeps the
 * allocation's memory alive even once its owner unmapped and released it, so it is closed with
 * the last registration that holds it (or the allocation's ncclMemFree). */
struct exported {
  CUdeviceptr start;
  uint64_t buffer_id;
  int fd;
  int refs; /* registrations holding it */
  struct shunt_fdpass_ticket ticket;
  struct exported* next;
};
static pthread_mutex_t exp_mu = PTHREAD_MUTEX_INITIALIZER;
static struct exported* exports;

static void drop_locked(struct exported** pp) {
  struct exported* x = *pp;
  *pp = x->next;
  shunt_fdpass_withdraw(&x->ticket);
  close(x->fd);
  free(x);
}

void shunt_gpu_vmm_free(void* p, size_t mapped) {
  if (!p || !have_vmm()) return;
  pthread_mutex_lock(&exp_mu);
  for (struct exported** pp = &exports; *pp;)
    if ((*pp)->start == (CUdeviceptr)(uintptr_t)p)
      drop_locked(pp);
    else
      pp = &(*pp)->next;
  pthread_mutex_unlock(&exp_mu);
  vmm.unmap((CUdeviceptr)(uintptr_t)p, mapped);
  vmm.address_free((CUdeviceptr)(uintptr_t)p, mapped);
}

/* ---- Peer descriptions -------------------------------------------------------------------- */

#define VMM_MAGIC 0x326d6d76746e6873ull /* "shntvmm2" */
struct vmm_desc {
  uint64_t magic;
  uint64_t size;
  struct shunt_fdpass_ticket ticket; /* where the owner offers its descriptor */
};
_Static_assert(sizeof(struct vmm_desc) == sizeof(CUipcMemHandle), "a VMM description fits an IPC handle");

bool shunt_gpu_peer_mem_describe(const struct shunt_cu* cu, CUdeviceptr start, CUipcMemHandle* h) {
  return cu->IpcGetMemHandle(h, start) == CUDA_SUCCESS;
}

bool shunt_gpu_vmm_exportable(const struct shunt_cu* cu, CUdeviceptr start) {
  unsigned long long types = 0;
  size_t size = 0;
  return have_vmm() &&
         cu->PointerGetAttribute(&types, CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, start) == CUDA_SUCCESS &&
         (types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) &&
         cu->PointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, start) == CUDA_SUCCESS && size > 0;
}

/* Its descriptor offered to peers (one per allocation, counted), or -1. */
static struct exported* export_locked(const struct shunt_cu* cu, CUdeviceptr start, char* err, size_t len) {
  unsigned long long id = 0;
  if (cu->PointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, start) != CUDA_SUCCESS) {
    snprintf(err, len, "no buffer id");
    return NULL;
  }
  for (struct exported* x = exports; x; x = x->next)
    if (x->start == start && x->buffer_id == id) return x;
  struct exported* x = calloc(1, sizeof(*x));
  CUmemGenericAllocationHandle h = 0;
  int fd = -1;
  CUresult e = x ? vmm.retain(&h, (void*)(uintptr_t)start) : CUDA_ERROR_OUT_OF_MEMORY;
  if (e == CUDA_SUCCESS) {
    e = vmm.export_(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    vmm.release(h);
  }
  if (e != CUDA_SUCCESS) {
    snprintf(err, len, "exporting its descriptor: %s", shunt_cu_error(e));
    free(x);
    return NULL;
  }
  if (shunt_fdpass_offer(fd, &x->ticket, err, len) != 0) {
    close(fd);
    free(x);
    return NULL;
  }
  x->start = start;
  x->buffer_id = id;
  x->fd = fd;
  x->next = exports;
  exports = x;
  return x;
}

bool shunt_gpu_vmm_export(const struct shunt_cu* cu, CUdeviceptr start, CUipcMemHandle* h) {
  size_t size = 0;
  char why[256] = "";
  if (!have_vmm() || cu->PointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, start) != CUDA_SUCCESS)
    return false;
  pthread_mutex_lock(&exp_mu);
  struct exported* x = export_locked(cu, start, why, sizeof(why));
  struct vmm_desc d;
  memset(&d, 0, sizeof(d));
  if (x) {
    x->refs++;
    d.magic = VMM_MAGIC;
    d.size = size;
    d.ticket = x->ticket;
  }
  pthread_mutex_unlock(&exp_mu);
  if (!x)
    SHUNT_INFO(SHUNT_ALLOC, "VMM memory at %#llx is not offered to peers: %s", (unsigned long long)start,
               why);
  memcpy(h, &d, sizeof(d));
  return x != NULL;
}

void shunt_gpu_vmm_unexport(const CUipcMemHandle* h) {
  struct vmm_desc d;
  memcpy(&d, h, sizeof(d));
  if (d.magic != VMM_MAGIC) return;
  pthread_mutex_lock(&exp_mu);
  for (struct exported** pp = &exports; *pp; pp = &(*pp)->next)
    if ((*pp)->ticket.key == d.ticket.key) {
      if (--(*pp)->refs == 0) drop_locked(pp);
      break;
    }
  pthread_mutex_unlock(&exp_mu);
}

bool shunt_gpu_mem_reachable(const struct shunt_cu* cu, CUdeviceptr p, uint64_t bytes, CUdevice device) {
  int owner = -1, legacy = 0, managed = 0;
  if (cu->PointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p) != CUDA_SUCCESS) return false;
  if (owner == device) return true;
  /* cuMemAlloc memory: the world enabled peer access between the ranks' devices. Managed
   * memory: every device reaches it. */
  if (cu->PointerGetAttribute(&legacy, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, p) == CUDA_SUCCESS &&
      legacy)
    return true;
  if (cu->PointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, p) == CUDA_SUCCESS && managed)
    return true;
  /* VMM memory: only what cuMemSetAccess granted this device, at both ends of the range (access
   * is set per mapped range). Anything else (a stream-ordered pool's, whose access its pool
   * sets) is not known to be reachable. */
  CUmemLocation at = {CU_MEM_LOCATION_TYPE_DEVICE, device};
  unsigned long long lo = 0, hi = 0;
  return have_vmm() && vmm.get_access(&lo, &at, p) == CUDA_SUCCESS &&
         vmm.get_access(&hi, &at, p + (bytes ? bytes - 1 : 0)) == CUDA_SUCCESS &&
         lo == CU_MEM_ACCESS_FLAGS_PROT_READWRITE && hi == CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
}

/* ---- Peers' allocations mapped here ------------------------------------------------------- */

/* Peers' VMM allocations mapped here, to unmap by base. */
struct opened {
  CUdeviceptr base;
  size_t size;
  struct opened* next;
};
static pthread_mutex_t open_mu = PTHREAD_MUTEX_INITIALIZER;
static struct opened* opens;
static atomic_flag warned = ATOMIC_FLAG_INIT;

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
  char why[256] = "";
  int fd = shunt_fdpass_take(&d.ticket, why, sizeof(why));
  if (fd < 0) {
    /* One WARN a process: every later registration would say the same. */
    if (!atomic_flag_test_and_set(&warned))
      SHUNT_WARN(
          "a peer process's VMM memory descriptor cannot pass to this process (%s): registered VMM buffers "
          "(ncclMemAlloc, expandable segments) of other processes are staged",
          why);
    else
      SHUNT_INFO(SHUNT_INIT, "no copy of a peer's VMM memory descriptor: %s", why);
    free(o);
    return CUDA_ERROR_INVALID_VALUE;
  }
  CUmemGenericAllocationHandle mh = 0;
  CUresult e = vmm.import(&mh, (void*)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  close(fd);
  if (e == CUDA_SUCCESS) {
    /* Only this rank's kernels use this mapping (every rank maps its peers itself). */
    e = map_handle(mh, d.size, 0, dev, false, base);
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
