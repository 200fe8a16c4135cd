/* One peer set-up for every world (the host backend's, the GPU backend's, the CPU-built
 * kernel's): each rank's card through the exchange, the size check, the regions of ranks of
 * this host mapped through the world's row of the memory table (transport/mem.h), the ranks of
 * other hosts connected through the network table (transport/net.h, SHUNT_NET), the world's
 * last local step, and the vote.
 *
 * Promises:
 * - Collective over the exchange; every rank takes part in every collective step even after a
 *   local failure (local_ok false, or one found here), so no peer waits for it.
 * - Either every rank has its peers or none keeps them: a rank that fails, or learns that
 *   another did, unwinds what was made here (undoing the world's ready step first through
 *   unready) and returns the code of its first failure (util/status.h: a memory row's or
 *   endpoint's own, SHUNT_E_PEER when another rank failed, SHUNT_E_NOMEM, ...) with a message
 *   naming the first rank that failed.
 * - Connecting waits on every peer of another host, so it follows a vote: a rank that failed
 *   before never leaves the others waiting for its connections.
 * - Nothing prints to stdout; the network choice is logged at INFO (NET). */
#ifndef SHUNT_TRANSPORT_PEERS_H
#define SHUNT_TRANSPORT_PEERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "transport/exchange.h"
#include "transport/mem.h"
#include "transport/net.h"

struct shunt_peers;

struct shunt_peers_config {
  uint32_t rank, nranks;
  const struct shunt_world_exchange* bs;
  const char* what;  /* the region, for messages: "shared region", ... */
  const void* sizes; /* what must be equal on every rank (at most SIZES_MAX bytes) */
  size_t sizes_bytes;
  const struct shunt_mem_ops* mem; /* how ranks of this host reach each other's regions */
  struct shunt_mem_env env;
  char* region; /* this rank's, made by the world; NULL: the memory row makes it */
  uint64_t bytes;
  /* Ranks of other hosts (when bs->at.nnodes > 1): the endpoint's configuration; rank, nranks,
   * region, bytes and bs are filled here. */
  struct shunt_net_ep_config net;
  /* The world's last local step once every peer is reached (a proxy started), and its undoing;
   * SHUNT_OK, or a SHUNT_E_* code with a message. */
  void* ctx;
  int (*ready)(void* ctx, const struct shunt_peers* p, char* err, size_t len);
  void (*unready)(void* ctx);
};

struct shunt_peers {
  uint32_t rank, nranks;
  char* region; /* this rank's */
  uint64_t bytes;
  char** base;       /* [nranks] every region as mapped here; NULL: a rank of another host */
  bool* remote;      /* [nranks] on another host */
  uint32_t* node_of; /* [nranks] each rank's host */
  char (*where)[64]; /* [nranks] a rank of another host's address, else "" */
  bool spans;        /* the ranks sit on several hosts */
  struct shunt_nets nets;
  /* private */
  const struct shunt_mem_ops* mem;
  struct shunt_mem_env env;
  uint32_t* how;
  void* cards;
  size_t card_bytes, mem_at, net_at;
  bool opened;
};

int shunt_peers_setup(const struct shunt_peers_config* c, bool local_ok, struct shunt_peers* p, char* err,
                      size_t len);
/* Rank r's card of the memory row (what its region's open published). */
const void* shunt_peers_mem_card(const struct shunt_peers* p, uint32_t r);
/* Tells the peers of other hosts this rank leaves in order. */
void shunt_peers_leave(struct shunt_peers* p);
/* Closes the network endpoints (after whatever drives them stopped). */
void shunt_peers_close_net(struct shunt_peers* p);
/* Unmaps the peers' regions (before any rank frees its own: the caller orders that). */
void shunt_peers_unmap(struct shunt_peers* p);
/* Everything left: the endpoints, the mappings (unless `keep_maps`: memory a kernel may still
 * use), this rank's region as the memory row made it; p may be zeroed or set up. */
void shunt_peers_free(struct shunt_peers* p, bool keep_maps);

#endif
