/* The socket transport: a world's port channels to ranks of other hosts, over TCP.
 *
 * Promises:
 * - Connections are made once, when the world is built: several sockets per peer pair
 *   (SHUNT_SOCKET_NSOCKS, 1-4, default 2; a pair uses the smaller of its two ranks' values),
 *   the lower rank connecting to the higher one's listener. A connection that does not
 *   present the listener's nonce (published through the bootstrap) and a rank of the world
 *   on another host is refused and logged; nothing is set up per call.
 * - A put of at least 256 KiB is cut across the pair's sockets; smaller puts, packets and
 *   flags go on the first. The receiving rank's thread writes data into its own region and
 *   raises a flag's semaphore only once every byte sent before it, on every socket, is in.
 * - A reset, a closed connection, a malformed message or a send that cannot finish marks the
 *   world failed with the peer's rank, address and the cause; a rank leaving in order says so
 *   first, so its peers' teardown logs nothing. Sends give up when the world is aborted or
 *   a run timed out. Every choice is logged at INFO (NET). */
#ifndef SHUNT_TRANSPORT_LINK_SOCKET_H
#define SHUNT_TRANSPORT_LINK_SOCKET_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "util/socket.h"

struct shunt_world;
struct shunt_net;

/* What a rank publishes through the bootstrap for its peers to connect. */
struct shunt_net_card {
  struct shunt_wire_addr addr;
  uint64_t nonce;
  uint32_t nsocks;
  uint32_t pad_;
};

/* Listens on `where`'s address (port chosen here) and fills this rank's card. */
int shunt_net_open(struct shunt_world* w, const struct sockaddr_storage* where, struct shunt_net** out,
                   struct shunt_net_card* card, char* err, size_t len);
/* Collective among the ranks with a network peer: connects to every rank of another host
 * (cards: every rank's, in rank order; w->node_of set) and starts the receiving thread. */
int shunt_net_connect(struct shunt_net* n, const struct shunt_net_card* cards, char* err, size_t len);
/* Tells peers this rank leaves in order, and stops counting their departures as faults. */
void shunt_net_leave(struct shunt_net* n);
/* Closes every connection and joins the receiving thread. */
void shunt_net_close(struct shunt_net* n);

#endif
