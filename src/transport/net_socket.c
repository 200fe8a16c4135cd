/* The TCP row of the network table (net.h) over the socket endpoint of
 * transport/socket_ep.h: a put is a write message into the peer's region by offset, a signal
 * a flag message the peer's receiving thread applies once every byte sent before it is in. A
 * device region's data go out through the caller's host staging, piece by piece, and arrive
 * through the endpoint's (staged mode). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/socket_ep.h"
#include "transport/net.h"
#include "transport/trigger.h"
#include "util/status.h"

_Static_assert(sizeof(struct shunt_net_card) <= SHUNT_NET_CARD_BYTES, "socket card too large");

struct sock_row {
  struct shunt_net* net;
  struct shunt_net_ep_config cfg;
};

static char* sock_sink(void* ctx, unsigned buf, uint64_t off) {
  struct sock_row* x = ctx;
  (void)buf; /* always 3: the whole region by offset */
  return x->cfg.region + off;
}

static int sock_landed(void* ctx, uint32_t peer, uint16_t ordinal, unsigned buf, uint64_t off, const char* at,
                       uint64_t bytes) {
  struct sock_row* x = ctx;
  return buf == 3 ? x->cfg.landed(x->cfg.ctx, peer, ordinal, off, at, bytes) : SHUNT_E_INVALID;
}

static void sock_signal(void* ctx, uint32_t peer, uint16_t ordinal) {
  struct sock_row* x = ctx;
  x->cfg.signal(x->cfg.ctx, peer, ordinal);
}

static void sock_fail(void* ctx, int code, const char* msg) {
  struct sock_row* x = ctx;
  x->cfg.fail(x->cfg.ctx, code, msg);
}

static bool sock_give_up(void* ctx) {
  struct sock_row* x = ctx;
  return x->cfg.give_up(x->cfg.ctx);
}

static int sock_open(const struct shunt_net_ep_config* c, void** ep, void* card, char* err, size_t len) {
  *ep = NULL;
  struct sock_row* x = calloc(1, sizeof(*x));
  if (!x) {
    snprintf(err, len, "out of memory");
    return SHUNT_E_NOMEM;
  }
  x->cfg = *c;
  struct shunt_net_config nc = {.rank = c->rank,
                                .nranks = c->nranks,
                                .caps = {0, 0, 0, c->bytes},
                                .ordinals = c->ordinals,
                                .staged = c->device,
                                .ctx = x,
                                .sink = sock_sink,
                                .landed = sock_landed,
                                .signal = sock_signal,
                                .fail = sock_fail,
                                .give_up = sock_give_up};
  const struct sockaddr_storage* where = c->at.net_addr.ss_family ? &c->at.net_addr : NULL;
  int rc = shunt_net_open(&nc, where, &x->net, card, err, len);
  if (rc != SHUNT_OK) {
    free(x);
    return rc;
  }
  *ep = x;
  return 0;
}

static bool sock_usable(const void* card) {
  return ((const struct shunt_net_card*)card)->nsocks != 0;
}

static void sock_where(const void* card, char* out, size_t len) {
  struct sockaddr_storage a;
  if (shunt_wire_to_sockaddr(&((const struct shunt_net_card*)card)->addr, &a) == 0)
    shunt_sock_str(&a, out, len);
}

static int sock_connect(void* ep, const bool* remote, const void* cards, size_t stride, char* err,
                        size_t len) {
  struct sock_row* x = ep;
  uint32_t n = x->cfg.nranks;
  /* The endpoint keeps both lists until it is closed. */
  struct shunt_net_card* c = calloc(n, sizeof(*c));
  if (!c) {
    snprintf(err, len, "out of memory");
    return SHUNT_E_NOMEM;
  }
  for (uint32_t r = 0; r < n; r++) memcpy(&c[r], (const char*)cards + (size_t)r * stride, sizeof(*c));
  int rc = shunt_net_connect(x->net, remote, c, err, len);
  free(c);
  return rc;
}

static int send_data(struct sock_row* x, uint32_t peer, uint16_t ordinal, const char* src, uint64_t bytes,
                     uint64_t dst_off, bool packets) {
  struct shunt_trigger d = {.dst_off = dst_off,
                            .size = bytes,
                            .peer = peer,
                            .ordinal = ordinal,
                            .type = (uint8_t)(SHUNT_TRIG_DATA | (packets ? SHUNT_TRIG_PACKETS : 0)),
                            .dst_buf = 3};
  return shunt_net_send(x->net, &d, src);
}

/* Host memory in every case: a GPU kernel stages what leaves its device (net.h: out_stage). */
static int sock_put(void* ep, uint32_t peer, uint16_t ordinal, const void* src, uint64_t bytes,
                    uint64_t dst_off, bool packets) {
  struct sock_row* x = ep;
  if (!bytes) return 0;
  return send_data(x, peer, ordinal, src, bytes, dst_off, packets);
}

static int sock_signal_send(void* ep, uint32_t peer, uint16_t ordinal) {
  struct sock_row* x = ep;
  struct shunt_trigger f = {.peer = peer, .ordinal = ordinal, .type = SHUNT_TRIG_FLAG};
  return shunt_net_send(x->net, &f, NULL);
}

/* A send returns once its source may be reused. */
static int sock_flush(void* ep, uint32_t peer) {
  (void)ep;
  (void)peer;
  return 0;
}

static void sock_leave(void* ep) {
  struct sock_row* x = ep;
  shunt_net_leave(x->net);
}

static void sock_close(void* ep) {
  struct sock_row* x = ep;
  if (!x) return;
  shunt_net_close(x->net);
  free(x);
}

const struct shunt_net_ops shunt_net_socket = {.name = "socket",
                                               .says = "TCP sockets",
                                               .device_says = "TCP sockets through host memory",
                                               .hands_arrivals = true,
                                               .open = sock_open,
                                               .usable = sock_usable,
                                               .where = sock_where,
                                               .connect = sock_connect,
                                               .put = sock_put,
                                               .signal = sock_signal_send,
                                               .flush = sock_flush,
                                               .leave = sock_leave,
                                               .close = sock_close};
