/* VMM memory (cuMemCreate / cuMemMap), as NCCL's ncclMemAlloc makes it and PyTorch's
 * expandable segments hold it, and how a peer process reaches a device allocation.
 *
 * Promises:
 * - shunt_gpu_vmm_alloc makes `bytes` (rounded up to the device's granularity) of device memory
 *   on `device`: one physical allocation made shareable by POSIX file descriptor, mapped, and
 *   made readable and writable for that device and for every device that can access it as a
 *   peer (as NCCL's ncclMemAlloc); SHUNT_E_CUDA (SHUNT_E_NOMEM) with a message when the driver
 *   has no VMM or refuses (the
 *   caller may then fall back to cuMemAlloc). shunt_gpu_vmm_free undoes it, and withdraws the
 *   allocation's descriptor from peers.
 * - shunt_gpu_mem_reachable: whether kernels of `device` may touch [p, p + bytes) of memory
 *   this process holds: its own device's, cuMemAlloc memory (peer access), managed memory, or
 *   VMM memory that cuMemGetAccess shows readable and writable for `device`; false otherwise.
 * - A peer description fits the 64 bytes of a CUipcMemHandle, so a registration exchange
 *   carries either kind: for cuMemAlloc memory, the driver's IPC handle (describe); for VMM
 *   memory made shareable by file descriptor (exportable), a ticket for its descriptor, which
 *   this process offers to peers over a Unix socket (gpu_fdpass.h) from export until the last
 *   unexport of that allocation (a registration's end) or its shunt_gpu_vmm_free. Memory
 *   neither reaches (a stream-ordered pool's, VMM memory without a descriptor handle type) is
 *   staged.
 * - open maps a peer's allocation in the current context (readable and writable for its
 *   device; a descriptor that cannot pass gives one WARN a process); close unmaps what open
 *   mapped. Both in the caller's context. */
#ifndef SHUNT_EXEC_GPU_VMM_H
#define SHUNT_EXEC_GPU_VMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "transport/cu.h"

int shunt_gpu_vmm_alloc(size_t bytes, int device, void** out, size_t* mapped, char* err, size_t len);
void shunt_gpu_vmm_free(void* p, size_t mapped);

bool shunt_gpu_mem_reachable(const struct shunt_cu* cu, CUdeviceptr p, uint64_t bytes, CUdevice device);

/* The allocation starting at `start` (its CU_POINTER_ATTRIBUTE_RANGE_START_ADDR). */
bool shunt_gpu_peer_mem_describe(const struct shunt_cu* cu, CUdeviceptr start, CUipcMemHandle* h);
bool shunt_gpu_vmm_exportable(const struct shunt_cu* cu, CUdeviceptr start);
bool shunt_gpu_vmm_export(const struct shunt_cu* cu, CUdeviceptr start, CUipcMemHandle* h);
void shunt_gpu_vmm_unexport(const CUipcMemHandle* h);
CUresult shunt_gpu_peer_mem_open(const struct shunt_cu* cu, const CUipcMemHandle* h, CUdeviceptr* base);
void shunt_gpu_peer_mem_close(const struct shunt_cu* cu, CUdeviceptr base);

#endif
