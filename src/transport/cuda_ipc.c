/* CUDA IPC mappings (cuda_ipc.h). */
#include "transport/cuda_ipc.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "transport/nvml.h"
#include "util/host.h"
#include "util/status.h"

#define DP(p) ((CUdeviceptr)(uintptr_t)(p))

void shunt_cuda_peer_describe(const struct shunt_cu* cu, int dev, char* region, struct shunt_cuda_peer* me) {
  me->proc = shunt_process_token();
  me->hostid = shunt_host_identity();
  gethostname(me->host, sizeof(me->host) - 1);
  if (cu->DeviceGetPCIBusId(me->busid, sizeof(me->busid), dev) != CUDA_SUCCESS)
    snprintf(me->busid, sizeof(me->busid), "device %d", dev);
  me->device = dev;
  me->region = (uint64_t)(uintptr_t)region;
  /* Only peers in other processes need the handle; failing to export is an error only then. */
  me->has_handle = cu->IpcGetMemHandle(&me->handle, DP(region)) == CUDA_SUCCESS;
}

int shunt_cuda_peer_map(const struct shunt_cu* cu, uint32_t rank, const struct shunt_cuda_peer* me,
                        uint32_t r, const struct shunt_cuda_peer* c, char** out, bool* ipc, char* err,
                        size_t len) {
  CUresult e;
  *out = NULL;
  *ipc = false;
  /* Signals and semaphores are atomics on the peer's memory: a pair of devices without native
   * peer atomics (PCIe-only) would lose increments. The driver answers for a device this
   * process sees; NVML, by bus id, for one it does not (CUDA_VISIBLE_DEVICES set per rank).
   * A pair whose capabilities cannot be established is refused, not mapped. */
  if (strcmp(c->busid, me->busid) != 0) {
    CUdevice peer_dev = -1;
    int atomics = -1, v = 0;
    if (c->proc == me->proc)
      peer_dev = c->device;
    else if (cu->DeviceGetByPCIBusId(&peer_dev, c->busid) != CUDA_SUCCESS)
      peer_dev = -1;
    if (peer_dev >= 0 && cu->DeviceGetP2PAttribute(&v, CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED,
                                                   me->device, peer_dev) == CUDA_SUCCESS)
      atomics = v != 0;
    if (atomics < 0) atomics = shunt_nvml_peer_atomics(me->busid, c->busid);
    if (atomics != 1) {
      snprintf(err, len,
               atomics == 0
                   ? "devices %s (rank %u) and %s (rank %u) have no native peer atomics (a PCIe-only "
                     "pair): the GPU backend needs them for its signals"
                   : "the peer capabilities of devices %s (rank %u) and %s (rank %u) cannot be "
                     "established (the device is not visible here and NVML cannot tell): the GPU "
                     "backend needs native peer atomics for its signals",
               me->busid, rank, c->busid, r);
      return SHUNT_E_INVALID;
    }
  }
  if (c->proc == me->proc) {
    /* Same process: the pointer is valid here; another device needs peer access. */
    if (c->device != me->device) {
      int can = 0;
      CUcontext pctx = NULL;
      if (cu->DeviceCanAccessPeer(&can, me->device, c->device) != CUDA_SUCCESS || !can) {
        snprintf(err, len, "device %d (rank %u) cannot access device %d (rank %u)", me->device, rank,
                 c->device, r);
        return SHUNT_E_INVALID;
      }
      /* The peer's rank holds its own retain of that context for as long as its world lives;
       * this one only names it. */
      e = cu->DevicePrimaryCtxRetain(&pctx, c->device);
      if (e == CUDA_SUCCESS) {
        e = cu->CtxEnablePeerAccess(pctx, 0);
        cu->DevicePrimaryCtxRelease(c->device);
      }
      if (e != CUDA_SUCCESS && e != CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) {
        snprintf(err, len, "cuCtxEnablePeerAccess(device %d): %s", c->device, shunt_cu_error(e));
        return SHUNT_E_CUDA;
      }
    }
    *out = (char*)(uintptr_t)c->region;
    return 0;
  }
  if (!c->has_handle) {
    snprintf(err, len, "rank %u (another process) could not export its memory through CUDA IPC", r);
    return SHUNT_E_PEER;
  }
  CUdeviceptr p = 0;
  e = cu->IpcOpenMemHandle(&p, c->handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
  if (e != CUDA_SUCCESS) {
    snprintf(err, len, "cuIpcOpenMemHandle for rank %u: %s", r, shunt_cu_error(e));
    return SHUNT_E_CUDA;
  }
  *out = (char*)(uintptr_t)p;
  *ipc = true;
  return 0;
}

void shunt_cuda_peer_unmap(const struct shunt_cu* cu, char* base, bool ipc) {
  if (ipc && base) cu->IpcCloseMemHandle(DP(base));
}
