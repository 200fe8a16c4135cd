/* A rank's verbs endpoint: RDMA writes into the registered regions of ranks of other hosts.
 * Both backends' proxies use it for such peers, through the network table's verbs row
 * (transport/net_ib.c).
 *
 * Promises:
 * - Opening loads libibverbs (transport/ibv.h), picks a port (transport/ib_pick.h) and
 *   registers the caller's region for remote writes (host memory with ibv_reg_mr; device
 *   memory by its dma-buf, ibv_reg_dmabuf_mr, when the caller has one, else through the
 *   peer-memory path of ibv_reg_mr, nvidia-peermem), plus a bounce area and a signal area of
 *   its own, and the caller's extra host memory (a GPU kernel's outgoing staging) when it has
 *   one; nothing is registered per call.
 * - Connecting is collective over the caller's exchange: one RC queue pair per peer marked
 *   remote, numbers gathered, each moved to RTS (SHUNT_IB_TIMEOUT, SHUNT_IB_RETRY_CNT), then a
 *   vote, so either every rank has its queue pairs or none keeps them.
 * - Writes to one peer land in posting order (one queue pair); a write's completion means the
 *   peer acknowledged it. A source outside the registered region goes through the bounce area.
 * - A completion with an error status, or a failed post, is reported through the caller's
 *   fail callback with the device, the peer's rank and address and the status; waits give up
 *   when the caller's give_up says so. The proxy thread alone posts and waits. */
#ifndef SHUNT_TRANSPORT_IB_EP_H
#define SHUNT_TRANSPORT_IB_EP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct shunt_oob;
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

struct shunt_ib_config {
  uint32_t rank, nranks;
  void* region; /* registered for the peers' writes; its base is published */
  size_t bytes;
  bool device;     /* the region is GPU memory */
  int dmabuf_fd;   /* device: its dma-buf (offset 0 at region), tried first; -1: none */
  const char* gpu; /* the rank's GPU's sysfs path (NIC choice); NULL: none */
  uint32_t spread; /* ties among NICs spread by it */
  size_t signals;  /* bytes of the signal area (the sources of signal writes) */
  void* extra;     /* host memory sources also lie in, registered as it is; NULL: none */
  size_t extra_bytes;
  void* ctx;       /* handed to the callbacks */
  void (*fail)(void* ctx, int code, const char* msg); /* code: SHUNT_E_NET, SHUNT_E_PEER */
  bool (*give_up)(void* ctx);
};

int shunt_ib_open(const struct shunt_ib_config* cfg, struct shunt_ib** out, struct shunt_ib_card* card,
                  char* err, size_t len);
/* Collective over oob (every rank calls it, one whose open failed with ib NULL). remote[r]:
 * r is on another host. */
int shunt_ib_connect(struct shunt_ib* ib, uint32_t rank, uint32_t nranks,
                     const struct shunt_oob* oob, const bool* remote,
                     const struct shunt_ib_card* cards, char* err, size_t len);
/* The signal area (registered, cfg.signals bytes), for the caller to keep values in. */
uint64_t* shunt_ib_signals(struct shunt_ib* ib);
/* Posts writes of [src, src + bytes) to the peer's region at offset dst_off; *id: the last
 * one's (0 when bytes is 0). A source outside the region, the signal area and cfg.extra (host
 * memory) is copied through the bounce area with memcpy, which may wait for earlier writes.
 * 0, or -1 (failure reported). */
int shunt_ib_write(struct shunt_ib* ib, uint32_t peer, const void* src, uint64_t bytes, uint64_t dst_off,
                   uint64_t* id);
/* Waits until write `id` (and every one before it) completed: 0, or -1 (a failure reported, or
 * give_up). id 0: every write posted so far. */
int shunt_ib_wait(struct shunt_ib* ib, uint32_t peer, uint64_t id);
/* The GID of a card as an address: dotted IPv4 when it maps one, else IPv6 form. */
void shunt_ib_card_where(const struct shunt_ib_card* c, char* out, size_t len);
/* Destroys the queue pairs and frees what open made; NULL is fine. */
void shunt_ib_close(struct shunt_ib* ib);

#endif
