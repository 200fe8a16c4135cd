// The service thread of a context: it carries every QP's writes over TCP, applies the writes that
// arrive for this context's memory regions, and turns ACKs, NAKs and silence into completions.
// It touches sockets only while holding the context lock, and never blocks on one.
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fakeibv_internal.h"

#define MS 1000000ull
#define STAGE_BYTES (64u * 1024u)
#define IN_GRACE_NS (5000 * MS)        // a hello must come, or a refused stream drain, within this
#define OUT_BACKLOG_LIMIT (1u << 20)   // stop reading a sender whose replies pile up unsent
#define READ_BUDGET (8u << 20)         // bytes taken from one connection before looking at others
#define CONNECT_WINDOW_NS (2000 * MS)  // how long connecting is retried when the ACK timeout is infinite

enum fib_in_state { IN_HELLO, IN_HDR, IN_PAYLOAD, IN_DRAIN };

// An accepted connection: a remote QP writing into this context's memory.
struct fib_in {
  struct fib_in* next;
  int fd;
  int pidx;
  enum fib_in_state st;
  char peer[32];
  uint64_t deadline;
  uint32_t from_qpn;
  uint32_t to_qpn;
  union {
    struct fib_hello hello;
    struct fib_write_hdr hdr;
    uint8_t bytes[32];
  } rx;
  size_t rx_off;
  struct fib_write_hdr cur;
  uint64_t received;
  uint64_t applied;
  uint64_t mr_id;
  int atomic;
  enum ibv_wc_status status;
  uint8_t* stage;
  size_t stage_len;
  uint8_t* out;
  size_t out_len;
  size_t out_off;
  size_t out_cap;
  int shut;
};

static const char* dev_name(const struct fib_context* ctx) {
  return ctx->fdev->dev.name;
}

static void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static int would_block(void) {
  return errno == EAGAIN || errno == EWOULDBLOCK;
}

void fib_wire_wake(struct fib_context* ctx) {
  uint64_t one = 1;
  ssize_t r = write(ctx->wake_fd, &one, sizeof(one));
  (void)r;  // a full counter still wakes the thread
}

void fib_wire_close_out(struct fib_qp* q) {
  if (q->fd >= 0) {
    close(q->fd);
    q->fd = -1;
    q->ctx->epoch++;
  }
  q->ost = FIB_OUT_IDLE;
  q->pidx = -1;
  q->hello_off = 0;
  q->rx_off = 0;
}

// ---- the sending side: one connection per QP ----

// err: an errno value saying why, or 0 with the reason in why.
static void out_failed(struct fib_qp* q, int established, int err, const char* why, uint64_t now) {
  uint64_t backoff = q->backoff_ns;
  fib_wire_close_out(q);
  if (!q->head) return;
  if (!established) {
    // The peer QP may not be ready yet: retry as hardware retransmits, until the ACK timeout.
    uint64_t window = q->timeout_ns ? q->timeout_ns : CONNECT_WINDOW_NS;
    q->connect_err = err;
    q->connect_why = why;
    if (now - q->last_progress < window) {
      q->backoff_ns = backoff ? (backoff * 2 < 100 * MS ? backoff * 2 : 100 * MS) : MS;
      q->retry_at = now + q->backoff_ns;
      q->ost = FIB_OUT_BACKOFF;
      return;
    }
  }
  fib_log("%s: QP 0x%06x to QP 0x%06x: %s; retries exhausted", dev_name(q->ctx), q->qp.qp_num,
          q->attr.dest_qp_num, err ? strerror(err) : why);
  fib_qp_to_error(q, IBV_WC_RETRY_EXC_ERR);
}

static void send_hello(struct fib_qp* q, uint64_t now) {
  const uint8_t* p = (const uint8_t*)&q->hello;
  while (q->hello_off < sizeof(q->hello)) {
    ssize_t n = send(q->fd, p + q->hello_off, sizeof(q->hello) - q->hello_off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (!would_block()) out_failed(q, 0, errno, NULL, now);
      return;
    }
    q->hello_off += (size_t)n;
  }
}

static void on_connected(struct fib_qp* q, uint64_t now) {
  q->ost = FIB_OUT_HELLO;
  q->hello = (struct fib_hello){FIB_MAGIC, FIB_HELLO, q->qp.qp_num, q->attr.dest_qp_num};
  q->hello_off = 0;
  q->rx_off = 0;
  send_hello(q, now);
}

static void start_connect(struct fib_qp* q, uint64_t now) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    out_failed(q, 0, errno, NULL, now);
    return;
  }
  set_nodelay(fd);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)(q->attr.dest_qp_num >> 8))};
  sa.sin_addr = q->peer;
  q->fd = fd;
  q->pidx = -1;
  if (connect(fd, (struct sockaddr*)&sa, sizeof(sa)) == 0) {
    on_connected(q, now);
  } else if (errno == EINPROGRESS) {
    q->ost = FIB_OUT_CONNECTING;
  } else {
    out_failed(q, 0, errno, NULL, now);
  }
}

static int sendable(const struct fib_wr* w) {
  return w && !w->hold && !w->fail;
}

static void transmit(struct fib_qp* q, uint64_t now) {
  while (q->ost == FIB_OUT_READY && sendable(q->txnext)) {
    struct fib_wr* w = q->txnext;
    struct iovec iov[1 + FIB_MAX_SGE];
    int n = 0;
    size_t skip = w->sent;
    for (int i = 0; i < w->niov; i++) {
      if (skip >= w->iov[i].iov_len) {
        skip -= w->iov[i].iov_len;
        continue;
      }
      iov[n].iov_base = (uint8_t*)w->iov[i].iov_base + skip;
      iov[n].iov_len = w->iov[i].iov_len - skip;
      skip = 0;
      n++;
    }
    if (n > 0) {
      struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
      ssize_t k = sendmsg(q->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (k < 0) {
        if (!would_block()) out_failed(q, 1, errno, NULL, now);
        return;
      }
      w->sent += (size_t)k;
      q->last_progress = now;
    }
    if (w->sent == sizeof(w->hdr) + w->length) q->txnext = w->next;
  }
}

static void on_reply(struct fib_qp* q, const struct fib_reply* r, uint64_t now) {
  struct fib_wr* w = q->head;
  // A NAK may overtake the rest of its own payload: the receiver refuses at the header.
  int in_order = w && w->seq == r->seq && w->sent > 0;
  if (r->kind == FIB_ACK) in_order = in_order && w->sent == sizeof(w->hdr) + w->length;
  if (r->magic != FIB_MAGIC || (r->kind != FIB_ACK && r->kind != FIB_NAK) || !in_order) {
    out_failed(q, 1, 0, "unexpected reply from the peer", now);
    return;
  }
  q->last_progress = now;
  if (r->kind == FIB_ACK) {
    fib_qp_complete_head(q, IBV_WC_SUCCESS);
    return;
  }
  enum ibv_wc_status st = (enum ibv_wc_status)r->status;
  if (st == IBV_WC_SUCCESS || st > IBV_WC_TM_RNDV_INCOMPLETE) st = IBV_WC_REM_ACCESS_ERR;
  fib_qp_to_error(q, st);
}

static void receive_replies(struct fib_qp* q, uint64_t now) {
  while (q->fd >= 0 && (q->ost == FIB_OUT_HELLO || q->ost == FIB_OUT_READY)) {
    ssize_t n = recv(q->fd, (uint8_t*)&q->rx + q->rx_off, sizeof(q->rx) - q->rx_off, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && !would_block())) {
      out_failed(q, q->ost == FIB_OUT_READY, n == 0 ? 0 : errno, "the peer closed the connection", now);
      return;
    }
    if (n < 0) return;
    q->rx_off += (size_t)n;
    if (q->rx_off < sizeof(q->rx)) continue;
    q->rx_off = 0;
    if (q->ost == FIB_OUT_HELLO) {
      if (q->rx.magic != FIB_MAGIC || q->rx.kind != FIB_WELCOME || q->rx.qpn != q->attr.dest_qp_num) {
        out_failed(q, 0, 0, "the peer answered the hello wrongly", now);
        return;
      }
      q->ost = FIB_OUT_READY;
      q->backoff_ns = 0;
      q->last_progress = now;
    } else {
      on_reply(q, &q->rx, now);
    }
  }
}

static void out_io(struct fib_qp* q, short revents, uint64_t now) {
  if (q->ost == FIB_OUT_CONNECTING) {
    int err = 0;
    socklen_t len = sizeof(err);
    if (getsockopt(q->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    if (err) {
      out_failed(q, 0, err, NULL, now);
    } else if (revents & (POLLOUT | POLLERR | POLLHUP)) {
      on_connected(q, now);
    }
    return;
  }
  if (q->ost == FIB_OUT_HELLO && q->hello_off < sizeof(q->hello)) send_hello(q, now);
  if (revents & (POLLIN | POLLERR | POLLHUP)) receive_replies(q, now);
  transmit(q, now);
}

// Timers and the work that needs no socket event; shrinks *wait to the next deadline.
static void out_step(struct fib_qp* q, uint64_t now, uint64_t* wait) {
  if (q->qp.state != IBV_QPS_RTS) return;
  if (q->head && q->head->fail) {
    fib_qp_to_error(q, q->head->fail);
    return;
  }
  if (q->head && q->timeout_ns) {
    uint64_t deadline = q->last_progress + q->timeout_ns;
    if (now >= deadline) {
      char why[160];
      if (q->ost == FIB_OUT_BACKOFF) {
        snprintf(why, sizeof(why), "cannot connect (%s)",
                 q->connect_err ? strerror(q->connect_err) : q->connect_why);
      } else {
        snprintf(why, sizeof(why), "%s",
                 q->ost == FIB_OUT_CONNECTING ? "no answer to connecting"
                 : q->ost == FIB_OUT_HELLO    ? "no answer to the hello"
                                              : "no ACK");
      }
      fib_log("%s: QP 0x%06x to QP 0x%06x: %s within %llu us; retries exhausted", dev_name(q->ctx),
              q->qp.qp_num, q->attr.dest_qp_num, why, (unsigned long long)(q->timeout_ns / 1000));
      fib_qp_to_error(q, IBV_WC_RETRY_EXC_ERR);
      return;
    }
    if (deadline - now < *wait) *wait = deadline - now;
  }
  if (q->ost == FIB_OUT_BACKOFF) {
    if (now < q->retry_at) {
      if (q->retry_at - now < *wait) *wait = q->retry_at - now;
      return;
    }
    q->ost = FIB_OUT_IDLE;
  }
  if (q->ost == FIB_OUT_IDLE && sendable(q->txnext)) start_connect(q, now);
  transmit(q, now);
}

static short out_events(const struct fib_qp* q) {
  switch (q->ost) {
    case FIB_OUT_CONNECTING:
      return POLLOUT;
    case FIB_OUT_HELLO:
      return (short)(POLLIN | (q->hello_off < sizeof(q->hello) ? POLLOUT : 0));
    case FIB_OUT_READY:
      return (short)(POLLIN | (sendable(q->txnext) ? POLLOUT : 0));
    default:
      return 0;
  }
}

// ---- the receiving side: accepted connections ----

static void in_close(struct fib_context* ctx, struct fib_in* in) {
  for (struct fib_in** pp = &ctx->ins; *pp; pp = &(*pp)->next) {
    if (*pp == in) {
      *pp = in->next;
      break;
    }
  }
  close(in->fd);
  free(in->stage);
  free(in->out);
  free(in);
}

static int in_reply(struct fib_in* in, uint32_t kind, uint32_t status, uint64_t seq) {
  struct fib_reply r = {FIB_MAGIC, kind, status, in->to_qpn, seq};
  if (in->out_len + sizeof(r) > in->out_cap) {
    size_t cap = in->out_cap ? in->out_cap * 2 : 256;
    uint8_t* p = realloc(in->out, cap);
    if (!p) return -1;
    in->out = p;
    in->out_cap = cap;
  }
  memcpy(in->out + in->out_len, &r, sizeof(r));
  in->out_len += sizeof(r);
  return 0;
}

// Returns -1 when the connection broke.
static int in_flush(struct fib_in* in) {
  while (in->out_off < in->out_len) {
    ssize_t n = send(in->fd, in->out + in->out_off, in->out_len - in->out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) return would_block() ? 0 : -1;
    in->out_off += (size_t)n;
  }
  in->out_off = in->out_len = 0;
  if (in->st == IN_DRAIN && !in->shut) {
    // The NAK is out; a FIN after it (not an RST from closing with unread data) lets the sender
    // read it before it sees the end of the stream.
    shutdown(in->fd, SHUT_WR);
    in->shut = 1;
  }
  return 0;
}

static int on_hello(struct fib_context* ctx, struct fib_in* in) {
  const struct fib_hello* h = &in->rx.hello;
  char why[128];
  why[0] = 0;
  struct fib_qp* q = NULL;
  if (h->magic != FIB_MAGIC || h->kind != FIB_HELLO) {
    snprintf(why, sizeof(why), "not a hello (wrong magic or kind)");
  } else if (!(q = fib_qp_by_num(ctx, h->to_qpn))) {
    snprintf(why, sizeof(why), "no QP 0x%06x here", h->to_qpn);
  } else if (q->qp.state != IBV_QPS_RTR && q->qp.state != IBV_QPS_RTS) {
    snprintf(why, sizeof(why), "QP 0x%06x is not in RTR or RTS", h->to_qpn);
  } else if (q->attr.dest_qp_num != h->from_qpn) {
    snprintf(why, sizeof(why), "QP 0x%06x is connected to QP 0x%06x, not to QP 0x%06x", h->to_qpn,
             q->attr.dest_qp_num, h->from_qpn);
  }
  if (why[0]) {
    fib_log("%s: refusing connection from %s: %s", dev_name(ctx), in->peer, why);
    return -1;
  }
  in->from_qpn = h->from_qpn;
  in->to_qpn = h->to_qpn;
  in->st = IN_HDR;
  return in_reply(in, FIB_WELCOME, 0, 0);
}

static void in_drain(struct fib_in* in, uint64_t now) {
  in->st = IN_DRAIN;
  in->deadline = now + IN_GRACE_NS;
}

static int on_header(struct fib_context* ctx, struct fib_in* in, uint64_t now) {
  const struct fib_write_hdr* h = &in->rx.hdr;
  if (h->magic != FIB_MAGIC) {
    fib_log("%s: dropping connection from %s: corrupt write header", dev_name(ctx), in->peer);
    return -1;
  }
  struct fib_qp* q = fib_qp_by_num(ctx, in->to_qpn);
  if (!q || (q->qp.state != IBV_QPS_RTR && q->qp.state != IBV_QPS_RTS)) {
    // Hardware drops packets for such a QP; closing makes the sender fail at once instead of later.
    fib_log("%s: dropping connection from %s: QP 0x%06x is gone or not in RTR or RTS", dev_name(ctx),
            in->peer, in->to_qpn);
    return -1;
  }
  in->cur = *h;
  in->received = in->applied = 0;
  in->stage_len = 0;
  in->status = IBV_WC_SUCCESS;
  if (h->length == 0) return in_reply(in, FIB_ACK, 0, h->seq);
  struct fib_mr* m = fib_mr_find_remote(ctx, q->pd, h->rkey, h->remote_addr, h->length);
  if (!m) {
    in_drain(in, now);
    return in_reply(in, FIB_NAK, IBV_WC_REM_ACCESS_ERR, h->seq);
  }
  if (!in->stage && !(in->stage = malloc(STAGE_BYTES))) return -1;
  in->mr_id = m->id;
  in->atomic = h->remote_addr % 8 == 0 && h->length % 8 == 0;
  in->st = IN_PAYLOAD;
  return 0;
}

// Moves staged payload bytes into the region, as whole 8-byte words where the write allows it.
static void apply_stage(struct fib_context* ctx, struct fib_in* in) {
  struct fib_mr* m = in->status == IBV_WC_SUCCESS ? fib_mr_by_id(ctx, in->mr_id) : NULL;
  if (!m) in->status = in->status == IBV_WC_SUCCESS ? IBV_WC_REM_ACCESS_ERR : in->status;
  if (in->status != IBV_WC_SUCCESS) {
    in->applied += in->stage_len;
    in->stage_len = 0;
    return;
  }
  uint8_t* dst = fib_mr_host(m, in->cur.remote_addr + in->applied);
  if (!in->atomic) {
    memcpy(dst, in->stage, in->stage_len);
    in->applied += in->stage_len;
    in->stage_len = 0;
    return;
  }
  // Readers spin on 8-byte words (flags, semaphores, LL lines) and must never see one torn. Release
  // order also makes each word publish the bytes before it, which hardware gives by PCIe ordering.
  size_t words = in->stage_len & ~(size_t)7;
  for (size_t i = 0; i < words; i += 8) {
    uint64_t v;
    memcpy(&v, in->stage + i, 8);
    __atomic_store_n((uint64_t*)(void*)(dst + i), v, __ATOMIC_RELEASE);
  }
  memmove(in->stage, in->stage + words, in->stage_len - words);
  in->stage_len -= words;
  in->applied += words;
}

static int on_payload(struct fib_context* ctx, struct fib_in* in, uint64_t now) {
  apply_stage(ctx, in);
  if (in->received < in->cur.length) return 0;
  in->st = IN_HDR;
  if (in->status == IBV_WC_SUCCESS) return in_reply(in, FIB_ACK, 0, in->cur.seq);
  fib_log("%s: write from %s into rkey 0x%x lost its memory region while arriving", dev_name(ctx), in->peer,
          in->cur.rkey);
  in_drain(in, now);
  return in_reply(in, FIB_NAK, in->status, in->cur.seq);
}

// Reads what the connection has; returns -1 when it is to be closed.
static int in_read(struct fib_context* ctx, struct fib_in* in, uint64_t now) {
  size_t budget = READ_BUDGET;
  uint8_t sink[4096];
  while (budget > 0 && in->out_len - in->out_off < OUT_BACKLOG_LIMIT) {
    uint8_t* buf;
    size_t want;
    size_t need = in->st == IN_HELLO ? sizeof(struct fib_hello) : sizeof(struct fib_write_hdr);
    if (in->st == IN_HELLO || in->st == IN_HDR) {
      buf = in->rx.bytes + in->rx_off;
      want = need - in->rx_off;
    } else if (in->st == IN_PAYLOAD) {
      buf = in->stage + in->stage_len;
      uint64_t left = in->cur.length - in->received;
      want = STAGE_BYTES - in->stage_len;
      if (left < want) want = (size_t)left;
    } else {
      buf = sink;
      want = sizeof(sink);
    }
    ssize_t n = recv(in->fd, buf, want, MSG_DONTWAIT);
    if (n < 0) {
      if (would_block()) return 0;
      n = 0;
    }
    if (n == 0) {
      if (in->st == IN_HELLO) {
        fib_log("%s: refusing connection from %s: closed before a whole hello", dev_name(ctx), in->peer);
      } else if (in->st != IN_DRAIN && (in->st != IN_HDR || in->rx_off != 0)) {
        fib_log("%s: connection from %s for QP 0x%06x ended in the middle of a write", dev_name(ctx),
                in->peer, in->to_qpn);
      }
      return -1;
    }
    budget -= (size_t)n < budget ? (size_t)n : budget;
    int rc = 0;
    if (in->st == IN_PAYLOAD) {
      in->received += (uint64_t)n;
      in->stage_len += (size_t)n;
      rc = on_payload(ctx, in, now);
    } else if (in->st != IN_DRAIN) {
      in->rx_off += (size_t)n;
      if (in->rx_off < need) continue;
      in->rx_off = 0;
      rc = in->st == IN_HELLO ? on_hello(ctx, in) : on_header(ctx, in, now);
    }
    if (rc < 0) return -1;
  }
  return 0;
}

static void in_io(struct fib_context* ctx, struct fib_in* in, short revents, uint64_t now) {
  int rc = 0;
  if (revents & (POLLIN | POLLERR | POLLHUP)) rc = in_read(ctx, in, now);
  if (rc == 0) rc = in_flush(in);
  if (rc < 0) in_close(ctx, in);
}

static void accept_all(struct fib_context* ctx, uint64_t now) {
  for (;;) {
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);
    int fd = accept4(ctx->listen_fd, (struct sockaddr*)&sa, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (!would_block() && errno != EINTR && errno != ECONNABORTED) {
        fib_log("%s: accept failed: %s", dev_name(ctx), strerror(errno));
      }
      if (errno == ECONNABORTED || errno == EINTR) continue;
      return;
    }
    struct fib_in* in = calloc(1, sizeof(*in));
    if (!in) {
      close(fd);
      continue;
    }
    set_nodelay(fd);
    in->fd = fd;
    in->pidx = -1;
    in->st = IN_HELLO;
    in->deadline = now + IN_GRACE_NS;
    char ip[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &sa.sin_addr, ip, sizeof(ip));
    snprintf(in->peer, sizeof(in->peer), "%s:%u", ip, (unsigned)ntohs(sa.sin_port));
    in->next = ctx->ins;
    ctx->ins = in;
  }
}

static void in_step(struct fib_context* ctx, struct fib_in* in, uint64_t now, uint64_t* wait) {
  if (in->st != IN_HELLO && in->st != IN_DRAIN) return;
  if (now >= in->deadline) {
    if (in->st == IN_HELLO) {
      fib_log("%s: refusing connection from %s: no hello within %llu ms", dev_name(ctx), in->peer,
              (unsigned long long)(IN_GRACE_NS / MS));
    }
    in_close(ctx, in);
    return;
  }
  if (in->deadline - now < *wait) *wait = in->deadline - now;
}

// ---- the thread ----

struct pollset {
  struct pollfd* fds;
  size_t n;
  size_t cap;
};

static int pollset_add(struct pollset* ps, int fd, short events) {
  if (ps->n == ps->cap) {
    size_t cap = ps->cap ? ps->cap * 2 : 64;
    struct pollfd* p = realloc(ps->fds, cap * sizeof(*p));
    if (!p) return -1;
    ps->fds = p;
    ps->cap = cap;
  }
  ps->fds[ps->n] = (struct pollfd){.fd = fd, .events = events};
  return (int)ps->n++;
}

static short revents_of(const struct pollset* ps, int idx) {
  return idx >= 0 && (size_t)idx < ps->n ? ps->fds[idx].revents : 0;
}

static void* service(void* arg) {
  struct fib_context* ctx = arg;
  struct pollset ps = {0};
  pthread_mutex_lock(&ctx->lock);
  while (!ctx->stop) {
    uint64_t now = fib_now_ns();
    uint64_t wait = 1000 * MS;
    for (struct fib_qp* q = ctx->qps; q; q = q->next) out_step(q, now, &wait);
    for (struct fib_in* in = ctx->ins, *nx; in; in = nx) {
      nx = in->next;
      in_step(ctx, in, now, &wait);
    }
    ps.n = 0;
    pollset_add(&ps, ctx->wake_fd, POLLIN);
    pollset_add(&ps, ctx->listen_fd, POLLIN);
    for (struct fib_qp* q = ctx->qps; q; q = q->next) {
      short ev = q->fd >= 0 ? out_events(q) : 0;
      q->pidx = ev ? pollset_add(&ps, q->fd, ev) : -1;
    }
    for (struct fib_in* in = ctx->ins; in; in = in->next) {
      short ev = in->out_len - in->out_off < OUT_BACKLOG_LIMIT ? POLLIN : 0;
      if (in->out_off < in->out_len) ev |= POLLOUT;
      in->pidx = pollset_add(&ps, in->fd, ev);
    }
    uint64_t epoch = ctx->epoch;
    pthread_mutex_unlock(&ctx->lock);
    int r = poll(ps.fds, ps.n, (int)((wait + MS - 1) / MS));
    pthread_mutex_lock(&ctx->lock);
    if (ctx->stop) break;
    if (r <= 0) continue;
    if (ps.fds[0].revents) {
      uint64_t v;
      ssize_t k = read(ctx->wake_fd, &v, sizeof(v));
      (void)k;
    }
    if (ctx->epoch != epoch) continue;
    now = fib_now_ns();
    if (ps.fds[1].revents & POLLIN) accept_all(ctx, now);
    for (struct fib_qp* q = ctx->qps; q; q = q->next) {
      short rev = revents_of(&ps, q->pidx);
      if (rev) out_io(q, rev, now);
    }
    for (struct fib_in* in = ctx->ins, *nx; in; in = nx) {
      nx = in->next;
      short rev = revents_of(&ps, in->pidx);
      if (rev) in_io(ctx, in, rev, now);
    }
  }
  pthread_mutex_unlock(&ctx->lock);
  free(ps.fds);
  return NULL;
}

int fib_wire_start(struct fib_context* ctx) {
  int err = 0;
  ctx->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (ctx->wake_fd < 0) return errno;
  ctx->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (ctx->listen_fd < 0) goto fail;
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0, .sin_addr = ctx->fdev->addr};
  socklen_t len = sizeof(sa);
  if (bind(ctx->listen_fd, (struct sockaddr*)&sa, sizeof(sa)) != 0 || listen(ctx->listen_fd, 128) != 0 ||
      getsockname(ctx->listen_fd, (struct sockaddr*)&sa, &len) != 0) {
    char ip[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &ctx->fdev->addr, ip, sizeof(ip));
    err = errno;
    fib_log("%s: cannot listen on %s: %s", dev_name(ctx), ip, strerror(err));
    errno = err;
    goto fail;
  }
  ctx->port = ntohs(sa.sin_port);
  // The thread takes no signals: they belong to the consumer's threads.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  err = pthread_create(&ctx->thread, NULL, service, ctx);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (err) {
    errno = err;
    goto fail;
  }
  ctx->thread_started = 1;
  return 0;
fail:
  err = errno ? errno : EIO;
  if (ctx->listen_fd >= 0) close(ctx->listen_fd);
  close(ctx->wake_fd);
  ctx->listen_fd = ctx->wake_fd = -1;
  return err;
}

void fib_wire_stop(struct fib_context* ctx) {
  if (ctx->thread_started) {
    pthread_mutex_lock(&ctx->lock);
    ctx->stop = 1;
    pthread_mutex_unlock(&ctx->lock);
    fib_wire_wake(ctx);
    pthread_join(ctx->thread, NULL);
    ctx->thread_started = 0;
  }
  pthread_mutex_lock(&ctx->lock);
  while (ctx->ins) in_close(ctx, ctx->ins);
  pthread_mutex_unlock(&ctx->lock);
  close(ctx->listen_fd);
  close(ctx->wake_fd);
  ctx->listen_fd = ctx->wake_fd = -1;
}
