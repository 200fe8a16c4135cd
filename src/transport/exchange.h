/* The caller's collective exchange, which every world and every network endpoint is built over
 * (the communicator's bootstrap, or a test's threads).
 *
 * Promises of the caller: allgather and barrier are collective over all ranks and return 0 on
 * success; node and nnodes are the same view of the hosts on every rank. */
#ifndef SHUNT_TRANSPORT_EXCHANGE_H
#define SHUNT_TRANSPORT_EXCHANGE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* allgather: on entry buf[rank*bytes .. +bytes) holds this rank's contribution; on return buf
 * holds every rank's. */
struct shunt_world_exchange {
  void* ctx;
  int (*allgather)(void* ctx, void* buf, size_t bytes);
  int (*barrier)(void* ctx);
  /* Where the ranks live: this rank's host, numbered the same on every rank, and how many
   * hosts there are (0 or 1: all share this one). Ranks of other hosts are reached through
   * the network transport (SHUNT_NET), listening on net_addr's interface (family 0: the one
   * the bootstrap would pick, SHUNT_SOCKET_IFNAME). */
  uint32_t node, nnodes;
  struct sockaddr_storage net_addr;
};

#endif
