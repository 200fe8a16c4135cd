/* User buffers registered with a GPU backend for zero-copy (ncclCommRegister, ncclMemAlloc).
 *
 * Promises:
 * - Registration is local: it records the range. The first call that uses a registration
 *   exchanges it with every rank (collective: under NCCL's rule that when one rank passes
 *   registered buffers to a call every rank does, every rank reaches that exchange at the same
 *   call) and maps every peer's range (its own pointer in the same process, CUDA IPC in
 *   another: one mapping per peer allocation, shared by the registrations inside it); the
 *   result is a device table of every rank's base, read by the kernel with the call's offset
 *   (the same on every rank, as NCCL requires).
 * - find returns the registration holding [p, p + bytes), or NULL.
 * - Everything is freed by shunt_gpu_regs_free (after this rank's kernels are done).
 * Private to src/exec/gpu. */
#ifndef SHUNT_EXEC_GPU_REG_H
#define SHUNT_EXEC_GPU_REG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "transport/cu.h"
#include "transport/world.h"

struct shunt_gpu_reg {
  char* base;
  size_t size;
  const uint64_t* table; /* device: every rank's base as this process sees it; NULL until exchanged */
  int state;             /* 0 not exchanged yet, 1 usable zero-copy, -1 not usable (staged) */
  uint64_t buffer_id;    /* the driver's id of the allocation holding base when registered */
  struct shunt_gpu_reg* next;
};

struct shunt_gpu_regs;
struct shunt_gpu_regs* shunt_gpu_regs_new(void);
/* cu, ctx: the driver and the device's context (NULL cu: nothing was ever mapped). */
void shunt_gpu_regs_free(struct shunt_gpu_regs* rs, const struct shunt_cu* cu, CUcontext ctx);

struct shunt_gpu_reg* shunt_gpu_reg_add(struct shunt_gpu_regs* rs, const struct shunt_cu* cu, void* base,
                                        size_t size);
/* Removes it (and its peer mappings once no registration uses them); this rank's kernels that
 * used it must be done. */
void shunt_gpu_reg_remove(struct shunt_gpu_regs* rs, const struct shunt_cu* cu, CUcontext ctx,
                          struct shunt_gpu_reg* r);
struct shunt_gpu_reg* shunt_gpu_reg_find(struct shunt_gpu_regs* rs, const void* p, uint64_t bytes);
/* Whether the memory at r's base is still the allocation registered (a buffer freed and
 * allocated again at the same address is not: its peers' mappings are stale). */
bool shunt_gpu_reg_current(const struct shunt_cu* cu, const struct shunt_gpu_reg* r);

/* The collective first-use exchange of r (see above), its table uploaded on `stream` (a
 * non-blocking stream of ctx): 0, or -1 with a message (then no rank
 * uses it zero-copy: every rank learns whether all succeeded). */
int shunt_gpu_reg_exchange(struct shunt_gpu_regs* rs, const struct shunt_cu* cu, CUcontext ctx,
                           CUstream stream, struct shunt_gpu_reg* r, uint32_t rank, uint32_t nranks,
                           const struct shunt_world_exchange* ex, char* err, size_t len);

#endif
