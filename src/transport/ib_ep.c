/* The verbs endpoint (ib_ep.h): set-up, writes and their completions. */
#include "transport/ib_ep.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/backoff.h"
#include "transport/ib_pick.h"
#include "transport/ibv.h"
#include "transport/exchange.h"
#include "util/env.h"
#include "util/log.h"
#include "util/status.h"

#define IB_SEND_WR 64
#define IB_MAX_WRITE (1ull << 30) /* below every device's max_msg_sz */
#define IB_BOUNCE_SLOTS 4
#define IB_BOUNCE_SLOT (1u << 20)

struct ib_peer {
  struct ibv_qp* qp; /* NULL: on this host */
  uint64_t base;     /* its region, in its process */
  uint32_t rkey;
  char where[64];
};

struct shunt_ib {
  const struct shunt_ibv* ibv;
  struct shunt_ib_config cfg;
  struct shunt_ib_port port;
  struct ibv_pd* pd;
  struct ibv_cq* cq;
  struct ibv_mr* region; /* the caller's region */
  struct ibv_mr* own;    /* signals and bounce slots */
  struct ibv_mr* extra;  /* cfg.extra, NULL: none */
  char* mem;
  char* bounce;
  uint64_t slot_id[IB_BOUNCE_SLOTS]; /* the write that last used each slot */
  uint32_t next_slot;
  struct ib_peer* peers;
  uint64_t posted, completed; /* write ids, proxy thread only */
  int timeout, retry;
};

void shunt_ib_card_where(const struct shunt_ib_card* c, char* out, size_t len) {
  static const uint8_t v4[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  char s[INET6_ADDRSTRLEN] = "?";
  if (!memcmp(c->gid, v4, 12))
    inet_ntop(AF_INET, c->gid + 12, s, sizeof(s));
  else
    inet_ntop(AF_INET6, c->gid, s, sizeof(s));
  if (c->link_layer == IBV_LINK_LAYER_INFINIBAND && c->lid)
    snprintf(out, len, "LID %u (GID %s)", c->lid, s);
  else
    snprintf(out, len, "%s", s);
}

static void fail(struct shunt_ib* ib, int code, const char* fmt, ...) SHUNT_PRINTF(3, 4);
static void fail(struct shunt_ib* ib, int code, const char* fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  ib->cfg.fail(ib->cfg.ctx, code, msg);
}

void shunt_ib_close(struct shunt_ib* ib) {
  if (!ib) return;
  const struct shunt_ibv* v = ib->ibv;
  if (ib->peers)
    for (uint32_t r = 0; r < ib->cfg.nranks; r++)
      if (ib->peers[r].qp) v->destroy_qp(ib->peers[r].qp);
  if (ib->region) v->dereg_mr(ib->region);
  if (ib->own) v->dereg_mr(ib->own);
  if (ib->extra) v->dereg_mr(ib->extra);
  if (ib->cq) v->destroy_cq(ib->cq);
  if (ib->pd) v->dealloc_pd(ib->pd);
  if (ib->port.ctx) v->close_device(ib->port.ctx);
  free(ib->mem);
  free(ib->peers);
  free(ib);
}

/* Device memory by its dma-buf first (nothing needed beyond the GPU driver), else through
 * ibv_reg_mr, which for device memory needs the peer-memory module. */
static struct ibv_mr* reg_region(struct shunt_ib* ib) {
  const struct shunt_ibv* v = ib->ibv;
  const struct shunt_ib_config* c = &ib->cfg;
  int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  if (c->device && c->dmabuf_fd >= 0 && v->reg_dmabuf_mr) {
    struct ibv_mr* mr =
        v->reg_dmabuf_mr(ib->pd, 0, c->bytes, (uint64_t)(uintptr_t)c->region, c->dmabuf_fd, access);
    SHUNT_INFO(SHUNT_NET, "rank %u: GPU region registered by its dma-buf: %s", c->rank,
               mr ? "yes" : strerror(errno));
    if (mr) return mr;
  } else if (c->device) {
    SHUNT_INFO(SHUNT_NET, "rank %u: GPU region registered through peer memory (%s)", c->rank,
               c->dmabuf_fd < 0 ? "the driver gave no dma-buf" : "libibverbs has no ibv_reg_dmabuf_mr");
  }
  return v->reg_mr(ib->pd, c->region, c->bytes, access);
}

static size_t sig_bytes(const struct shunt_ib* ib) {
  return (ib->cfg.signals + 4095) & ~(size_t)4095;
}

int shunt_ib_open(const struct shunt_ib_config* cfg, struct shunt_ib** out, struct shunt_ib_card* card,
                  char* err, size_t len) {
  *out = NULL;
  memset(card, 0, sizeof(*card));
  const struct shunt_ibv* v = shunt_ibv_get(err, len);
  if (!v) return SHUNT_E_NET;
  struct shunt_ib* ib = calloc(1, sizeof(*ib));
  if (!ib || !(ib->peers = calloc(cfg->nranks, sizeof(*ib->peers)))) {
    free(ib);
    snprintf(err, len, "out of memory");
    return SHUNT_E_NOMEM;
  }
  ib->ibv = v;
  ib->cfg = *cfg;
  ib->timeout = (int)shunt_env_int("SHUNT_IB_TIMEOUT", 20, 1, 31);
  ib->retry = (int)shunt_env_int("SHUNT_IB_RETRY_CNT", 7, 0, 7);
  size_t own = sig_bytes(ib) + (size_t)IB_BOUNCE_SLOTS * IB_BOUNCE_SLOT;
  int rc = shunt_ib_pick(v, cfg->gpu, cfg->spread, &ib->port, err, len);
  if (rc == 0 && posix_memalign((void**)&ib->mem, 4096, own) != 0) {
    ib->mem = NULL;
    snprintf(err, len, "out of memory");
    rc = SHUNT_E_NOMEM;
  }
  if (rc == 0) {
    memset(ib->mem, 0, own);
    ib->bounce = ib->mem + sig_bytes(ib);
    const char* what = NULL;
    if (!(ib->pd = v->alloc_pd(ib->port.ctx)))
      what = "allocate a protection domain";
    else if (!(ib->cq = v->create_cq(ib->port.ctx, 2 * IB_SEND_WR, NULL, NULL, 0)))
      what = "create a completion queue";
    else if (!(ib->region = reg_region(ib)))
      what = cfg->device ? "register the GPU region (peer memory: is nvidia-peermem loaded?)"
                         : "register the shared region";
    else if (!(ib->own = v->reg_mr(ib->pd, ib->mem, own, IBV_ACCESS_LOCAL_WRITE)))
      what = "register the bounce buffer";
    else if (cfg->extra &&
             !(ib->extra = v->reg_mr(ib->pd, cfg->extra, cfg->extra_bytes, IBV_ACCESS_LOCAL_WRITE)))
      what = "register the outgoing staging";
    if (what) {
      snprintf(err, len, "verbs: %s:%u: cannot %s: %s", ib->port.dev, ib->port.port, what, strerror(errno));
      rc = SHUNT_E_NET;
    }
  }
  if (rc != 0) {
    shunt_ib_close(ib);
    return rc;
  }
  memcpy(card->gid, ib->port.gid, 16);
  card->base = (uint64_t)(uintptr_t)cfg->region;
  card->rkey = ib->region->rkey;
  card->lid = ib->port.lid;
  card->mtu = ib->port.mtu;
  card->link_layer = ib->port.link_layer;
  card->ok = 1;
  SHUNT_INFO(SHUNT_NET,
             "rank %u: verbs transport on %s:%u, %s region of %zu bytes registered, timeout %d, retries %d",
             cfg->rank, ib->port.dev, ib->port.port, cfg->device ? "GPU" : "shared", cfg->bytes, ib->timeout,
             ib->retry);
  *out = ib;
  return 0;
}

uint64_t* shunt_ib_signals(struct shunt_ib* ib) {
  return (uint64_t*)(void*)ib->mem;
}

static int to_rts(struct shunt_ib* ib, struct ib_peer* p, const struct shunt_ib_card* c, uint32_t dest_qpn,
                  char* err, size_t len) {
  const struct shunt_ibv* v = ib->ibv;
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT,
                          .pkey_index = 0,
                          .port_num = ib->port.port,
                          .qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE};
  int rc = v->modify_qp(p->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  const char* step = "INIT";
  if (rc == 0) {
    a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTR,
                             .path_mtu = c->mtu < ib->port.mtu ? c->mtu : ib->port.mtu,
                             .dest_qp_num = dest_qpn,
                             .rq_psn = 0,
                             .max_dest_rd_atomic = 1,
                             .min_rnr_timer = 12};
    a.ah_attr.port_num = ib->port.port;
    a.ah_attr.dlid = c->lid;
    /* RoCE always routes by GID; InfiniBand inside one subnet by LID. */
    a.ah_attr.is_global = ib->port.link_layer == IBV_LINK_LAYER_ETHERNET || !c->lid;
    if (a.ah_attr.is_global) {
      memcpy(a.ah_attr.grh.dgid.raw, c->gid, 16);
      a.ah_attr.grh.sgid_index = (uint8_t)ib->port.gid_index;
      a.ah_attr.grh.hop_limit = 255;
    }
    step = "RTR";
    rc = v->modify_qp(p->qp, &a,
                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  }
  if (rc == 0) {
    a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS,
                             .timeout = (uint8_t)ib->timeout,
                             .retry_cnt = (uint8_t)ib->retry,
                             .rnr_retry = 7,
                             .sq_psn = 0,
                             .max_rd_atomic = 1};
    step = "RTS";
    rc = v->modify_qp(p->qp, &a,
                      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                          IBV_QP_MAX_QP_RD_ATOMIC);
  }
  if (rc != 0)
    snprintf(err, len, "verbs: queue pair to %s: moving to %s failed: %s", p->where, step, strerror(rc));
  return rc ? SHUNT_E_NET : SHUNT_OK;
}

int shunt_ib_connect(struct shunt_ib* ib, uint32_t me, uint32_t n, const struct shunt_oob* oob,
                     const bool* remote, const struct shunt_ib_card* cards, char* err, size_t len) {
  int rc = ib ? SHUNT_OK : SHUNT_E_NET;
  if (!ib) snprintf(err, len, "this rank has no verbs transport");
  uint8_t* votes = calloc(n, 1);
  uint32_t* qpn = calloc((size_t)n * n, sizeof(*qpn));
  if (rc == 0 && (!votes || !qpn)) {
    snprintf(err, len, "out of memory");
    rc = SHUNT_E_NOMEM;
  }
  for (uint32_t r = 0; r < n && rc == 0; r++) {
    if (r == me || !remote[r]) continue;
    struct ib_peer* p = &ib->peers[r];
    p->base = cards[r].base;
    p->rkey = cards[r].rkey;
    shunt_ib_card_where(&cards[r], p->where, sizeof(p->where));
    struct ibv_qp_init_attr qa = {
        .send_cq = ib->cq,
        .recv_cq = ib->cq,
        .cap = {.max_send_wr = IB_SEND_WR, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1},
        .qp_type = IBV_QPT_RC};
    if (!(p->qp = ib->ibv->create_qp(ib->pd, &qa))) {
      snprintf(err, len, "verbs: cannot create a queue pair for rank %u: %s", r, strerror(errno));
      rc = SHUNT_E_NET;
    } else {
      qpn[(size_t)me * n + r] = p->qp->qp_num;
    }
  }
  /* Every rank takes part in the exchange and the vote, also after a failure, so none waits
   * (without memory for the table it cannot: the exchange then fails on every rank). */
  int ag = qpn ? oob->allgather(oob->ctx, qpn, (size_t)n * sizeof(*qpn)) : SHUNT_E_NOMEM;
  if (ag != 0 && rc == 0) {
    snprintf(err, len, "bootstrap allgather failed");
    rc = ag < 0 ? ag : SHUNT_E_PEER;
  }
  for (uint32_t r = 0; r < n && rc == 0; r++)
    if (ib->peers[r].qp) rc = to_rts(ib, &ib->peers[r], &cards[r], qpn[(size_t)r * n + me], err, len);
  char why[256];
  int agreed = votes ? shunt_world_agree(oob, me, n, rc == 0, votes, why, sizeof(why)) : SHUNT_OK;
  if (agreed != 0 && rc == 0) {
    snprintf(err, len, "%s", why);
    rc = agreed;
  }
  free(votes);
  free(qpn);
  if (rc == 0) {
    uint32_t k = 0;
    for (uint32_t r = 0; r < n; r++) k += ib->peers[r].qp != NULL;
    SHUNT_INFO(SHUNT_NET,
               "rank %u: verbs transport connected to %u rank(s) of other hosts (one RC queue pair each)", me,
               k);
  }
  return rc;
}

/* Polls completions until write `id` has completed: 0, or -1 on an error completion (reported)
 * or when the caller gives up. */
int shunt_ib_wait(struct shunt_ib* ib, uint32_t peer, uint64_t id) {
  struct shunt_backoff bo = {0};
  if (!id) id = ib->posted;
  while (ib->completed < id) {
    struct ibv_wc wc[8];
    int k = ibv_poll_cq(ib->cq, 8, wc);
    if (k < 0) {
      fail(ib, SHUNT_E_NET, "verbs transport: %s:%u: polling completions failed", ib->port.dev,
           ib->port.port);
      return SHUNT_E_NET;
    }
    for (int i = 0; i < k; i++) {
      if (wc[i].status != IBV_WC_SUCCESS) {
        fail(ib, SHUNT_E_NET,
             "verbs transport: %s:%u to rank %u at %s (queue pair %u): %s (status %d, vendor error %u)",
             ib->port.dev, ib->port.port, peer, ib->peers[peer].where, wc[i].qp_num,
             shunt_ibv_status_str(wc[i].status), wc[i].status, wc[i].vendor_err);
        return SHUNT_E_NET;
      }
      if (wc[i].wr_id > ib->completed) ib->completed = wc[i].wr_id;
    }
    if (k == 0) {
      if (ib->cfg.give_up(ib->cfg.ctx)) return SHUNT_E_ABORTED; /* the world's failure says why */
      shunt_backoff(&bo, 0);
    } else {
      bo = (struct shunt_backoff){0};
    }
  }
  return 0;
}

static int post(struct shunt_ib* ib, uint32_t peer, const void* src, uint32_t lkey, uint64_t raddr,
                uint32_t bytes, uint64_t* id) {
  struct ib_peer* p = &ib->peers[peer];
  /* Keep the send queue below its depth: wait for the oldest half first. */
  if (ib->posted - ib->completed >= IB_SEND_WR / 2)
    SHUNT_TRY(shunt_ib_wait(ib, peer, ib->posted - IB_SEND_WR / 4));
  struct ibv_sge sge = {.addr = (uint64_t)(uintptr_t)src, .length = bytes, .lkey = lkey};
  struct ibv_send_wr wr = {.wr_id = ib->posted + 1,
                           .sg_list = &sge,
                           .num_sge = 1,
                           .opcode = IBV_WR_RDMA_WRITE,
                           .send_flags = IBV_SEND_SIGNALED};
  wr.wr.rdma.remote_addr = raddr;
  wr.wr.rdma.rkey = p->rkey;
  struct ibv_send_wr* bad = NULL;
  int rc = ibv_post_send(p->qp, &wr, &bad);
  if (rc != 0) {
    fail(ib, SHUNT_E_NET, "verbs transport: %s:%u to rank %u at %s: posting a write failed: %s", ib->port.dev,
         ib->port.port, peer, p->where, strerror(rc));
    return SHUNT_E_NET;
  }
  *id = ++ib->posted;
  return 0;
}

static bool inside(const char* lo, size_t bytes, const char* p, uint64_t n) {
  return p >= lo && (uint64_t)(p - lo) <= bytes && n <= bytes - (uint64_t)(p - lo);
}

int shunt_ib_write(struct shunt_ib* ib, uint32_t peer, const void* src, uint64_t bytes, uint64_t dst_off,
                   uint64_t* id) {
  const char* s = src;
  uint64_t raddr = ib->peers[peer].base + dst_off;
  *id = 0;
  uint32_t lkey = 0;
  if (inside(ib->cfg.region, ib->cfg.bytes, s, bytes))
    lkey = ib->region->lkey;
  else if (inside(ib->mem, sig_bytes(ib), s, bytes))
    lkey = ib->own->lkey;
  else if (ib->extra && inside(ib->cfg.extra, ib->cfg.extra_bytes, s, bytes))
    lkey = ib->extra->lkey;
  if (lkey) {
    for (uint64_t off = 0; off < bytes; off += IB_MAX_WRITE) {
      uint64_t n = bytes - off < IB_MAX_WRITE ? bytes - off : IB_MAX_WRITE;
      SHUNT_TRY(post(ib, peer, s + off, lkey, raddr + off, (uint32_t)n, id));
    }
    return 0;
  }
  /* Memory the endpoint has not registered: through the bounce slots, each reused once the
   * write that last used it has completed. */
  for (uint64_t off = 0; off < bytes; off += IB_BOUNCE_SLOT) {
    uint32_t k = ib->next_slot++ % IB_BOUNCE_SLOTS;
    if (ib->slot_id[k]) SHUNT_TRY(shunt_ib_wait(ib, peer, ib->slot_id[k]));
    uint64_t n = bytes - off < IB_BOUNCE_SLOT ? bytes - off : IB_BOUNCE_SLOT;
    char* b = ib->bounce + (size_t)k * IB_BOUNCE_SLOT;
    memcpy(b, s + off, n);
    SHUNT_TRY(post(ib, peer, b, ib->own->lkey, raddr + off, (uint32_t)n, &ib->slot_id[k]));
    *id = ib->slot_id[k];
  }
  return 0;
}
