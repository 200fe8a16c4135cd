/* The verbs row of the network table (net.h) over the endpoint of transport/ib_ep.h: a put is
 * an RDMA write into the peer's region, a signal an RDMA write of this rank's count for the
 * channel onto the peer's counter, on the same queue pair after the data. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/status.h"

#include "transport/ib_ep.h"
#include "transport/net.h"

_Static_assert(sizeof(struct shunt_ib_card) <= SHUNT_NET_CARD_BYTES, "verbs card too large");

struct ib_row {
  struct shunt_ib* ib;
  struct shunt_net_ep_config cfg;
  uint64_t* counts; /* in the signal area: [peer * ordinals + ordinal], the counts sent */
};

static int ib_open(const struct shunt_net_ep_config* c, void** ep, void* card, char* err, size_t len) {
  *ep = NULL;
  struct ib_row* x = calloc(1, sizeof(*x));
  if (!x) {
    snprintf(err, len, "out of memory");
    return SHUNT_E_NOMEM;
  }
  x->cfg = *c;
  struct shunt_ib_config ic = {.rank = c->rank,
                               .nranks = c->nranks,
                               .region = c->region,
                               .bytes = c->bytes,
                               .device = c->device,
                               .dmabuf_fd = c->dmabuf_fd,
                               .gpu = c->gpu,
                               .spread = c->rank,
                               .signals = (size_t)c->nranks * c->ordinals * sizeof(uint64_t),
                               .extra = c->out_stage,
                               .extra_bytes = c->out_bytes,
                               .ctx = c->ctx,
                               .fail = c->fail,
                               .give_up = c->give_up};
  int rc = shunt_ib_open(&ic, &x->ib, card, err, len);
  if (rc != SHUNT_OK) {
    free(x);
    return rc;
  }
  x->counts = shunt_ib_signals(x->ib);
  *ep = x;
  return 0;
}

static bool ib_usable(const void* card) {
  return ((const struct shunt_ib_card*)card)->ok != 0;
}

static void ib_where(const void* card, char* out, size_t len) {
  shunt_ib_card_where(card, out, len);
}

static int ib_connect(void* ep, const bool* remote, const void* cards, size_t stride, char* err, size_t len) {
  struct ib_row* x = ep;
  uint32_t n = x->cfg.nranks;
  struct shunt_ib_card* c = calloc(n, sizeof(*c));
  for (uint32_t r = 0; c && r < n; r++) memcpy(&c[r], (const char*)cards + (size_t)r * stride, sizeof(*c));
  /* Collective: called even without memory for the cards (then as a rank without an endpoint),
   * so that no peer waits. */
  int rc = shunt_ib_connect(c ? x->ib : NULL, x->cfg.rank, n, x->cfg.oob, remote, c, err, len);
  if (!c) snprintf(err, len, "out of memory");
  free(c);
  return c ? rc : SHUNT_E_NOMEM;
}

static int ib_put(void* ep, uint32_t peer, uint16_t ordinal, const void* src, uint64_t bytes,
                  uint64_t dst_off, bool packets) {
  struct ib_row* x = ep;
  (void)ordinal; /* the write lands in place; the count follows on the same queue pair */
  (void)packets; /* an RDMA write lands whole aligned words */
  uint64_t id = 0;
  return shunt_ib_write(x->ib, peer, src, bytes, dst_off, &id);
}

static int ib_signal(void* ep, uint32_t peer, uint16_t ordinal) {
  struct ib_row* x = ep;
  if (ordinal >= x->cfg.ordinals) return 0;
  /* Only this rank raises its channel's counter at the peer, so writing its own count is the
   * increment; on the same queue pair after the data, so it lands after them. */
  uint64_t* v = &x->counts[(size_t)peer * x->cfg.ordinals + ordinal];
  (*v)++;
  uint64_t dst = x->cfg.port_off + ((uint64_t)x->cfg.rank * x->cfg.ordinals + ordinal) * sizeof(uint64_t);
  uint64_t id = 0;
  return shunt_ib_write(x->ib, peer, v, sizeof(*v), dst, &id);
}

/* The writes have landed once acknowledged: the sources may be reused. */
static int ib_flush(void* ep, uint32_t peer) {
  struct ib_row* x = ep;
  return shunt_ib_wait(x->ib, peer, 0);
}

static void ib_leave(void* ep) {
  (void)ep;
}

static void ib_close(void* ep) {
  struct ib_row* x = ep;
  if (!x) return;
  shunt_ib_close(x->ib);
  free(x);
}

const struct shunt_net_ops shunt_net_ib = {.name = "ib",
                                           .says = "verbs",
                                           .device_says = "verbs",
                                           .open = ib_open,
                                           .usable = ib_usable,
                                           .where = ib_where,
                                           .connect = ib_connect,
                                           .put = ib_put,
                                           .signal = ib_signal,
                                           .flush = ib_flush,
                                           .leave = ib_leave,
                                           .close = ib_close};
