/* Network reach: how a rank's port channels reach ranks of other hosts. A table of transports
 * (one row each: verbs, TCP sockets), as NCCL's transport table; SHUNT_NET (auto, or a row's
 * name) is read and the row chosen here only, the same for every backend. An endpoint knows
 * nothing of any world: it writes into a peer's region by offset and raises a peer's counter,
 * and hands what arrives to its user's callbacks.
 *
 * Promises of every row, for one peer:
 * - put's data land in the peer's region at dst_off before a later signal's count is seen
 *   there; signals to one peer land in the order they were made;
 * - once flush returns, the sources of every earlier put may be reused and every earlier
 *   put and signal has landed as far as this rank can know (a flush after each trigger is
 *   what the proxies do);
 * - a failure is reported once through the fail callback with its code (util/status.h), the
 *   peer's rank and address and the cause, and put, signal and flush return that code; waits
 *   give up when give_up says so.
 * Choosing (shunt_nets_connect) is collective: every rank decides from the same gathered cards,
 * the first row SHUNT_NET allows that every rank could open; the choice is logged at INFO (NET). */
#ifndef SHUNT_TRANSPORT_NET_H
#define SHUNT_TRANSPORT_NET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "transport/exchange.h"

/* What an endpoint is opened on and calls back into. */
struct shunt_net_ep_config {
  uint32_t rank, nranks;
  char* region; /* this rank's region: peers write into it by offset */
  uint64_t bytes;
  bool device;     /* the region is GPU memory: arrivals staged (rows that hand them on) */
  int dmabuf_fd;   /* device: the region's dma-buf (verbs registration), -1: none */
  const char* gpu; /* device: its GPU's sysfs path (NIC choice), NULL: none */
  /* The counter rank p's channel of ordinal k raises lies at port_off + 8 (p * ordinals + k)
   * of every region. */
  uint64_t port_off;
  uint32_t ordinals;
  const struct shunt_oob* oob; /* the exchange connect swaps its cards over */
  struct shunt_placement at;   /* this rank's host; the listening interface (net_addr) */
  void* ctx;                             /* handed to the callbacks */
  /* code: what failed (util/status.h: SHUNT_E_PEER a peer gone, SHUNT_E_NET the network,
   * SHUNT_E_SYSTEM a system call). */
  void (*fail)(void* ctx, int code, const char* msg);
  bool (*give_up)(void* ctx);
  /* A flag from `peer` on channel `ordinal` arrived, after all its data. */
  void (*signal)(void* ctx, uint32_t peer, uint16_t ordinal);
  /* Device only: bytes from `peer`'s put on channel `ordinal` for region offset `off` arrived
   * in host memory at `at`; 0, or a SHUNT_E_* code (the connection fails). */
  int (*landed)(void* ctx, uint32_t peer, uint16_t ordinal, uint64_t off, const char* at, uint64_t bytes);
  /* Device only: host memory the sources of puts lie in (a GPU kernel stages what leaves the
   * device there; registered for verbs); NULL: none. */
  char* out_stage;
  uint64_t out_bytes;
};

#define SHUNT_NET_CARD_BYTES 128 /* a row's card, what a rank publishes for its peers */

struct shunt_net_ops {
  const char* name;        /* SHUNT_NET's word for it */
  const char* says;        /* how log lines name it */
  const char* device_says; /* the same for device regions */
  /* Device regions: arrivals and flags come through landed and signal (else the row writes
   * them into the region itself, as RDMA does). */
  bool hands_arrivals;
  /* Local: opens this rank's endpoint and fills its card (at most SHUNT_NET_CARD_BYTES). */
  int (*open)(const struct shunt_net_ep_config* c, void** ep, void* card, char* err, size_t len);
  /* Whether a rank's card says its endpoint opened. */
  bool (*usable)(const void* card);
  /* Where a rank's card says it is, for messages. */
  void (*where)(const void* card, char* out, size_t len);
  /* Collective among the ranks (remote[r]: r is on another host; kept until close; rank r's
   * card at cards + r * stride). */
  int (*connect)(void* ep, const bool* remote, const void* cards, size_t stride, char* err, size_t len);
  /* src: host memory (the region of a host world, out_stage of a device one); ordinal: the
   * channel, for rows that hand arrivals on. */
  int (*put)(void* ep, uint32_t peer, uint16_t ordinal, const void* src, uint64_t bytes, uint64_t dst_off,
             bool packets);
  int (*signal)(void* ep, uint32_t peer, uint16_t ordinal);
  int (*flush)(void* ep, uint32_t peer);
  /* Tells peers this rank leaves in order: their teardown logs nothing. */
  void (*leave)(void* ep);
  void (*close)(void* ep);
};

#define SHUNT_NET_ROWS_MAX 4 /* rows the table may grow to (net.c's rows[]) */

/* Bytes of every row's card of one rank (what shunt_nets_open fills, back to back). */
size_t shunt_nets_card_bytes(void);

/* This rank's endpoints: every row SHUNT_NET allows is opened, the chosen one kept. */
struct shunt_nets {
  int kind; /* SHUNT_NET: 0 auto, else 1 + the row */
  void* ep[SHUNT_NET_ROWS_MAX];
  const struct shunt_net_ops* ops; /* chosen (after connect); NULL: none */
  void* chosen;
  uint32_t row;
};

/* Opens every row SHUNT_NET allows: under auto a row that cannot open is logged (INFO) and
 * skipped, except the last, which every rank must have; a named row must open. */
int shunt_nets_open(const struct shunt_net_ep_config* c, struct shunt_nets* n, void* cards, char* err,
                    size_t len);
/* Collective: picks the first allowed row every rank opened (cards: every rank's, at
 * cards + r * stride), logs it, closes the others and connects. where: NULL, or [nranks]
 * strings filled with each remote rank's address. */
int shunt_nets_connect(struct shunt_nets* n, const struct shunt_net_ep_config* c, const bool* remote,
                       const void* cards, size_t stride, char (*where)[64], char* err, size_t len);
void shunt_nets_leave(struct shunt_nets* n);
void shunt_nets_close(struct shunt_nets* n);

#endif
