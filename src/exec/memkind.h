/* Where a buffer lives, as far as choosing a backend needs to know.
 *
 * Promises: a process that never loaded the CUDA driver has only host memory, and asking
 * costs one failed lookup of the driver (the driver is never loaded by this module). Once the
 * driver is in the process, a pointer is asked about through it: memory the GPU owns
 * (device or managed allocations) is DEVICE; pageable and pinned host memory are HOST.
 * Safe from any thread. */
#ifndef SHUNT_EXEC_MEMKIND_H
#define SHUNT_EXEC_MEMKIND_H

enum shunt_mem_kind { SHUNT_MEM_HOST = 0, SHUNT_MEM_DEVICE = 1 };

enum shunt_mem_kind shunt_mem_kind(const void* p);

/* The CUDA device ordinal of device memory p, or -1 (host memory, or no driver). */
int shunt_mem_device(const void* p);

#endif
