/* The CUDA driver calls the GPU backend and its transports (CUDA IPC, the GPU proxy) make, found
 * at run time in the driver the process has already loaded (transport/cuda_driver.h): libshunt
 * has no link dependency on CUDA, a process without CUDA loads it and never gets here, and a
 * test double of the driver (tests/fakecuda) serves the same calls. The driver's types and
 * constants are declared here from its published ABI, so this builds without the CUDA toolkit.
 *
 * Promises: shunt_cu() returns the table with every entry set (but those marked optional), or
 * NULL with a message when the driver is not in the process or lacks one of them; the table
 * never changes once found. Safe from any thread. */
#ifndef SHUNT_TRANSPORT_CU_H
#define SHUNT_TRANSPORT_CU_H

#include <stddef.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st* CUcontext;
typedef struct CUstream_st* CUstream;
typedef struct CUevent_st* CUevent;
typedef struct CUmod_st* CUmodule;
typedef struct CUfunc_st* CUfunction;
typedef struct {
  char reserved[64];
} CUipcMemHandle;

enum {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_INVALID_IMAGE = 200,
  CUDA_ERROR_INVALID_CONTEXT = 201,
  CUDA_ERROR_NOT_FOUND = 500,
  CUDA_ERROR_NOT_READY = 600,
  CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704,
  CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
  CU_DEVICE_ATTRIBUTE_MPS_ENABLED = 133,
  CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0,
  CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED = 3,
  CU_MEMHOSTALLOC_PORTABLE = 1,
  CU_MEMHOSTALLOC_DEVICEMAP = 2,
  CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 1,
  CU_STREAM_NON_BLOCKING = 1,
  CU_EVENT_DISABLE_TIMING = 2,
  CU_STREAM_CAPTURE_STATUS_NONE = 0,
  CU_STREAM_CAPTURE_MODE_RELAXED = 2,
  CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2,
  CU_POINTER_ATTRIBUTE_BUFFER_ID = 7,
  CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9,
  CU_POINTER_ATTRIBUTE_RANGE_START_ADDR = 11,
  CU_POINTER_ATTRIBUTE_RANGE_SIZE = 12,
  CU_MEMORYTYPE_DEVICE = 2
};

struct shunt_cu {
  CUresult (*GetErrorString)(CUresult, const char**);
  CUresult (*DeviceGet)(CUdevice*, int);
  CUresult (*DeviceGetAttribute)(int*, int, CUdevice);
  CUresult (*DeviceGetName)(char*, int, CUdevice);
  CUresult (*DeviceGetPCIBusId)(char*, int, CUdevice);
  CUresult (*DeviceGetByPCIBusId)(CUdevice*, const char*);
  CUresult (*DeviceGetP2PAttribute)(int*, int, CUdevice, CUdevice);
  CUresult (*DeviceCanAccessPeer)(int*, CUdevice, CUdevice);
  CUresult (*DevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*DevicePrimaryCtxRelease)(CUdevice);
  CUresult (*StreamGetCtx)(CUstream, CUcontext*);
  CUresult (*CtxGetCurrent)(CUcontext*);
  CUresult (*CtxSetCurrent)(CUcontext);
  CUresult (*CtxGetDevice)(CUdevice*);
  CUresult (*CtxEnablePeerAccess)(CUcontext, unsigned);
  CUresult (*PointerGetAttribute)(void*, int, CUdeviceptr);
  CUresult (*MemAlloc)(CUdeviceptr*, size_t);
  CUresult (*MemFree)(CUdeviceptr);
  CUresult (*MemHostAlloc)(void**, size_t, unsigned);
  CUresult (*MemFreeHost)(void*);
  CUresult (*MemHostGetDevicePointer)(CUdeviceptr*, void*, unsigned);
  CUresult (*MemcpyAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*MemcpyHtoDAsync)(CUdeviceptr, const void*, size_t, CUstream);
  CUresult (*MemcpyHtoD)(CUdeviceptr, const void*, size_t);
  CUresult (*MemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
  CUresult (*IpcGetMemHandle)(CUipcMemHandle*, CUdeviceptr);
  CUresult (*IpcOpenMemHandle)(CUdeviceptr*, CUipcMemHandle, unsigned);
  CUresult (*IpcCloseMemHandle)(CUdeviceptr);
  CUresult (*StreamCreate)(CUstream*, unsigned);
  CUresult (*StreamDestroy)(CUstream);
  CUresult (*StreamSynchronize)(CUstream);
  CUresult (*StreamWaitEvent)(CUstream, CUevent, unsigned);
  CUresult (*StreamIsCapturing)(CUstream, int*);
  CUresult (*ThreadExchangeStreamCaptureMode)(int*);
  CUresult (*EventCreate)(CUevent*, unsigned);
  CUresult (*EventDestroy)(CUevent);
  CUresult (*EventRecord)(CUevent, CUstream);
  CUresult (*EventSynchronize)(CUevent);
  CUresult (*EventQuery)(CUevent);
  CUresult (*MemcpyDtoHAsync)(void*, CUdeviceptr, size_t, CUstream);
  CUresult (*ModuleLoadData)(CUmodule*, const void*);
  CUresult (*ModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*FuncGetAttribute)(int*, int, CUfunction);
  CUresult (*OccupancyMaxActiveBlocksPerMultiprocessor)(int*, CUfunction, int, size_t);
  CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                           CUstream, void**, void**);
  /* Optional (NULL when the driver lacks it): a dma-buf file descriptor for device memory, the
   * way a NIC registers it (CUDA 11.7 and later). */
  CUresult (*MemGetHandleForAddressRange)(void* handle, CUdeviceptr dptr, size_t size, int type,
                                          unsigned long long flags);
  /* Optional (NULL when the driver lacks it): milliseconds between two completed events
   * (cuEventElapsedTime_v2 of CUDA 12.8 and later, else the first form); in-job tuning of
   * device calls needs it. */
  CUresult (*EventElapsedTime)(float* ms, CUevent start, CUevent end);
  /* Optional (NULL when the driver lacks any of them, CUDA 11.3 and later): resources a
   * captured graph keeps alive. graph and obj are CUgraph and CUuserObject. */
  CUresult (*StreamGetCaptureInfo)(CUstream, int* status, unsigned long long* id, void** graph,
                                   const void*** deps, size_t* ndeps);
  CUresult (*UserObjectCreate)(void** obj, void* ptr, void (*destroy)(void*), unsigned initial,
                               unsigned flags);
  CUresult (*UserObjectRelease)(void* obj, unsigned count);
  CUresult (*GraphRetainUserObject)(void* graph, void* obj, unsigned count, unsigned flags);
  /* Optional (CUDA 12.0 and later): a context's identity, new when a primary context is reset
   * or released by all and made again under the same handle. */
  CUresult (*CtxGetId)(CUcontext, unsigned long long*);
  /* Optional: an error's name ("CUDA_ERROR_..."), for messages. */
  CUresult (*GetErrorName)(CUresult, const char**);
};
#define CU_USER_OBJECT_NO_DESTRUCTOR_SYNC 1
#define CU_GRAPH_USER_OBJECT_MOVE 1
#define CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD 1

const struct shunt_cu* shunt_cu(char* err, size_t len);

/* The calling thread's context and capture mode are the caller's: a guard makes `ctx` current
 * (NULL: leaves it as it is) and, when `relaxed`, the thread's capture mode relaxed (so an
 * allocation or synchronization neither fails nor invalidates another stream's capture);
 * shunt_cu_leave puts back both, whatever context the guarded code selected meanwhile. A guard
 * with a NULL cu does nothing. */
struct shunt_cu_guard {
  const struct shunt_cu* cu;
  CUcontext prev;
  int known, relaxed, mode;
};
struct shunt_cu_guard shunt_cu_enter(const struct shunt_cu* cu, CUcontext ctx, int relaxed);
void shunt_cu_leave(const struct shunt_cu_guard* g);

/* The driver's name and words for an error ("CUDA_ERROR_INVALID_VALUE (invalid argument)"; the
 * number when the driver knows neither), never NULL; valid until the thread's next call. */
const char* shunt_cu_error(CUresult e);

#endif
