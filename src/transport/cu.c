#include "transport/cu.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "transport/cuda_driver.h"

/* Versioned names where the driver keeps an older ABI under the plain one (a plain cuMemAlloc
 * takes 32-bit sizes); the legacy default-stream forms, which the caller's streams select
 * through their own handles as with the runtime. */
static const struct {
  const char* name;
  size_t offset;
} syms[] = {
#define S(field, name) \
  { name, offsetof(struct shunt_cu, field) }
    S(GetErrorString, "cuGetErrorString"),
    S(DeviceGet, "cuDeviceGet"),
    S(DeviceGetAttribute, "cuDeviceGetAttribute"),
    S(DeviceGetName, "cuDeviceGetName"),
    S(DeviceGetPCIBusId, "cuDeviceGetPCIBusId"),
    S(DeviceGetByPCIBusId, "cuDeviceGetByPCIBusId"),
    S(DeviceGetP2PAttribute, "cuDeviceGetP2PAttribute"),
    S(DeviceCanAccessPeer, "cuDeviceCanAccessPeer"),
    S(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"),
    S(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2"),
    S(StreamGetCtx, "cuStreamGetCtx"),
    S(CtxGetCurrent, "cuCtxGetCurrent"),
    S(CtxSetCurrent, "cuCtxSetCurrent"),
    S(CtxGetDevice, "cuCtxGetDevice"),
    S(CtxEnablePeerAccess, "cuCtxEnablePeerAccess"),
    S(PointerGetAttribute, "cuPointerGetAttribute"),
    S(MemAlloc, "cuMemAlloc_v2"),
    S(MemFree, "cuMemFree_v2"),
    S(MemHostAlloc, "cuMemHostAlloc"),
    S(MemFreeHost, "cuMemFreeHost"),
    S(MemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2"),
    S(MemcpyAsync, "cuMemcpyAsync"),
    S(MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2"),
    S(MemcpyHtoD, "cuMemcpyHtoD_v2"),
    S(MemsetD8Async, "cuMemsetD8Async"),
    S(IpcGetMemHandle, "cuIpcGetMemHandle"),
    S(IpcOpenMemHandle, "cuIpcOpenMemHandle_v2"),
    S(IpcCloseMemHandle, "cuIpcCloseMemHandle"),
    S(StreamCreate, "cuStreamCreate"),
    S(StreamDestroy, "cuStreamDestroy_v2"),
    S(StreamSynchronize, "cuStreamSynchronize"),
    S(StreamWaitEvent, "cuStreamWaitEvent"),
    S(StreamIsCapturing, "cuStreamIsCapturing"),
    S(ThreadExchangeStreamCaptureMode, "cuThreadExchangeStreamCaptureMode"),
    S(EventCreate, "cuEventCreate"),
    S(EventDestroy, "cuEventDestroy_v2"),
    S(EventRecord, "cuEventRecord"),
    S(EventSynchronize, "cuEventSynchronize"),
    S(EventQuery, "cuEventQuery"),
    S(MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2"),
    S(ModuleLoadData, "cuModuleLoadData"),
    S(ModuleGetFunction, "cuModuleGetFunction"),
    S(FuncGetAttribute, "cuFuncGetAttribute"),
    S(OccupancyMaxActiveBlocksPerMultiprocessor, "cuOccupancyMaxActiveBlocksPerMultiprocessor"),
    S(LaunchKernel, "cuLaunchKernel"),
#undef S
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct shunt_cu table;
/* Set once the table is whole; read without the lock afterwards. */
static int found;

const struct shunt_cu* shunt_cu(char* err, size_t len) {
  if (__atomic_load_n(&found, __ATOMIC_ACQUIRE)) return &table;
  pthread_mutex_lock(&mu);
  const char* missing = NULL;
  if (!found) {
    for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]) && !missing; i++) {
      void* f = shunt_driver_sym(syms[i].name);
      if (!f)
        missing = syms[i].name;
      else
        memcpy((char*)&table + syms[i].offset, &f, sizeof(f));
    }
    if (!missing) {
      void* f = shunt_driver_sym("cuMemGetHandleForAddressRange");
      memcpy(&table.MemGetHandleForAddressRange, &f, sizeof(f));
      /* All of these or none. */
      void* g[4] = {shunt_driver_sym("cuStreamGetCaptureInfo_v2"), shunt_driver_sym("cuUserObjectCreate"),
                    shunt_driver_sym("cuUserObjectRelease"), shunt_driver_sym("cuGraphRetainUserObject")};
      if (g[0] && g[1] && g[2] && g[3]) {
        memcpy(&table.StreamGetCaptureInfo, &g[0], sizeof(g[0]));
        memcpy(&table.UserObjectCreate, &g[1], sizeof(g[1]));
        memcpy(&table.UserObjectRelease, &g[2], sizeof(g[2]));
        memcpy(&table.GraphRetainUserObject, &g[3], sizeof(g[3]));
      }
      f = shunt_driver_sym("cuEventElapsedTime_v2");
      if (!f) f = shunt_driver_sym("cuEventElapsedTime");
      memcpy(&table.EventElapsedTime, &f, sizeof(f));
      f = shunt_driver_sym("cuCtxGetId");
      memcpy(&table.CtxGetId, &f, sizeof(f));
      f = shunt_driver_sym("cuGetErrorName");
      memcpy(&table.GetErrorName, &f, sizeof(f));
      __atomic_store_n(&found, 1, __ATOMIC_RELEASE);
    }
  }
  pthread_mutex_unlock(&mu);
  if (!missing) return &table;
  if (err && len) {
    if (!shunt_driver_sym("cuInit"))
      snprintf(err, len, "the CUDA driver (libcuda.so.1) is not loaded in this process");
    else
      snprintf(err, len, "the CUDA driver has no %s (too old a driver)", missing);
  }
  return NULL;
}

struct shunt_cu_guard shunt_cu_enter(const struct shunt_cu* cu, CUcontext ctx, int relaxed) {
  struct shunt_cu_guard g = {cu, NULL, 0, 0, CU_STREAM_CAPTURE_MODE_RELAXED};
  if (!cu) return g;
  g.known = cu->CtxGetCurrent(&g.prev) == CUDA_SUCCESS;
  if (ctx && (!g.known || g.prev != ctx)) cu->CtxSetCurrent(ctx);
  if (relaxed) g.relaxed = cu->ThreadExchangeStreamCaptureMode(&g.mode) == CUDA_SUCCESS;
  return g;
}

void shunt_cu_leave(const struct shunt_cu_guard* g) {
  if (!g->cu) return;
  if (g->relaxed) {
    int mode = g->mode;
    g->cu->ThreadExchangeStreamCaptureMode(&mode);
  }
  CUcontext cur = NULL;
  if (g->known && g->cu->CtxGetCurrent(&cur) == CUDA_SUCCESS && cur != g->prev) g->cu->CtxSetCurrent(g->prev);
}

const char* shunt_cu_error(CUresult e) {
  const char *name = NULL, *words = NULL;
  if (__atomic_load_n(&found, __ATOMIC_ACQUIRE)) {
    if (table.GetErrorName && table.GetErrorName(e, &name) != CUDA_SUCCESS) name = NULL;
    if (table.GetErrorString(e, &words) != CUDA_SUCCESS) words = NULL;
  }
  static _Thread_local char buf[192];
  if (name && words)
    snprintf(buf, sizeof(buf), "%s (%s)", name, words);
  else if (name || words)
    snprintf(buf, sizeof(buf), "%s", name ? name : words);
  else
    snprintf(buf, sizeof(buf), "CUDA error %d", e);
  return buf;
}
