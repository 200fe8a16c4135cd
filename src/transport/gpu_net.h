/* How the GPU backend reaches ranks of other hosts: the verbs endpoint on this rank's device
 * region (registered by its dma-buf, else through peer memory), or the socket transport in
 * staged mode (the GPU proxy copying through host memory) when a rank has no verbs transport or
 * SHUNT_NET=socket says so. The GPU world asks for it and hands it to its proxy; neither knows
 * which kind it got.
 *
 * Promises: opening is local (under SHUNT_NET=auto both kinds are opened); connecting is
 * collective over the world's exchange, every rank deciding from the same gathered cards
 * (verbs only when every rank has it), also a rank that failed before (so none waits); every
 * choice is logged at INFO (NET). */
#ifndef SHUNT_TRANSPORT_GPU_NET_H
#define SHUNT_TRANSPORT_GPU_NET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "transport/cu.h"
#include "transport/ib_ep.h"
#include "transport/link_socket.h"

struct shunt_gpu_proxy;
struct shunt_world_exchange;
struct shunt_gpu_net;

/* What a rank publishes through the bootstrap. */
struct shunt_gpu_net_card {
  struct shunt_ib_card ib;
  struct shunt_net_card net;
};

struct shunt_gpu_net_config {
  const struct shunt_cu* cu;
  uint32_t rank, nranks, node, nnodes;
  char* region; /* this rank's device region, allocated in whole 2 MiB pages */
  uint64_t bytes;
  const char* busid; /* its GPU's PCI bus id (NIC choice) */
  const struct shunt_world_exchange* bs;
};

int shunt_gpu_net_open(const struct shunt_gpu_net_config* cfg, struct shunt_gpu_proxy* proxy,
                       struct shunt_gpu_net** out, struct shunt_gpu_net_card* card, char* err, size_t len);
/* Collective. g may be NULL (this rank failed to open); ok: this rank's part so far succeeded.
 * remote[r]: r is on another host (kept until close). Rank r's card is at cards + r * stride
 * (the caller's gathered records). Then hands the chosen endpoint to the proxy. */
int shunt_gpu_net_connect(struct shunt_gpu_net* g, const struct shunt_gpu_net_config* cfg,
                          struct shunt_gpu_proxy* proxy, const bool* remote, const void* cards, size_t stride,
                          bool ok, char* err, size_t len);
/* Tells peers this rank leaves in order (before the world's last barrier). */
void shunt_gpu_net_leave(struct shunt_gpu_net* g);
/* Closes the endpoints (after the proxy thread stopped); NULL is fine. */
void shunt_gpu_net_close(struct shunt_gpu_net* g);

#endif
