/* The verbs link of the host backend's world: port channels to ranks of other hosts as RDMA
 * writes into their shared regions (the endpoint: transport/ib_ep.h).
 *
 * Promises:
 * - The whole shared region (semaphores, scratch, staging) of each rank is registered once;
 *   one RC queue pair per pair of ranks on different hosts; nothing is set up per call.
 * - A put is an RDMA write from the region, or through the endpoint's bounce slots when the
 *   source is the caller's own memory; a signal is an RDMA write of this rank's count for that
 *   channel onto the peer's semaphore, on the same queue pair after the data, so the peer sees
 *   the count only after the data. A trigger returns once its writes have completed (the peer
 *   acknowledged them): flush needs no more, and the source may be reused.
 * - A completion with an error status marks the world failed with the device, the peer's rank,
 *   address and the status; waits give up when the world is aborted, failed or a run timed out. */
#ifndef SHUNT_TRANSPORT_LINK_IB_H
#define SHUNT_TRANSPORT_LINK_IB_H

#include <stddef.h>

#include "transport/ib_ep.h"

struct shunt_world;

/* Opens this rank's endpoint on its region (w->ib) and fills its card. */
int shunt_world_ib_open(struct shunt_world* w, struct shunt_ib_card* card, char* err, size_t len);
/* Collective over the world's bootstrap: connects to every rank of another host (w->node_of
 * set), also called by a rank whose open failed (w->ib NULL). */
int shunt_world_ib_connect(struct shunt_world* w, const struct shunt_ib_card* cards, char* err, size_t len);

#endif
