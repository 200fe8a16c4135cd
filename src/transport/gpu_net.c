/* The GPU backend's reach to other hosts (gpu_net.h). */
#include "transport/gpu_net.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "transport/gpu_proxy.h"
#include "transport/ib_pick.h"
#include "transport/net_kind.h"
#include "transport/world.h"
#include "util/env.h"
#include "util/log.h"

struct shunt_gpu_net {
  enum shunt_net_kind kind;
  struct shunt_ib* ib;
  struct shunt_net* net;
};

#define DP(p) ((CUdeviceptr)(uintptr_t)(p))

int shunt_gpu_net_open(const struct shunt_gpu_net_config* cfg, struct shunt_gpu_proxy* proxy,
                       struct shunt_gpu_net** out, struct shunt_gpu_net_card* me, char* err, size_t len) {
  memset(me, 0, sizeof(*me));
  struct shunt_gpu_net* g = calloc(1, sizeof(*g));
  *out = g;
  if (!g) {
    snprintf(err, len, "out of memory");
    return -1;
  }
  enum shunt_net_kind kind = g->kind = shunt_net_kind();
  char why[256];
  if (kind != SHUNT_NET_SOCKET) {
    char gpu[4096] = "";
    if (shunt_ib_bus_path("/sys", cfg->busid, gpu, sizeof(gpu)) != 0) gpu[0] = 0;
    int fd = -1;
    const struct shunt_cu* cu = cfg->cu;
    if (cu->MemGetHandleForAddressRange &&
        cu->MemGetHandleForAddressRange(&fd, DP(cfg->region), cfg->bytes, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
                                        0) != CUDA_SUCCESS)
      fd = -1;
    struct shunt_ib_config c = {.rank = cfg->rank,
                                .nranks = cfg->nranks,
                                .region = cfg->region,
                                .bytes = cfg->bytes,
                                .device = true,
                                .dmabuf_fd = fd,
                                .gpu = gpu[0] ? gpu : NULL,
                                .spread = cfg->rank,
                                .signals = sizeof(uint64_t)};
    shunt_gpu_proxy_ib_callbacks(proxy, &c);
    int rc = shunt_ib_open(&c, &g->ib, &me->ib, why, sizeof(why));
    if (fd >= 0) close(fd); /* the registration holds what it needs */
    if (rc != 0 && kind == SHUNT_NET_IB) {
      snprintf(err, len, "SHUNT_NET=ib: rank %u: %s", cfg->rank, why);
      return -1;
    }
    if (rc != 0) SHUNT_INFO(SHUNT_NET, "rank %u: no verbs transport (%s)", cfg->rank, why);
  }
  if (kind == SHUNT_NET_IB) return 0;
  struct shunt_net_config nc = {.rank = cfg->rank, .nranks = cfg->nranks};
  shunt_gpu_proxy_net_callbacks(proxy, cfg->bytes, &nc);
  const struct sockaddr_storage* where = cfg->bs->net_addr.ss_family ? &cfg->bs->net_addr : NULL;
  if (shunt_net_open(&nc, where, &g->net, &me->net, why, sizeof(why)) != 0) {
    snprintf(err, len, "rank %u: socket transport: %s", cfg->rank, why);
    return -1;
  }
  return 0;
}

static const struct shunt_gpu_net_card* card_of(const void* cards, size_t stride, uint32_t r) {
  return (const struct shunt_gpu_net_card*)(const void*)((const char*)cards + (size_t)r * stride);
}

int shunt_gpu_net_connect(struct shunt_gpu_net* g, const struct shunt_gpu_net_config* cfg,
                          struct shunt_gpu_proxy* proxy, const bool* remote, const void* all, size_t stride,
                          bool ok, char* err, size_t len) {
  uint32_t n = cfg->nranks;
  ok = ok && g;
  /* Every rank reads SHUNT_NET the same way: a rank without an endpoint still knows the kind. */
  enum shunt_net_kind kind = g ? g->kind : shunt_net_kind();
  char why[256];
  bool ib = shunt_net_use_ib(kind, &card_of(all, stride, 0)->ib, stride, n, why, sizeof(why));
  SHUNT_INFO(SHUNT_NET, "rank %u (host %u of %u): GPU port channels to other hosts use %s (SHUNT_NET=%s%s)",
             cfg->rank, cfg->node, cfg->nnodes, ib ? "verbs" : "TCP sockets through host memory",
             shunt_net_kind_name(kind), why);
  int rc;
  if (ib) {
    if (g) {
      shunt_net_close(g->net);
      g->net = NULL;
    }
    struct shunt_ib_card* cards = calloc(n, sizeof(*cards));
    for (uint32_t r = 0; cards && r < n; r++) cards[r] = card_of(all, stride, r)->ib;
    rc = shunt_ib_connect(ok && cards ? g->ib : NULL, cfg->rank, n, cfg->bs, remote, cards, why, sizeof(why));
    if (rc != 0 && ok) snprintf(err, len, "%s", cards ? why : "out of memory");
    free(cards);
    if (rc == 0) shunt_gpu_proxy_set_ib(proxy, g->ib);
    return rc;
  }
  if (g) {
    shunt_ib_close(g->ib);
    g->ib = NULL;
  }
  /* Connecting waits on every peer of another host: agree first, so that a rank that failed
   * does not leave the others waiting for its connections. */
  uint8_t* votes = calloc(n, 1);
  if (!votes || shunt_world_agree(cfg->bs, cfg->rank, n, ok, votes, why, sizeof(why)) != 0) {
    if (ok) snprintf(err, len, "%s", votes ? why : "out of memory");
    free(votes);
    return -1;
  }
  free(votes);
  struct shunt_net_card* cards = calloc(n, sizeof(*cards));
  for (uint32_t r = 0; cards && r < n; r++) cards[r] = card_of(all, stride, r)->net;
  rc = cards && g && g->net ? shunt_net_connect(g->net, remote, cards, why, sizeof(why)) : -1;
  if (rc != 0) snprintf(err, len, "%s", cards ? why : "out of memory");
  free(cards);
  if (rc == 0) shunt_gpu_proxy_set_net(proxy, g->net);
  return rc;
}

void shunt_gpu_net_leave(struct shunt_gpu_net* g) {
  if (g) shunt_net_leave(g->net);
}

void shunt_gpu_net_close(struct shunt_gpu_net* g) {
  if (!g) return;
  shunt_net_leave(g->net);
  shunt_net_close(g->net);
  shunt_ib_close(g->ib);
  free(g);
}
