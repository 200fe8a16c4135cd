/* The side table from the ncclComm_t an application holds to shunt's state for it.
 *
 * Promises: the application's handle is the real NCCL communicator whenever there is one, so
 * every NCCL function accepts it; shunt's state is found by that pointer. A communicator that
 * shunt made alone ("own" handle, no NCCL behind it) is recorded as such so that forwarding
 * never hands it to NCCL. Lookups are safe from any thread, concurrently with changes; a
 * process with no own handles pays one atomic load in shunt_handle_is_own. */
#ifndef SHUNT_API_HANDLES_H
#define SHUNT_API_HANDLES_H

#include <nccl.h>
#include <stdatomic.h>

struct shunt_comm;

/* Records h -> c; own: h is shunt's alone. Returns 0, or SHUNT_E_NOMEM. */
int shunt_handles_add(ncclComm_t h, struct shunt_comm* c, int own);
/* shunt's state for h with a reference taken (NULL when shunt does not know h): the state is
 * not freed before every reference is put back, so a thread may destroy or abort a
 * communicator while another is inside a call on it (PyTorch's watchdog does). */
struct shunt_comm* shunt_handles_get(ncclComm_t h);
void shunt_handles_put(struct shunt_comm* c);
/* Forgets h; returns the state it mapped to (NULL if none), without a reference: its owner
 * waits for shunt_handles_unused before freeing it. */
struct shunt_comm* shunt_handles_remove(ncclComm_t h);
/* Waits until no reference to c (removed) is held. */
void shunt_handles_unused(struct shunt_comm* c);

static inline void shunt_handles_put_scoped(struct shunt_comm** c) {
  if (*c) shunt_handles_put(*c);
}
/* As NCCL: a communicator whose nonblocking init, split or shrink is still running, or whose
 * init failed, takes no work. Returns ncclSuccess, or the error to return (with a WARN
 * naming fn). */
ncclResult_t shunt_handles_ready(const char* fn, struct shunt_comm* c);

/* A communicator reference put back when the variable goes out of scope. */
#define SHUNT_COMM_REF __attribute__((cleanup(shunt_handles_put_scoped))) struct shunt_comm*

extern atomic_long shunt_own_handle_count;
int shunt_handle_is_own_slow(ncclComm_t h);

/* Whether h was made by shunt without an NCCL communicator behind it. */
static inline int shunt_handle_is_own(ncclComm_t h) {
  return atomic_load_explicit(&shunt_own_handle_count, memory_order_acquire) != 0 && shunt_handle_is_own_slow(h);
}

#endif
