/* VMM memory (cuMemCreate / cuMemMap), as NCCL's ncclMemAlloc makes it and PyTorch's
 * expandable segments hold it, and how a peer process reaches a device allocation.
 *
 * Promises:
 * - shunt_gpu_vmm_alloc makes `bytes` (rounded up to the device's granularity) of device memory
 *   on `device`: one physical allocation made shareable by POSIX file descriptor, mapped and
 *   made readable and writable for that device; -1 with a message when the driver has no VMM
 *   or refuses (the caller may then fall back to cuMemAlloc). shunt_gpu_vmm_free undoes it.
 * - A peer description fits the 64 bytes of a CUipcMemHandle, so a registration exchange
 *   carries either kind: for cuMemAlloc memory, the driver's IPC handle; for VMM memory made
 *   shareable by file descriptor, the owner's process and a descriptor it keeps open for the
 *   peers (taken with pidfd_getfd(2)). describe returns false for memory neither reaches
 *   (a stream-ordered pool's, VMM memory without a descriptor handle type, an allocation the
 *   peers would see only part of): such buffers are staged.
 * - open maps a peer's allocation in the current context (readable and writable for its
 *   device); close unmaps what open mapped. Both in the caller's context. */
#ifndef SHUNT_EXEC_GPU_VMM_H
#define SHUNT_EXEC_GPU_VMM_H

#include <stdbool.h>
#include <stddef.h>

#include "transport/cu.h"

int shunt_gpu_vmm_alloc(size_t bytes, int device, void** out, size_t* mapped, char* err, size_t len);
void shunt_gpu_vmm_free(void* p, size_t mapped);

/* The allocation starting at `start` (its CU_POINTER_ATTRIBUTE_RANGE_START_ADDR). */
bool shunt_gpu_peer_mem_describe(const struct shunt_cu* cu, CUdeviceptr start, CUipcMemHandle* h);
CUresult shunt_gpu_peer_mem_open(const struct shunt_cu* cu, const CUipcMemHandle* h, CUdeviceptr* base);
void shunt_gpu_peer_mem_close(const struct shunt_cu* cu, CUdeviceptr base);

#endif
