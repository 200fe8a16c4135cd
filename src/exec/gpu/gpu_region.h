/* The host side of a rank's region and trigger FIFO (gpu_abi.h), written once for the CUDA world
 * (gpu_world.c) and the kernel's CPU build (exec/kcpu): where each section lies (the same
 * offsets on every rank of a world with the same sizes), the world's part of the kernel
 * arguments, and the proxy's side of the FIFO. Plain C, no CUDA. */
#ifndef SHUNT_EXEC_GPU_REGION_H
#define SHUNT_EXEC_GPU_REGION_H

#include <stdbool.h>
#include <stdint.h>

#include "exec/gpu/gpu_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Every section starts SHUNT_GPU_ALIGN-aligned; scratch_bytes is rounded up to it, so both
 * halves of a double scratch start 16-aligned (LL16 packets). */
void shunt_gpu_region_layout(struct shunt_gpu_layout* L, uint32_t nranks, uint64_t scratch_bytes,
                             uint64_t input_bytes, uint64_t output_bytes);

/* The world's part of the kernel arguments: region, peer table, abort word and layout are all
 * found from the rank's region (as the kernel sees it) and the layout. */
void shunt_gpu_kargs_world(struct shunt_gpu_kargs* k, char* region, const struct shunt_gpu_layout* lay,
                           struct shunt_gpu_fifo* fifo, uint64_t timeout_ns, uint32_t rank, uint32_t nranks);

#ifdef __cplusplus
}
#endif

#endif
