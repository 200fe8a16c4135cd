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

/* Records h -> c; own: h is shunt's alone. Returns 0, or -1 when out of memory. */
int shunt_handles_add(ncclComm_t h, struct shunt_comm* c, int own);
/* shunt's state for h, or NULL when shunt does not know h. */
struct shunt_comm* shunt_handles_find(ncclComm_t h);
/* Forgets h; returns the state it mapped to (NULL if none). */
struct shunt_comm* shunt_handles_remove(ncclComm_t h);

extern atomic_long shunt_own_handle_count;
int shunt_handle_is_own_slow(ncclComm_t h);

/* Whether h was made by shunt without an NCCL communicator behind it. */
static inline int shunt_handle_is_own(ncclComm_t h) {
  return atomic_load_explicit(&shunt_own_handle_count, memory_order_acquire) != 0 && shunt_handle_is_own_slow(h);
}

#endif
