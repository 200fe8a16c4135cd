/* The verbs transport: a world's port channels to ranks of other hosts, over InfiniBand or
 * RoCE through libibverbs (opened at run time, transport/ibv.h).
 *
 * Promises:
 * - One RC queue pair per peer pair, made when the world is built and exchanged over its
 *   bootstrap; this rank's whole shared region (semaphores, scratch, staging) is one memory
 *   region the peers write into. Nothing is set up per call.
 * - A put is an RDMA write straight from the region, or through a registered bounce buffer
 *   when the source is the caller's own memory; a signal is an RDMA write of this rank's
 *   count for that channel onto the peer's semaphore, posted after the data on the same queue
 *   pair, so the peer sees the count only after the data. A trigger returns once its writes
 *   have completed (the peer acknowledged them): flush needs no more, and the source may be
 *   reused.
 * - A completion with an error status (a QP in error, retries exhausted, an access error)
 *   marks the world failed with the peer's rank, address, device and the status. Waiting for
 *   a completion gives up when the world is aborted or a run timed out.
 * - SHUNT_IB_TIMEOUT (default 20) and SHUNT_IB_RETRY_CNT (default 7) set the queue pairs'
 *   transport timeout and retries, as NCCL_IB_TIMEOUT and NCCL_IB_RETRY_CNT do. Every choice
 *   is logged at INFO (NET). */
#ifndef SHUNT_TRANSPORT_LINK_IB_H
#define SHUNT_TRANSPORT_LINK_IB_H

#include <stddef.h>
#include <stdint.h>

struct shunt_world;
struct shunt_ib;

/* What a rank publishes through the bootstrap. ok: 0 when it has no verbs transport. */
struct shunt_ib_card {
  uint8_t gid[16];
  uint64_t base; /* its region's address in its own process */
  uint32_t rkey;
  uint16_t lid;
  uint8_t mtu, link_layer;
  uint8_t ok, pad_[7];
};

/* Loads libibverbs, picks a port (transport/ib_pick.h; spread: the rank's index on its host),
 * registers this rank's region and fills its card. */
int shunt_ib_open(struct shunt_world* w, uint32_t spread, struct shunt_ib** out, struct shunt_ib_card* card,
                  char* err, size_t len);
/* Collective over the world's bootstrap (every rank calls it, also one whose open failed, with
 * ib NULL): makes and connects the queue pairs to every rank of another host, then votes. */
int shunt_ib_connect(struct shunt_world* w, struct shunt_ib* ib, const struct shunt_ib_card* cards, char* err,
                     size_t len);
/* The GID of a card as an address: dotted IPv4 when it maps one, else IPv6 form. */
void shunt_ib_card_where(const struct shunt_ib_card* c, char* out, size_t len);
/* Destroys the queue pairs and frees what open made; NULL is fine. */
void shunt_ib_close(struct shunt_ib* ib);

#endif
