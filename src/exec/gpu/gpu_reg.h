/* User buffers registered with a GPU backend for zero-copy (ncclCommRegister, ncclMemAlloc).
 *
 * Promises:
 * - Registration is local: it records the range and the allocation that holds its start. Ranks
 *   register on their own (PyTorch's allocator registers each of its segments), so their
 *   registrations need not match in number, layout, offsets or freshness.
 * - shunt_gpu_reg_bind decides, for one call, whether peers reach this rank's input and output
 *   in place, and gives the device tables the kernel reads: every rank's exact address of the
 *   call's buffer, as this process sees it (each peer at its own offset in its own allocation).
 *   Every rank of the communicator calls it at the same calls (it is collective) and every rank
 *   takes the same decision: it is made from what all ranks said at that call (agreed through
 *   the same-host board, gpu_agree.h), never from this rank's registrations alone. All or none:
 *   when any rank's buffer is not registered, stale (freed and allocated again since it was
 *   registered), not inside one allocation as the driver reports it (CU_POINTER_ATTRIBUTE_
 *   RANGE_START_ADDR / RANGE_SIZE), or cannot be mapped by every rank, every rank stages.
 * - A buffer a peer reaches in place is reached only inside the one allocation that holds the
 *   call's range on its owner, through a mapping of that whole allocation: no address the
 *   kernel forms from a table lies outside a mapped allocation (the plan's references stay
 *   within the call's buffer sizes: src/plan/check*.c, exec/lower_check.c).
 * - Cost: one round on the board per call bound (the caller binds only calls whose program
 *   reaches peers' user buffers: large ones); no allocation and no bootstrap message once the
 *   buffers' allocations are mapped. Peer mappings and tables (kept by content) stay until
 *   shunt_gpu_regs_free, so graphs captured with them stay valid.
 * - Everything is freed by shunt_gpu_regs_free (after this rank's kernels are done).
 * Private to src/exec/gpu. */
#ifndef SHUNT_EXEC_GPU_REG_H
#define SHUNT_EXEC_GPU_REG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "exec/gpu/gpu_agree.h"
#include "transport/cu.h"

struct shunt_gpu_reg {
  char* base;
  size_t size;
  uint64_t buffer_id; /* the driver's id of the allocation holding base when registered */
  bool warned;        /* its staleness was reported */
  /* The allocation holding base, as the driver reports it, asked once (it cannot change while
   * the registration is current): its range, and its IPC handle when it has one. */
  uint64_t alloc_start, alloc_size; /* alloc_size 0: not asked yet, or unknown */
  bool has_handle;
  CUipcMemHandle handle;
  struct shunt_gpu_reg* next;
};

struct shunt_gpu_regs;
struct shunt_gpu_regs* shunt_gpu_regs_new(void);
/* cu, ctx: the driver and the device's context (NULL cu: nothing was ever mapped). */
void shunt_gpu_regs_free(struct shunt_gpu_regs* rs, const struct shunt_cu* cu, CUcontext ctx);

struct shunt_gpu_reg* shunt_gpu_reg_add(struct shunt_gpu_regs* rs, const struct shunt_cu* cu, void* base,
                                        size_t size);
/* Removes the record; mappings peers' buffers made through it stay until regs_free (a graph may
 * still use them). */
void shunt_gpu_reg_remove(struct shunt_gpu_regs* rs, struct shunt_gpu_reg* r);
/* Whether the memory at r's base is still the allocation registered (a buffer freed and
 * allocated again at the same address is not: its peers' mappings are stale). */
bool shunt_gpu_reg_current(const struct shunt_cu* cu, const struct shunt_gpu_reg* r);

/* One call's binding: NULL tables when staged; else [nranks] device tables of every rank's
 * input / output address (in is NULL for an in-place call). */
struct shunt_gpu_zc {
  const uint64_t* in;
  const uint64_t* out;
};

/* Collective (see above): every rank calls it at the same calls with the same board; a new
 * table is uploaded on `stream` (a non-blocking stream of ctx, synchronized). 0 and
 * *z filled (possibly staged); -1 with a message when the round itself failed (a rank did not
 * arrive, or stop(arg) said to give up waiting: the world broke): the call must fail. */
int shunt_gpu_reg_bind(struct shunt_gpu_regs* rs, const struct shunt_cu* cu, CUcontext ctx, CUstream stream,
                       struct shunt_gpu_agree* board, uint32_t rank, uint32_t nranks, const void* in,
                       uint64_t in_bytes, const void* out, uint64_t out_bytes, bool inplace,
                       bool (*stop)(void*), void* arg, struct shunt_gpu_zc* z, char* err, size_t len);

#endif
