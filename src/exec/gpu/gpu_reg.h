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
 *   within the call's buffer sizes: src/plan/check*.c, exec/lower_check.c). A rank of the
 *   owner's process reaches it through the owner's pointer only when its device may touch that
 *   memory (gpu_vmm.h: shunt_gpu_mem_reachable); otherwise every rank stages.
 * - Lifetime: a peer's allocation stays mapped while its owner registers it. When the owner
 *   deregisters it (its last registration of that allocation on this communicator), or finds
 *   it freed and allocated again, the allocation's id goes on the owner's next card and every
 *   rank closes its mapping there (once this rank's kernels launched before are done: waits's
 *   drained), and the owner withdraws the descriptor it offered (VMM memory). At most
 *   PEER_ALLOCS (32) allocations of each rank stay judged and mapped: the least recently used
 *   go first, alike on every rank, but never one a captured call used (a graph may replay it
 *   until the communicator ends) nor one the current call uses. Device tables are kept by
 *   content until shunt_gpu_regs_free (freeing one would wait for the device, and a peer's
 *   kernel may be waiting for this rank).
 * - Cost: one round on the board per call bound (the caller binds only calls whose program
 *   reaches peers' user buffers: large ones); no allocation and no bootstrap message once the
 *   buffers' allocations are mapped; two more rounds at the first call on a new allocation.
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
  bool exportable; /* VMM memory whose descriptor may be offered to peers (when one needs it) */
  bool exported;   /* handle is such an offer, withdrawn with the registration */
  struct shunt_gpu_reg* next;
};

struct shunt_gpu_regs;
struct shunt_gpu_regs* shunt_gpu_regs_new(void);
/* cu, ctx: the driver and the device's context (NULL cu: nothing was ever mapped). */
void shunt_gpu_regs_free(struct shunt_gpu_regs* rs, const struct shunt_cu* cu, CUcontext ctx);

struct shunt_gpu_reg* shunt_gpu_reg_add(struct shunt_gpu_regs* rs, const struct shunt_cu* cu, void* base,
                                        size_t size);
/* Removes the record: its descriptor offered to peers is withdrawn, and peers close their
 * mappings of its allocation at the next round (unless another registration holds it). */
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

/* What the binding asks its caller, without waiting: stop, whether to give up waiting for a
 * rank (a broken world: a peer may never come); drained, whether every kernel this rank
 * launched so far is done (NULL: always). Both take arg. */
struct shunt_gpu_reg_waits {
  bool (*stop)(void*);
  bool (*drained)(void*);
  void* arg;
};

/* Collective (see above): every rank calls it at the same calls with the same board; a new
 * table is uploaded on `stream` (a non-blocking stream of ctx, synchronized). captured: the
 * call is being captured into a graph. 0 and *z filled (possibly staged); the round's code
 * (gpu_agree.h) or SHUNT_E_NOMEM with a message when the round itself failed (a rank did not arrive, or stop
 * said to give up waiting: the world broke): the call must fail. */
int shunt_gpu_reg_bind(struct shunt_gpu_regs* rs, const struct shunt_cu* cu, CUcontext ctx, CUstream stream,
                       struct shunt_gpu_agree* board, uint32_t rank, uint32_t nranks, const void* in,
                       uint64_t in_bytes, const void* out, uint64_t out_bytes, bool inplace, bool captured,
                       const struct shunt_gpu_reg_waits* waits, struct shunt_gpu_zc* z, char* err,
                       size_t len);

#endif
