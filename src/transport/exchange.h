/* What set-up is built over: an out-of-band exchange among the ranks (the communicator's
 * bootstrap, or a test's threads), which worlds and network endpoints use to swap their cards,
 * and the placement of the ranks on hosts.
 *
 * Promises of the caller: allgather and barrier are collective over all ranks and return 0 on
 * success, else a SHUNT_E_* code (util/status.h); node and nnodes are the same view of the hosts on every
 * rank. */
#ifndef SHUNT_TRANSPORT_EXCHANGE_H
#define SHUNT_TRANSPORT_EXCHANGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* The out-of-band exchange, a function pair and its context, as the links get their callbacks.
 * allgather: on entry buf[rank*bytes .. +bytes) holds this rank's contribution; on return buf
 * holds every rank's. */
struct shunt_oob {
  void* ctx;
  int (*allgather)(void* ctx, void* buf, size_t bytes);
  int (*barrier)(void* ctx);
};

/* Where the ranks live: this rank's host, numbered the same on every rank, and how many hosts
 * there are (0 or 1: all share this one). Ranks of other hosts are reached through the network
 * transport (SHUNT_NET), listening on net_addr's interface (family 0: the one the bootstrap
 * would pick, SHUNT_SOCKET_IFNAME). */
struct shunt_placement {
  uint32_t node, nnodes;
  struct sockaddr_storage net_addr;
};

/* A world's set-up: the exchange and the placement. */
struct shunt_world_exchange {
  struct shunt_oob oob;
  struct shunt_placement at;
};

/* Collective vote closing a collective set-up step: every rank says whether its side succeeded
 * (local_ok) and learns whether all did. Returns 0 when all succeeded; else SHUNT_E_PEER (another
 * rank failed), the exchange's code, or SHUNT_E_INVALID when this rank failed itself (its own
 * message and code are then the caller's to keep), with a message naming the first rank that
 * failed.
 * scratch: nranks bytes of the caller's (allocated before anything could fail, so that the vote
 * itself cannot). */
int shunt_world_agree(const struct shunt_oob* bs, uint32_t rank, uint32_t nranks, bool local_ok,
                      uint8_t* scratch, char* err, size_t len);

#endif
