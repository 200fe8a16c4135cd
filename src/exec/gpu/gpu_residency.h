/* How the GPU backend keeps every block it waits on running at once.
 *
 * The executor's blocks wait for each other (barriers, semaphores) and for the blocks of the
 * other ranks (signals, packets): a block that waits while one it waits for has not been
 * scheduled deadlocks the device. So every block of every rank that shares a GPU must be
 * resident together. Ranks on one GPU are threads of one process (kernels of one context run
 * concurrently) or processes under MPS; without MPS, kernels of different processes are
 * time-sliced, never concurrent, and the world refuses them (gpu_world.c).
 *
 * Promises: shunt_gpu_pick_threads returns the block size a program launches with: the plan's
 * (or max_threads when smaller), in whole warps, halved until nblocks x sharing blocks fit the
 * device's resident capacity at that size (the ops work with any block size); or 0 with a
 * message naming the blocks, the ranks sharing the GPU and the capacity when even 32 threads
 * per block do not fit. Plain C, no CUDA: the capacity comes from the caller. */
#ifndef SHUNT_EXEC_GPU_RESIDENCY_H
#define SHUNT_EXEC_GPU_RESIDENCY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Blocks of `threads` threads of the executor kernel the device holds at once; 0 on success. */
typedef int (*shunt_gpu_capacity_fn)(void* ctx, uint32_t threads, uint32_t* blocks);

uint32_t shunt_gpu_pick_threads(uint32_t nblocks, uint32_t sharing, uint32_t plan_threads,
                                uint32_t max_threads, shunt_gpu_capacity_fn capacity, void* ctx, char* err,
                                size_t len);

#ifdef __cplusplus
}
#endif

#endif
