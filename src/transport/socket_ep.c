/* The socket transport's endpoint (socket_ep.h): connection set-up, the sending side run by
 * the proxy thread, and the receiving thread that hands what arrives to its user's callbacks.
 * Its user: the network table's socket row (net_socket.c). */
#include "transport/socket_ep.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "transport/link.h" /* the trigger, the word copy */
#include "util/env.h"
#include "util/log.h"
#include "util/status.h"

/* ThreadSanitizer sees a region byte that the proxy sent and that a peer's answer later
 * overwrites as a race between the two threads: the order runs through the peer (it answers
 * only after our data and flag arrived), which TSan cannot follow. Told to it here: a send
 * completed releases, a receive acquires. Whether a plan orders such a write after the read
 * is for the plan checks (cross-rank races), not for this. */
#if defined(__SANITIZE_THREAD__)
void __tsan_acquire(void* addr);
void __tsan_release(void* addr);
#define NET_TSAN_RELEASE(p) __tsan_release(p)
#define NET_TSAN_ACQUIRE(p) __tsan_acquire(p)
#else
#define NET_TSAN_RELEASE(p) ((void)(p))
#define NET_TSAN_ACQUIRE(p) ((void)(p))
#endif

#define NET_MAGIC 0x31544e45544e4853ull /* "SHNTNET1" */
#define NET_MAX_SOCKS 4
#define NET_STRIPE_MIN (256u << 10)
#define NET_PENDING 1024u      /* flags waiting for striped data, per peer */
#define NET_BOUNCE (64u << 10) /* packets land through it, whole words at a time */
#define NET_STAGE (1u << 20)   /* staged mode: everything lands through it, handed on per piece */
#define NET_POLL_MS 100

enum { MSG_DATA = 1, MSG_FLAG = 2, MSG_PACKETS = 4, MSG_BYE = 8 };

struct net_msg {
  uint32_t kind;
  uint16_t ordinal;
  uint8_t dst_buf;
  uint8_t pad_;
  uint64_t dst_off;
  uint64_t size;                /* payload bytes that follow (MSG_DATA) */
  uint64_t need[NET_MAX_SOCKS]; /* MSG_FLAG: payload bytes sent on each socket before it */
};

struct net_hello {
  uint64_t magic, nonce;
  uint32_t rank, sock, nranks, pad_;
};

struct pending {
  uint16_t ordinal;
  uint64_t need[NET_MAX_SOCKS];
};

struct net_peer {
  uint32_t nsocks; /* 0: on this host */
  int fd[NET_MAX_SOCKS];
  struct sockaddr_storage addr; /* its listener */
  char where[80];
  uint64_t sent[NET_MAX_SOCKS]; /* proxy thread only */
  bool torn;                    /* a send gave up inside a message: the stream cannot carry another */
  /* receiving thread only */
  uint64_t got[NET_MAX_SOCKS];
  struct pending* q;
  uint32_t qhead, qlen;
  bool left;
};

struct rx_sock {
  int fd;
  uint32_t peer, idx;
  bool dead;
  bool eof; /* ended by the peer closing it, everything it carried read */
  bool in_payload;
  struct net_msg h;
  size_t hgot;
  uint64_t pgot;
  char* dst;
  char* bounce; /* socket 0 only */
  uint32_t bfill;
};

struct shunt_net {
  struct shunt_net_config cfg;
  const bool* remote; /* [nranks], from connect */
  int lfd;
  uint64_t nonce;
  uint32_t nsocks;
  int64_t timeout_ms;
  struct net_peer* peers; /* [nranks] */
  uint32_t bcap;          /* bounce bytes per receiving socket */
  struct rx_sock* rx;
  uint32_t nrx;
  struct pollfd* pfd;
  pthread_t thread;
  bool thread_live;
  atomic_bool stop;
  atomic_bool leaving; /* this rank leaves: peers closing is expected */
  char tsan_clock;     /* only its address: see NET_TSAN_RELEASE */
};

static void sock_opts(int fd, int64_t timeout_ms) {
  int one = 1;
  unsigned int uto = timeout_ms > 0 && timeout_ms < 0x7fffffff ? (unsigned int)timeout_ms : 0;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  /* Unacknowledged data older than this fails the connection: a peer host that stopped
   * answering is found by the sender too, not only by the waits. */
  if (uto) setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &uto, sizeof(uto));
}

int shunt_net_open(const struct shunt_net_config* cfg, const struct sockaddr_storage* where,
                   struct shunt_net** out, struct shunt_net_card* card, char* err, size_t len) {
  *out = NULL;
  memset(card, 0, sizeof(*card));
  struct shunt_net* n = calloc(1, sizeof(*n));
  if (!n || !(n->peers = calloc(cfg->nranks, sizeof(*n->peers)))) {
    free(n);
    snprintf(err, len, "out of memory");
    return SHUNT_E_NOMEM;
  }
  n->cfg = *cfg;
  n->bcap = cfg->staged ? NET_STAGE : NET_BOUNCE;
  n->lfd = -1;
  atomic_init(&n->stop, false);
  atomic_init(&n->leaving, false);
  for (uint32_t r = 0; r < cfg->nranks; r++)
    for (int s = 0; s < NET_MAX_SOCKS; s++) n->peers[r].fd[s] = -1;
  n->nsocks = (uint32_t)shunt_env_int("SHUNT_SOCKET_NSOCKS", 2, 1, NET_MAX_SOCKS);
  n->timeout_ms = shunt_env_int("SHUNT_HOST_TIMEOUT_MS", 30000, 1, INT64_MAX);
  struct sockaddr_storage a;
  int rc = 0;
  if (getrandom(&n->nonce, sizeof(n->nonce), 0) != (ssize_t)sizeof(n->nonce)) {
    snprintf(err, len, "getrandom: %s", strerror(errno));
    rc = SHUNT_E_SYSTEM;
  } else if (where) {
    a = *where;
  } else {
    rc = shunt_sock_pick_addr(&a, err, len);
  }
  if (rc == 0) {
    if (a.ss_family == AF_INET) ((struct sockaddr_in*)&a)->sin_port = 0;
    if (a.ss_family == AF_INET6) ((struct sockaddr_in6*)&a)->sin6_port = 0;
    n->lfd = shunt_sock_listen(&a, err, len);
    if (n->lfd < 0) rc = n->lfd;
  }
  if (rc != 0) {
    n->lfd = -1;
    shunt_net_close(n);
    return rc;
  }
  shunt_wire_from_sockaddr(&card->addr, &a);
  card->nonce = n->nonce;
  card->nsocks = n->nsocks;
  char s[80];
  SHUNT_INFO(SHUNT_NET, "rank %u: socket transport listening on %s, %u socket(s) per peer", cfg->rank,
             shunt_sock_str(&a, s, sizeof(s)), n->nsocks);
  *out = n;
  return 0;
}

/* ---- receiving ---------------------------------------------------------------------- */

static uint64_t buf_cap(const struct shunt_net* n, unsigned type) {
  return type < 4 ? n->cfg.caps[type] : 0;
}

/* Raises the flags of `peer` whose data are all in, in order. */
static void apply_flags(struct shunt_net* n, uint32_t peer) {
  struct net_peer* p = &n->peers[peer];
  while (p->qlen) {
    const struct pending* f = &p->q[p->qhead];
    for (uint32_t s = 0; s < p->nsocks; s++)
      if (p->got[s] < f->need[s]) return;
    n->cfg.signal(n->cfg.ctx, peer, f->ordinal);
    p->qhead = (p->qhead + 1) % NET_PENDING;
    p->qlen--;
  }
}

static int rx_progress(struct shunt_net* n, struct rx_sock* r);

static int rx_fail(struct shunt_net* n, struct rx_sock* r, int code, const char* what) {
  struct net_peer* p = &n->peers[r->peer];
  r->dead = true;
  if (p->left || atomic_load(&n->leaving) || atomic_load(&n->stop)) return 0;
  /* A connection the peer closed delivered everything it carried. A peer that finished its
   * part of a call and went away closes them all, but in no set order: the world fails once
   * every one has ended, so that what it sent on the others (data, and the flags that wait for
   * it) has landed first. A peer that closes one and stays fails nothing here: its other
   * connections keep working, and a wait on it is bounded by the run's timeout. */
  if (r->eof)
    for (uint32_t i = 0; i < n->nrx; i++)
      if (n->rx[i].peer == r->peer && !n->rx[i].dead) return 0;
  /* What the peer sent on its other connections before this one ended still counts: read it
   * first (data and flags land), so that a peer that finished its part of a call and then went
   * away fails only what still waits for it. A failure found there is reported first. */
  for (uint32_t i = 0; i < n->nrx; i++)
    if (n->rx[i].peer == r->peer && !n->rx[i].dead) rx_progress(n, &n->rx[i]);
  char msg[512];
  snprintf(msg, sizeof(msg), "socket transport: connection %u to rank %u at %s: %s", r->idx, r->peer,
           p->where, what);
  n->cfg.fail(n->cfg.ctx, code, msg);
  return code;
}

static int header_done(struct shunt_net* n, struct rx_sock* r) {
  struct net_msg* h = &r->h;
  struct net_peer* p = &n->peers[r->peer];
  if (h->kind & MSG_BYE) {
    p->left = true;
    SHUNT_INFO(SHUNT_NET, "rank %u: rank %u at %s leaves", n->cfg.rank, r->peer, p->where);
    return 0;
  }
  if ((h->kind & ~(uint32_t)(MSG_DATA | MSG_FLAG | MSG_PACKETS)) || h->dst_buf > 3 ||
      h->ordinal >= n->cfg.ordinals || ((h->kind & MSG_FLAG) && r->idx != 0) ||
      (!(h->kind & MSG_DATA) && h->size) || h->size > buf_cap(n, h->dst_buf) ||
      h->dst_off > buf_cap(n, h->dst_buf) - h->size ||
      ((h->kind & MSG_PACKETS) && (r->idx != 0 || h->size % 8)))
    return rx_fail(n, r, SHUNT_E_INVALID, "malformed message");
  if ((h->kind & MSG_DATA) && h->size) {
    r->in_payload = true;
    r->pgot = 0;
    r->bfill = 0;
    r->dst = n->cfg.staged ? NULL : n->cfg.sink(n->cfg.ctx, h->dst_buf, h->dst_off);
    return 0;
  }
  return 1; /* complete */
}

static void msg_done(struct shunt_net* n, struct rx_sock* r) {
  struct net_peer* p = &n->peers[r->peer];
  if (r->h.kind & MSG_DATA) p->got[r->idx] += r->h.size;
  if (r->h.kind & MSG_FLAG) {
    struct pending* f = &p->q[(p->qhead + p->qlen) % NET_PENDING];
    f->ordinal = r->h.ordinal;
    memcpy(f->need, r->h.need, sizeof(f->need));
    p->qlen++;
  }
  apply_flags(n, r->peer);
}

/* A full flag queue holds the first socket (before its next header) until striped data on the
 * others catch up. */
static bool held(const struct shunt_net* n, const struct rx_sock* r) {
  return r->idx == 0 && !r->in_payload && n->peers[r->peer].qlen == NET_PENDING;
}

/* Reads what socket r has: 0 when it would block, the fault's code (the world failed). */
static int rx_progress(struct shunt_net* n, struct rx_sock* r) {
  for (;;) {
    if (r->dead || held(n, r)) return 0;
    ssize_t got;
    if (!r->in_payload) {
      got = recv(r->fd, (char*)&r->h + r->hgot, sizeof(r->h) - r->hgot, 0);
    } else {
      NET_TSAN_ACQUIRE(&n->tsan_clock);
      uint64_t left = r->h.size - r->pgot;
      if ((r->h.kind & MSG_PACKETS) || n->cfg.staged) {
        uint64_t room = n->bcap - r->bfill;
        left -= r->bfill;
        got = recv(r->fd, r->bounce + r->bfill, left < room ? left : room, 0);
      } else {
        got = recv(r->fd, r->dst + r->pgot, left < (1u << 30) ? left : (1u << 30), 0);
      }
    }
    if (got == 0) {
      r->eof = true;
      return rx_fail(n, r, SHUNT_E_PEER, "closed by the peer");
    }
    if (got < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
      if (errno == EINTR) continue;
      int e = errno;
      char why[128];
      snprintf(why, sizeof(why), "receive failed: %s", strerror(e));
      return rx_fail(n, r, shunt_errno_status(e), why);
    }
    if (!r->in_payload) {
      r->hgot += (size_t)got;
      if (r->hgot < sizeof(r->h)) continue;
      r->hgot = 0;
      int rc = header_done(n, r);
      if (rc < 0) return rc;
      if (rc == 1) msg_done(n, r);
      continue;
    }
    if (n->cfg.staged) {
      /* Through the bounce buffer, handed on when full or at the message's end (packets whole:
       * the buffer holds whole words and a packet message is whole words). */
      r->bfill += (uint32_t)got;
      if (r->bfill == n->bcap || r->pgot + r->bfill == r->h.size) {
        if (n->cfg.landed(n->cfg.ctx, r->peer, r->h.ordinal, r->h.dst_buf, r->h.dst_off + r->pgot, r->bounce,
                          r->bfill) != 0)
          return rx_fail(n, r, SHUNT_E_INVALID, "cannot place the data it sent");
        r->pgot += r->bfill;
        r->bfill = 0;
      }
    } else if (r->h.kind & MSG_PACKETS) {
      r->bfill += (uint32_t)got;
      uint32_t whole = r->bfill & ~7u;
      shunt_copy_words(r->dst + r->pgot, r->bounce, whole);
      r->pgot += whole;
      memmove(r->bounce, r->bounce + whole, r->bfill - whole);
      r->bfill -= whole;
    } else {
      r->pgot += (uint64_t)got;
    }
    if (r->pgot == r->h.size) {
      r->in_payload = false;
      msg_done(n, r);
    }
  }
}

static void* rx_main(void* arg) {
  struct shunt_net* n = arg;
  while (!atomic_load_explicit(&n->stop, memory_order_acquire)) {
    for (uint32_t i = 0; i < n->nrx; i++) {
      struct rx_sock* r = &n->rx[i];
      n->pfd[i].fd = r->dead ? -1 : r->fd;
      n->pfd[i].events = held(n, r) ? 0 : POLLIN;
      n->pfd[i].revents = 0;
    }
    int k = poll(n->pfd, n->nrx, NET_POLL_MS);
    if (k <= 0) continue;
    for (uint32_t i = 0; i < n->nrx; i++)
      if (n->pfd[i].revents) rx_progress(n, &n->rx[i]);
  }
  return NULL;
}

/* ---- connecting --------------------------------------------------------------------- */

static int accept_one(struct shunt_net* n, int64_t deadline, char* err, size_t len) {
  struct pollfd pf = {n->lfd, POLLIN, 0};
  int64_t left = deadline - shunt_sock_now_ms();
  if (left <= 0 || poll(&pf, 1, (int)(left < 1000 ? left : 1000)) < 0) {
    if (left <= 0) snprintf(err, len, "timed out waiting for peers of other hosts to connect");
    return left <= 0 ? SHUNT_E_TIMEOUT : 0;
  }
  int fd = shunt_sock_accept(n->lfd);
  if (fd < 0) return 0;
  char from[80];
  shunt_sock_peer_str(fd, from, sizeof(from));
  struct net_hello h;
  char why[256];
  int64_t hello_by = shunt_sock_now_ms() + 5000;
  const char* bad = NULL;
  if (shunt_sock_recv(fd, &h, sizeof(h), hello_by < deadline ? hello_by : deadline, why, sizeof(why)) != 0)
    bad = why;
  else if (h.magic != NET_MAGIC || h.nonce != n->nonce || h.nranks != n->cfg.nranks)
    bad = "not a rank of this communicator";
  else if (h.rank >= n->cfg.rank || !n->remote[h.rank])
    bad = "not a rank of another host that connects to this one";
  else if (h.sock >= n->peers[h.rank].nsocks || n->peers[h.rank].fd[h.sock] >= 0)
    bad = "a connection this rank does not expect";
  if (bad) {
    SHUNT_WARN("rank %u: socket transport refused a connection from %s: %s", n->cfg.rank, from, bad);
    close(fd);
    return 0;
  }
  char ack = 'Y';
  int sent = shunt_sock_send(fd, &ack, 1, deadline, why, sizeof(why));
  if (sent != 0) {
    snprintf(err, len, "rank %u at %s: %s", h.rank, from, why);
    close(fd);
    return sent;
  }
  sock_opts(fd, n->timeout_ms);
  n->peers[h.rank].fd[h.sock] = fd;
  return 1;
}

int shunt_net_connect(struct shunt_net* n, const bool* remote, const struct shunt_net_card* cards, char* err,
                      size_t len) {
  const uint32_t me = n->cfg.rank, nranks = n->cfg.nranks;
  n->remote = remote;
  int64_t deadline = shunt_sock_now_ms() + n->timeout_ms;
  uint32_t expect = 0, total = 0;
  for (uint32_t r = 0; r < nranks; r++) {
    if (r == me || !remote[r]) continue;
    struct net_peer* p = &n->peers[r];
    p->nsocks = cards[r].nsocks < n->nsocks ? cards[r].nsocks : n->nsocks;
    if (p->nsocks < 1 || p->nsocks > NET_MAX_SOCKS) {
      snprintf(err, len, "rank %u published %u sockets per peer", r, cards[r].nsocks);
      return SHUNT_E_INVALID;
    }
    if (shunt_wire_to_sockaddr(&cards[r].addr, &p->addr) != 0) {
      snprintf(err, len, "rank %u published no usable address", r);
      return SHUNT_E_INVALID;
    }
    shunt_sock_str(&p->addr, p->where, sizeof(p->where));
    if (!(p->q = calloc(NET_PENDING, sizeof(*p->q)))) {
      snprintf(err, len, "out of memory");
      return SHUNT_E_NOMEM;
    }
    total += p->nsocks;
    if (r < me) expect += p->nsocks;
  }
  /* Lower ranks connect: send every hello first, since handshakes complete in the listener's
   * backlog before it accepts; then accept; then collect the acknowledgements. */
  char why[256];
  for (uint32_t r = me + 1; r < nranks; r++) {
    if (!remote[r]) continue;
    struct net_peer* p = &n->peers[r];
    for (uint32_t s = 0; s < p->nsocks; s++) {
      int fd = shunt_sock_connect(&p->addr, deadline, why, sizeof(why));
      struct net_hello h = {NET_MAGIC, cards[r].nonce, me, s, nranks, 0};
      int rc = fd < 0 ? fd : shunt_sock_send(fd, &h, sizeof(h), deadline, why, sizeof(why));
      if (rc != 0) {
        if (fd >= 0) close(fd);
        snprintf(err, len, "rank %u at %s: %s", r, p->where, why);
        return rc;
      }
      sock_opts(fd, n->timeout_ms);
      p->fd[s] = fd;
    }
  }
  for (uint32_t got = 0; got < expect;) {
    int rc = accept_one(n, deadline, err, len);
    if (rc < 0) return rc;
    got += (uint32_t)rc;
  }
  for (uint32_t r = me + 1; r < nranks; r++) {
    if (!remote[r]) continue;
    for (uint32_t s = 0; s < n->peers[r].nsocks; s++) {
      char ack = 0;
      int rc = shunt_sock_recv(n->peers[r].fd[s], &ack, 1, deadline, why, sizeof(why));
      if (rc != 0 || ack != 'Y') {
        snprintf(err, len, "rank %u at %s did not accept connection %u: %s", r, n->peers[r].where, s,
                 ack ? "bad reply" : why);
        return rc != 0 ? rc : SHUNT_E_PEER;
      }
    }
  }
  n->rx = calloc(total ? total : 1, sizeof(*n->rx));
  n->pfd = calloc(total ? total : 1, sizeof(*n->pfd));
  if (!n->rx || !n->pfd) {
    snprintf(err, len, "out of memory");
    return SHUNT_E_NOMEM;
  }
  for (uint32_t r = 0; r < nranks; r++)
    for (uint32_t s = 0; s < n->peers[r].nsocks; s++) {
      struct rx_sock* x = &n->rx[n->nrx++];
      x->fd = n->peers[r].fd[s];
      x->peer = r;
      x->idx = s;
      if ((s == 0 || n->cfg.staged) && !(x->bounce = malloc(n->bcap))) {
        snprintf(err, len, "out of memory");
        return SHUNT_E_NOMEM;
      }
    }
  int e = pthread_create(&n->thread, NULL, rx_main, n);
  if (e != 0) {
    snprintf(err, len, "cannot start the socket transport's receiving thread: %s", strerror(e));
    return shunt_errno_status(e);
  }
  n->thread_live = true;
  uint32_t npeers = 0;
  for (uint32_t r = 0; r < nranks; r++) npeers += n->peers[r].nsocks > 0;
  SHUNT_INFO(SHUNT_NET, "rank %u: socket transport connected to %u rank(s) of other hosts over %u socket(s)",
             me, npeers, total);
  return 0;
}

/* ---- sending (the proxy thread) ------------------------------------------------------ */

struct tx {
  int fd;
  struct net_msg h;
  size_t hsent;
  const char* src;
  uint64_t size, sent;
};

static bool tx_done(const struct tx* t) {
  return t->hsent == sizeof(t->h) && t->sent == t->size;
}

/* Writes what the socket takes now: 0 progress or would block, -1 failed (errno). */
static int tx_step(struct tx* t) {
  struct iovec iov[2];
  int k = 0;
  if (t->hsent < sizeof(t->h)) iov[k++] = (struct iovec){(char*)&t->h + t->hsent, sizeof(t->h) - t->hsent};
  if (t->sent < t->size) {
    uint64_t left = t->size - t->sent;
    iov[k++] = (struct iovec){(void*)(t->src + t->sent), left < (1u << 30) ? left : (1u << 30)};
  }
  struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)k};
  ssize_t n = sendmsg(t->fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
  size_t h = sizeof(t->h) - t->hsent;
  if ((size_t)n <= h) {
    t->hsent += (size_t)n;
  } else {
    t->hsent = sizeof(t->h);
    t->sent += (uint64_t)n - h;
  }
  return 0;
}

static bool give_up(const struct shunt_net* n) {
  return n->cfg.give_up(n->cfg.ctx);
}

/* Sends every message of txs (one per socket), interleaved as the sockets take them. */
static int tx_all(struct shunt_net* n, uint32_t peer, struct tx* txs, uint32_t k) {
  for (;;) {
    bool all = true, moved = false;
    struct pollfd pf[NET_MAX_SOCKS];
    uint32_t np = 0;
    for (uint32_t i = 0; i < k; i++) {
      if (tx_done(&txs[i])) continue;
      /* Messages on one socket go whole, in order: a later one waits for an earlier one. */
      bool queued = false;
      for (uint32_t j = 0; j < i; j++) queued |= txs[j].fd == txs[i].fd && !tx_done(&txs[j]);
      if (queued) {
        all = false;
        continue;
      }
      size_t before = txs[i].hsent + (size_t)txs[i].sent;
      if (tx_step(&txs[i]) != 0) {
        int e = errno;
        n->peers[peer].torn = true;
        char msg[512];
        snprintf(msg, sizeof(msg), "socket transport: connection to rank %u at %s: send failed: %s", peer,
                 n->peers[peer].where, strerror(e));
        n->cfg.fail(n->cfg.ctx, shunt_errno_status(e), msg);
        return shunt_errno_status(e);
      }
      moved |= txs[i].hsent + (size_t)txs[i].sent != before;
      if (!tx_done(&txs[i])) {
        all = false;
        pf[np++] = (struct pollfd){txs[i].fd, POLLOUT, 0};
      }
    }
    if (all) {
      NET_TSAN_RELEASE(&n->tsan_clock);
      return 0;
    }
    if (give_up(n)) {
      n->peers[peer].torn = true;
      return SHUNT_E_ABORTED; /* the world gives up: its failure, if any, says why */
    }
    if (!moved) poll(pf, np, NET_POLL_MS);
  }
}

int shunt_net_send(struct shunt_net* n, const struct shunt_trigger* t, const char* src) {
  struct net_peer* p = &n->peers[t->peer];
  bool data = (t->type & SHUNT_TRIG_DATA) && t->size, flag = (t->type & SHUNT_TRIG_FLAG) != 0;
  bool packets = (t->type & SHUNT_TRIG_PACKETS) != 0;
  struct tx txs[NET_MAX_SOCKS];
  uint32_t k = 0;
  if (data && (t->size < NET_STRIPE_MIN || p->nsocks == 1 || packets)) {
    txs[k++] = (struct tx){.fd = p->fd[0],
                           .h = {.kind = MSG_DATA | (packets ? MSG_PACKETS : 0u),
                                 .ordinal = t->ordinal,
                                 .dst_buf = t->dst_buf,
                                 .dst_off = t->dst_off,
                                 .size = t->size},
                           .src = src,
                           .size = t->size};
    p->sent[0] += t->size;
  } else if (data) {
    /* Cut in whole 4 KiB pieces; the last socket takes the rest. */
    uint64_t part = (t->size / p->nsocks) & ~(uint64_t)4095, off = 0;
    for (uint32_t s = 0; s < p->nsocks; s++) {
      uint64_t sz = s + 1 == p->nsocks ? t->size - off : part;
      txs[k++] = (struct tx){.fd = p->fd[s],
                             .h = {.kind = MSG_DATA,
                                   .ordinal = t->ordinal,
                                   .dst_buf = t->dst_buf,
                                   .dst_off = t->dst_off + off,
                                   .size = sz},
                             .src = src + off,
                             .size = sz};
      p->sent[s] += sz;
      off += sz;
    }
  }
  if (flag) {
    /* On the first socket: with its data when they travel there alone, else a message after. */
    if (k != 1) txs[k++] = (struct tx){.fd = p->fd[0], .h = {0}};
    struct net_msg* f = &txs[k - 1].h;
    f->kind |= MSG_FLAG;
    f->ordinal = t->ordinal;
    memcpy(f->need, p->sent, sizeof(f->need));
  }
  return tx_all(n, t->peer, txs, k);
}

/* ---- teardown ------------------------------------------------------------------------- */

void shunt_net_leave(struct shunt_net* n) {
  if (!n || atomic_exchange(&n->leaving, true)) return;
  for (uint32_t r = 0; r < n->cfg.nranks; r++) {
    struct net_peer* p = &n->peers[r];
    /* A goodbye after half a message would read as a malformed one: the peer then learns of
     * the departure from the closed connection. */
    if (!p->nsocks || p->fd[0] < 0 || p->torn) continue;
    struct tx bye = {.fd = p->fd[0], .h = {.kind = MSG_BYE}};
    /* Best effort, bounded: a peer already gone needs no notice. */
    for (int tries = 0; tries < 20 && !tx_done(&bye); tries++) {
      if (tx_step(&bye) != 0) break;
      if (!tx_done(&bye)) {
        struct pollfd pf = {bye.fd, POLLOUT, 0};
        poll(&pf, 1, 10);
      }
    }
  }
}

void shunt_net_close(struct shunt_net* n) {
  if (!n) return;
  atomic_store_explicit(&n->stop, true, memory_order_release);
  if (n->thread_live) pthread_join(n->thread, NULL);
  for (uint32_t r = 0; r < n->cfg.nranks; r++) {
    for (int s = 0; s < NET_MAX_SOCKS; s++)
      if (n->peers[r].fd[s] >= 0) close(n->peers[r].fd[s]);
    free(n->peers[r].q);
  }
  for (uint32_t i = 0; i < n->nrx; i++) free(n->rx[i].bounce);
  if (n->lfd >= 0) close(n->lfd);
  free(n->rx);
  free(n->pfd);
  free(n->peers);
  free(n);
}
