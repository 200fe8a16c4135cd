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
#ifndef SHUNT_TRANSPORT_SOCKET_EP_H
#define SHUNT_TRANSPORT_SOCKET_EP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "util/socket.h"

struct shunt_net;
struct shunt_trigger;

/* What a rank publishes through the bootstrap for its peers to connect. */
struct shunt_net_card {
  struct shunt_wire_addr addr;
  uint64_t nonce;
  uint32_t nsocks;
  uint32_t pad_;
};

/* Where what arrives goes: the endpoint serves the host world (data written in place) and the
 * GPU backend (staged: data handed on piece by piece, to be copied to the device). */
struct shunt_net_config {
  uint32_t rank, nranks;
  uint64_t caps[4];  /* bytes of each destination buffer (0 input, 1 output, 2 scratch, 3 a
                        whole region by offset); a message beyond them is malformed */
  uint32_t ordinals; /* channels per (peer, kind): a flag beyond them is malformed */
  bool staged;
  void* ctx;
  /* Not staged: where bytes for (buf, off) go in this process. */
  char* (*sink)(void* ctx, unsigned buf, uint64_t off);
  /* Staged: bytes for (buf, off) of `peer`'s put on channel `ordinal` arrived in `at` (whole
   * 8-byte words for packets); 0, or a SHUNT_E_* code to fail the connection. */
  int (*landed)(void* ctx, uint32_t peer, uint16_t ordinal, unsigned buf, uint64_t off, const char* at,
                uint64_t bytes);
  /* A flag from `peer` on channel `ordinal`, after all its data landed. */
  void (*signal)(void* ctx, uint32_t peer, uint16_t ordinal);
  /* The connections to a peer failed: code SHUNT_E_PEER (it closed or reset them) or the code
   * of the system call that failed (util/status.h). */
  void (*fail)(void* ctx, int code, const char* msg);
  bool (*give_up)(void* ctx);
};

/* Listens on `where`'s address (port chosen here) and fills this rank's card. */
int shunt_net_open(const struct shunt_net_config* cfg, const struct sockaddr_storage* where,
                   struct shunt_net** out, struct shunt_net_card* card, char* err, size_t len);
/* Collective among the ranks with a network peer: connects to every rank of another host
 * (remote[r]; kept until close; cards: every rank's, in rank order) and starts the receiving
 * thread. */
int shunt_net_connect(struct shunt_net* n, const bool* remote, const struct shunt_net_card* cards, char* err,
                      size_t len);
/* Sends a trigger's data (from src, in this process's memory) and flag to t->peer; returns when
 * src may be reused, 0, or a SHUNT_E_* code: the failure's (reported through fail), or
 * SHUNT_E_ABORTED when give_up said to stop. */
int shunt_net_send(struct shunt_net* n, const struct shunt_trigger* t, const char* src);
/* Tells peers this rank leaves in order, and stops counting their departures as faults. */
void shunt_net_leave(struct shunt_net* n);
/* Closes every connection and joins the receiving thread. */
void shunt_net_close(struct shunt_net* n);

#endif
