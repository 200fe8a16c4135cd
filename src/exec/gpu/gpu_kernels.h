/* The GPU backend's kernels as the driver holds them: the fat binary built into libshunt
 * (gpu_image.c), loaded once per device into its primary context.
 *
 * Promises: shunt_gpu_kernels_get loads the module for a device the first time (under a lock),
 * forces every kernel to load now (CUDA loads kernels lazily at their first launch, and a
 * load waits for the device's running kernels: a rank whose first launch waits behind a peer's
 * executor kernel that waits for this rank would deadlock), and returns the handles; later
 * calls for the device return the same handles without a driver call. The primary context of
 * the device must be current; a module of a context that is gone (the device was reset) is
 * loaded again in the current one. 0, or SHUNT_E_CUDA with a message naming the driver's error
 * (a library built without nvcc has no kernels to load, and says so). Private to src/exec/gpu. */
#ifndef SHUNT_EXEC_GPU_KERNELS_H
#define SHUNT_EXEC_GPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "transport/cu.h"

struct shunt_gpu_kernels {
  CUfunction exec, pre, post, check;
};

int shunt_gpu_kernels_get(const struct shunt_cu* cu, CUdevice dev, struct shunt_gpu_kernels* out, char* err,
                          size_t len);

/* How many blocks of `threads` threads (and `smem` bytes of dynamic shared memory) of the
 * executor kernel the device holds at once; 0 or SHUNT_E_CUDA (no words: the caller's
 * residency check reports it). */
int shunt_gpu_coresident_blocks(const struct shunt_cu* cu, const struct shunt_gpu_kernels* k, CUdevice dev,
                                uint32_t threads, uint32_t smem, uint32_t* out);

/* The built-in image: its bytes, and whether nvcc built it (else a placeholder no real driver
 * loads). */
const void* shunt_gpu_image(size_t* bytes, int* built);

#endif
