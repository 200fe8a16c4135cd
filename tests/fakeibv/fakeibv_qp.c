// RC queue pairs: creation, the state machine of ibv_modify_qp, and posting work requests.
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fakeibv_internal.h"

static int g_fault_fired;  // FAKEIBV_FAULT_ONCE: a fault has fired in this process

struct fib_qp* fib_qp_by_num(struct fib_context* ctx, uint32_t qpn) {
  for (struct fib_qp* q = ctx->qps; q; q = q->next) {
    if (q->qp.qp_num == qpn) return q;
  }
  return NULL;
}

FIB_EXPORT struct ibv_qp* ibv_create_qp(struct ibv_pd* pd, struct ibv_qp_init_attr* ia) {
  if (!pd || !ia || ia->qp_type != IBV_QPT_RC || !ia->send_cq || !ia->recv_cq ||
      ia->send_cq->context != pd->context || ia->recv_cq->context != pd->context) {
    errno = EINVAL;
    return NULL;
  }
  struct ibv_qp_cap cap = ia->cap;
  if (cap.max_send_wr < 1 || cap.max_send_wr > FIB_MAX_QP_WR || cap.max_recv_wr > FIB_MAX_QP_WR ||
      cap.max_send_sge > FIB_MAX_SGE || cap.max_recv_sge > FIB_MAX_SGE ||
      cap.max_inline_data > FIB_MAX_INLINE) {
    errno = EINVAL;
    return NULL;
  }
  if (cap.max_send_sge < 1) cap.max_send_sge = 1;
  struct fib_context* ctx = fib_ctx(pd->context);
  struct fib_qp* q = calloc(1, sizeof(*q));
  if (!q) {
    errno = ENOMEM;
    return NULL;
  }
  pthread_mutex_lock(&ctx->lock);
  uint32_t qpn = 0;
  int found = 0;
  for (int tries = 0; tries < FIB_MAX_QP && !found; tries++) {
    qpn = ((uint32_t)ctx->port << 8) | (ctx->qp_counter++ & 0xffu);
    found = fib_qp_by_num(ctx, qpn) == NULL;
  }
  if (!found) {
    pthread_mutex_unlock(&ctx->lock);
    free(q);
    errno = ENOMEM;
    return NULL;
  }
  q->ctx = ctx;
  q->pd = FIB_CONTAINER(pd, struct fib_pd, pd);
  q->scq = fib_cq(ia->send_cq);
  q->rcq = fib_cq(ia->recv_cq);
  q->cap = cap;
  q->sq_sig_all = ia->sq_sig_all;
  q->fd = -1;
  q->pidx = -1;
  q->qp.context = pd->context;
  q->qp.qp_context = ia->qp_context;
  q->qp.pd = pd;
  q->qp.send_cq = ia->send_cq;
  q->qp.recv_cq = ia->recv_cq;
  q->qp.srq = ia->srq;
  q->qp.handle = qpn;
  q->qp.qp_num = qpn;
  q->qp.state = IBV_QPS_RESET;
  q->qp.qp_type = IBV_QPT_RC;
  pthread_mutex_init(&q->qp.mutex, NULL);
  pthread_cond_init(&q->qp.cond, NULL);
  q->pd->refs++;
  q->scq->refs++;
  q->rcq->refs++;
  q->next = ctx->qps;
  ctx->qps = q;
  pthread_mutex_unlock(&ctx->lock);
  ia->cap = cap;
  return &q->qp;
}

static void drop_queue(struct fib_qp* q) {
  while (q->head) {
    struct fib_wr* w = q->head;
    q->head = w->next;
    free(w);
  }
  q->tail = q->txnext = NULL;
  q->queued = 0;
}

static void qp_free(struct fib_qp* q) {
  fib_wire_close_out(q);
  drop_queue(q);
  pthread_mutex_destroy(&q->qp.mutex);
  pthread_cond_destroy(&q->qp.cond);
  free(q);
}

FIB_EXPORT int ibv_destroy_qp(struct ibv_qp* ibqp) {
  if (!ibqp) return EINVAL;
  struct fib_qp* q = fib_qp(ibqp);
  struct fib_context* ctx = q->ctx;
  pthread_mutex_lock(&ctx->lock);
  for (struct fib_qp** pp = &ctx->qps; *pp; pp = &(*pp)->next) {
    if (*pp == q) {
      *pp = q->next;
      break;
    }
  }
  q->pd->refs--;
  q->scq->refs--;
  q->rcq->refs--;
  qp_free(q);
  pthread_mutex_unlock(&ctx->lock);
  fib_wire_wake(ctx);
  return 0;
}

void fib_qp_free_all(struct fib_context* ctx) {
  while (ctx->qps) {
    struct fib_qp* q = ctx->qps;
    ctx->qps = q->next;
    qp_free(q);
  }
}

static void push_wc(struct fib_qp* q, uint64_t wr_id, enum ibv_wc_status status, uint64_t len) {
  struct ibv_wc wc;
  memset(&wc, 0, sizeof(wc));
  wc.wr_id = wr_id;
  wc.status = status;
  wc.opcode = IBV_WC_RDMA_WRITE;
  wc.byte_len = (uint32_t)len;
  wc.qp_num = q->qp.qp_num;
  fib_cq_push(q->scq, &wc);
}

void fib_qp_complete_head(struct fib_qp* q, enum ibv_wc_status status) {
  struct fib_wr* w = q->head;
  if (!w) return;
  q->head = w->next;
  if (!q->head) q->tail = NULL;
  if (q->txnext == w) q->txnext = w->next;
  q->queued--;
  // Errors complete even when unsignaled, as on hardware.
  if (status != IBV_WC_SUCCESS || w->signaled) push_wc(q, w->wr_id, status, w->length);
  free(w);
}

void fib_qp_to_error(struct fib_qp* q, enum ibv_wc_status first) {
  enum ibv_wc_status st = first;
  while (q->head) {
    fib_qp_complete_head(q, st);
    st = IBV_WC_WR_FLUSH_ERR;
  }
  q->txnext = NULL;
  q->qp.state = IBV_QPS_ERR;
  q->attr.qp_state = IBV_QPS_ERR;
  fib_wire_close_out(q);
}

enum {
  MASK_INIT = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
  MASK_RTR = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
             IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
  MASK_RTS = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
             IBV_QP_MAX_QP_RD_ATOMIC,
};

static int ipv4_mapped(const union ibv_gid* g) {
  static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return memcmp(g->raw, prefix, sizeof(prefix)) == 0;
}

// Returns 0 when the transition from cur to next with this mask is one an RC QP accepts.
static int check_modify(const struct fib_qp* q, enum ibv_qp_state cur, enum ibv_qp_state next,
                        const struct ibv_qp_attr* a, int mask) {
  int need = 0;
  if (next == IBV_QPS_ERR || next == IBV_QPS_RESET) {
    need = IBV_QP_STATE;
  } else if (cur == IBV_QPS_RESET && next == IBV_QPS_INIT) {
    need = MASK_INIT;
  } else if (cur == IBV_QPS_INIT && next == IBV_QPS_RTR) {
    need = MASK_RTR;
  } else if (cur == IBV_QPS_RTR && next == IBV_QPS_RTS) {
    need = MASK_RTS;
  } else if (!(cur == IBV_QPS_INIT && next == IBV_QPS_INIT) && !(cur == IBV_QPS_RTS && next == IBV_QPS_RTS)) {
    return EINVAL;
  }
  if ((mask & need) != need) return EINVAL;
  if ((mask & IBV_QP_PORT) && a->port_num != 1) return EINVAL;
  if ((mask & IBV_QP_PKEY_INDEX) && a->pkey_index != 0) return EINVAL;
  if ((mask & IBV_QP_PATH_MTU) && (a->path_mtu < IBV_MTU_256 || a->path_mtu > IBV_MTU_4096)) return EINVAL;
  if ((mask & IBV_QP_DEST_QPN) && (a->dest_qp_num == 0 || a->dest_qp_num > 0xffffff)) return EINVAL;
  if (mask & IBV_QP_AV) {
    // RoCE needs a GRH; this NIC routes by the IPv4 address inside the destination GID.
    const struct ibv_global_route* g = &a->ah_attr.grh;
    if (!a->ah_attr.is_global || !ipv4_mapped(&g->dgid) || g->sgid_index > 1) return EINVAL;
  }
  if ((mask & IBV_QP_TIMEOUT) && a->timeout > 31) return EINVAL;
  if ((mask & IBV_QP_RETRY_CNT) && a->retry_cnt > 7) return EINVAL;
  if ((mask & IBV_QP_RNR_RETRY) && a->rnr_retry > 7) return EINVAL;
  (void)q;
  return 0;
}

static void apply_attrs(struct fib_qp* q, const struct ibv_qp_attr* a, int mask) {
  struct ibv_qp_attr* s = &q->attr;
  if (mask & IBV_QP_PKEY_INDEX) s->pkey_index = a->pkey_index;
  if (mask & IBV_QP_PORT) s->port_num = a->port_num;
  if (mask & IBV_QP_ACCESS_FLAGS) s->qp_access_flags = a->qp_access_flags;
  if (mask & IBV_QP_AV) {
    s->ah_attr = a->ah_attr;
    memcpy(&q->peer.s_addr, &a->ah_attr.grh.dgid.raw[12], 4);
  }
  if (mask & IBV_QP_PATH_MTU) s->path_mtu = a->path_mtu;
  if (mask & IBV_QP_DEST_QPN) s->dest_qp_num = a->dest_qp_num;
  if (mask & IBV_QP_RQ_PSN) s->rq_psn = a->rq_psn;
  if (mask & IBV_QP_SQ_PSN) s->sq_psn = a->sq_psn;
  if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) s->max_dest_rd_atomic = a->max_dest_rd_atomic;
  if (mask & IBV_QP_MAX_QP_RD_ATOMIC) s->max_rd_atomic = a->max_rd_atomic;
  if (mask & IBV_QP_MIN_RNR_TIMER) s->min_rnr_timer = a->min_rnr_timer;
  if (mask & IBV_QP_TIMEOUT) s->timeout = a->timeout;
  if (mask & IBV_QP_RETRY_CNT) s->retry_cnt = a->retry_cnt;
  if (mask & IBV_QP_RNR_RETRY) s->rnr_retry = a->rnr_retry;
  if (mask & (IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT)) {
    // The local ACK timeout of IB: 4.096 us * 2^timeout, tried retry_cnt + 1 times; 0 is infinite.
    q->timeout_ns = s->timeout ? (4096ull << s->timeout) * ((uint64_t)s->retry_cnt + 1) : 0;
  }
}

FIB_EXPORT int ibv_modify_qp(struct ibv_qp* ibqp, struct ibv_qp_attr* attr, int attr_mask) {
  if (!ibqp || !attr) return EINVAL;
  struct fib_qp* q = fib_qp(ibqp);
  struct fib_context* ctx = q->ctx;
  pthread_mutex_lock(&ctx->lock);
  enum ibv_qp_state cur = q->qp.state;
  enum ibv_qp_state next = (attr_mask & IBV_QP_STATE) ? attr->qp_state : cur;
  int rc = 0;
  if ((attr_mask & IBV_QP_CUR_STATE) && attr->cur_qp_state != cur) rc = EINVAL;
  if (!rc) rc = check_modify(q, cur, next, attr, attr_mask);
  if (!rc) {
    if (next == IBV_QPS_RESET) {
      fib_wire_close_out(q);
      drop_queue(q);
      memset(&q->attr, 0, sizeof(q->attr));
      q->timeout_ns = 0;
      q->peer.s_addr = 0;
    } else if (next == IBV_QPS_ERR) {
      fib_qp_to_error(q, IBV_WC_WR_FLUSH_ERR);
    } else {
      apply_attrs(q, attr, attr_mask);
    }
    q->qp.state = next;
    q->attr.qp_state = next;
  }
  pthread_mutex_unlock(&ctx->lock);
  if (!rc) fib_wire_wake(ctx);
  return rc;
}

FIB_EXPORT int ibv_query_qp(struct ibv_qp* ibqp, struct ibv_qp_attr* attr, int attr_mask,
                            struct ibv_qp_init_attr* init_attr) {
  (void)attr_mask;
  if (!ibqp || !attr) return EINVAL;
  struct fib_qp* q = fib_qp(ibqp);
  pthread_mutex_lock(&q->ctx->lock);
  *attr = q->attr;
  attr->qp_state = q->qp.state;
  attr->cur_qp_state = q->qp.state;
  attr->cap = q->cap;
  if (init_attr) {
    memset(init_attr, 0, sizeof(*init_attr));
    init_attr->qp_context = q->qp.qp_context;
    init_attr->send_cq = q->qp.send_cq;
    init_attr->recv_cq = q->qp.recv_cq;
    init_attr->srq = q->qp.srq;
    init_attr->cap = q->cap;
    init_attr->qp_type = IBV_QPT_RC;
    init_attr->sq_sig_all = q->sq_sig_all;
  }
  pthread_mutex_unlock(&q->ctx->lock);
  return 0;
}

// Copies one WR for the service thread; returns an errno value when the WR is malformed.
static int copy_wr(struct fib_qp* q, const struct ibv_send_wr* wr, struct fib_wr** out) {
  if (wr->opcode != IBV_WR_RDMA_WRITE && wr->opcode != IBV_WR_RDMA_WRITE_WITH_IMM) return EINVAL;
  if (wr->num_sge < 0 || (uint32_t)wr->num_sge > q->cap.max_send_sge || (wr->num_sge && !wr->sg_list))
    return EINVAL;
  int inl = (wr->send_flags & IBV_SEND_INLINE) != 0;
  uint64_t total = 0;
  for (int i = 0; i < wr->num_sge; i++) total += wr->sg_list[i].length;
  if (inl && total > q->cap.max_inline_data) return EINVAL;
  if (q->queued >= q->cap.max_send_wr) return ENOMEM;
  struct fib_wr* w = calloc(1, sizeof(*w) + (inl ? total : 0));
  if (!w) return ENOMEM;
  w->wr_id = wr->wr_id;
  w->length = total;
  w->signaled = q->sq_sig_all || (wr->send_flags & IBV_SEND_SIGNALED);
  w->seq = q->next_seq++;
  w->hdr.magic = FIB_MAGIC;
  w->hdr.rkey = wr->wr.rdma.rkey;
  w->hdr.remote_addr = wr->wr.rdma.remote_addr;
  w->hdr.length = total;
  w->hdr.seq = w->seq;
  w->iov[0].iov_base = &w->hdr;
  w->iov[0].iov_len = sizeof(w->hdr);
  w->niov = 1;
  if (inl) {
    // Inline data belongs to the WR from now on; the caller may reuse its buffer at once.
    size_t off = 0;
    for (int i = 0; i < wr->num_sge; i++) {
      memcpy(w->inl + off, (const void*)(uintptr_t)wr->sg_list[i].addr, wr->sg_list[i].length);
      off += wr->sg_list[i].length;
    }
    if (total) w->iov[w->niov++] = (struct iovec){w->inl, total};
  } else {
    for (int i = 0; i < wr->num_sge; i++) {
      const struct ibv_sge* s = &wr->sg_list[i];
      if (!s->length) continue;
      struct fib_mr* m = fib_mr_find_local(q->ctx, s->lkey, s->addr, s->length);
      if (!m) w->fail = IBV_WC_LOC_PROT_ERR;
      w->iov[w->niov++] = (struct iovec){m ? fib_mr_host(m, s->addr) : (void*)(uintptr_t)s->addr, s->length};
    }
  }
  *out = w;
  return 0;
}

int fib_post_send(struct ibv_qp* ibqp, struct ibv_send_wr* wr, struct ibv_send_wr** bad_wr) {
  struct fib_qp* q = fib_qp(ibqp);
  struct fib_context* ctx = q->ctx;
  int rc = 0;
  pthread_mutex_lock(&ctx->lock);
  for (; wr; wr = wr->next) {
    if (q->qp.state != IBV_QPS_RTS && q->qp.state != IBV_QPS_ERR) {
      rc = EINVAL;
      break;
    }
    if (q->qp.state == IBV_QPS_ERR) {
      ctx->posted++;
      push_wc(q, wr->wr_id, IBV_WC_WR_FLUSH_ERR, 0);
      continue;
    }
    struct fib_wr* w = NULL;
    rc = copy_wr(q, wr, &w);
    if (rc) break;
    uint64_t n = ++ctx->posted;
    struct fib_fault* f = &ctx->fault;
    // A fault meant for one context of the process: the first to reach it keeps it, the
    // others (other communicators) never see it.
    if (f->once && f->kind != FIB_FAULT_NONE && n == f->n &&
        __atomic_exchange_n(&g_fault_fired, 1, __ATOMIC_ACQ_REL))
      f->kind = FIB_FAULT_NONE;
    if (f->kind == FIB_FAULT_QP_ERROR && n == f->n) {
      fib_qp_to_error(q, IBV_WC_WR_FLUSH_ERR);
      push_wc(q, w->wr_id, IBV_WC_WR_FLUSH_ERR, 0);
      free(w);
      continue;
    }
    if (f->kind == FIB_FAULT_WC_ERROR && n == f->n) w->fail = IBV_WC_REM_ACCESS_ERR;
    if (f->kind == FIB_FAULT_STALL && n >= f->n) w->hold = 1;
    if (!q->head) q->last_progress = fib_now_ns();
    if (q->tail) {
      q->tail->next = w;
    } else {
      q->head = w;
    }
    q->tail = w;
    if (!q->txnext) q->txnext = w;
    q->queued++;
  }
  pthread_mutex_unlock(&ctx->lock);
  fib_wire_wake(ctx);
  if (rc && bad_wr) *bad_wr = wr;
  return rc;
}

int fib_post_recv(struct ibv_qp* ibqp, struct ibv_recv_wr* wr, struct ibv_recv_wr** bad_wr) {
  // Only RDMA writes travel; nothing would ever consume a receive.
  (void)ibqp, (void)wr, (void)bad_wr;
  return 0;
}
