/* A rank's first kernel failure (gpu_abi.h's error record), read and put into words, for the
 * CUDA world (gpu_world.c) and the kernel's CPU build (exec/kcpu). Plain C, no CUDA call:
 * safe while kernels run and inside stream capture. */
#ifndef SHUNT_EXEC_GPU_REPORT_H
#define SHUNT_EXEC_GPU_REPORT_H

#include <stddef.h>
#include <stdint.h>

#include "exec/gpu/gpu_abi.h"
#include "exec/program.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Copies the record written by the kernel (host-visible memory) into *out once its code is
 * published; returns the code (0: no failure, *out untouched). */
uint32_t shunt_gpu_error_read(const struct shunt_gpu_error* rec, struct shunt_gpu_error* out);

/* "timeout|aborted: rank R block B thread T ops[i] (name): waits on WHAT DETAIL: awaited A,
 * seen S". p, when it is the program that ran, names the op. */
void shunt_gpu_error_format(const struct shunt_gpu_error* e, uint32_t rank, const struct shunt_program* p,
                            char* err, size_t len);

#ifdef __cplusplus
}
#endif

#endif
