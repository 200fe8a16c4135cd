/* The connections of one bootstrap communicator: lazily opened links to peers, incoming
 * connections that must greet with the key, and the queue of messages nobody asked for yet.
 * Every wait goes through pump(), which reads everything that arrives, so that a rank blocked
 * on sending still drains what its peers send it. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "comm/bootstrap_internal.h"
#include "util/log.h"
#include "util/status.h"

#define GREETING_WAIT_MS 10000 /* how long a fresh connection may take to say who it is */
#define POLL_SLICE_MS 100      /* the longest a wait goes without looking at the abort flag */

int64_t shunt_boot_deadline(const struct shunt_bootstrap* b) {
  return shunt_sock_now_ms() + (int64_t)b->timeout_s * 1000;
}

int shunt_boot_fail(const struct shunt_bootstrap* b, int code, char* err, size_t errlen, const char* fmt,
                    ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  snprintf(err, errlen, "%s", msg);
  SHUNT_WARN("bootstrap: rank %d of %d: %s", b->rank, b->nranks, msg);
  return code;
}

/* fd slots change under the lock (see bootstrap_internal.h). */
static void set_fd(struct shunt_bootstrap* b, int* slot, int fd) {
  pthread_mutex_lock(&b->lock);
  *slot = fd;
  if (fd >= 0 && atomic_load(&b->aborted)) shutdown(fd, SHUT_RDWR);
  pthread_mutex_unlock(&b->lock);
}

static void close_fd(struct shunt_bootstrap* b, int* slot) {
  pthread_mutex_lock(&b->lock);
  int fd = *slot;
  *slot = -1;
  pthread_mutex_unlock(&b->lock);
  if (fd >= 0) close(fd);
}

static void reset_in(struct shunt_bootstrap* b, struct boot_in* l) {
  close_fd(b, &l->fd);
  free(l->body);
  l->body = NULL;
  l->hgot = l->bgot = 0;
}

static void drop_pending(struct shunt_bootstrap* b, struct boot_in* l, const char* why) {
  char a[80];
  SHUNT_WARN("bootstrap: rank %d of %d dropped a connection from %s: %s", b->rank, b->nranks,
             shunt_sock_peer_str(l->fd, a, sizeof(a)), why);
  reset_in(b, l);
}

static void enqueue(struct boot_peer* p, struct boot_msg* m) {
  m->next = NULL;
  if (p->tail)
    p->tail->next = m;
  else
    p->head = m;
  p->tail = m;
}

/* Takes the oldest message of (type, tag) from p's queue, or NULL. */
static struct boot_msg* take(struct boot_peer* p, uint32_t type, int32_t tag) {
  struct boot_msg *prev = NULL, *m = p->head;
  while (m && (m->type != type || m->tag != tag)) prev = m, m = m->next;
  if (!m) return NULL;
  if (prev)
    prev->next = m->next;
  else
    p->head = m->next;
  if (p->tail == m) p->tail = prev;
  return m;
}

/* Why a header read from a connection is not acceptable, or NULL. from < 0: the connection
 * has not said who it is yet, and this must be its greeting. */
static const char* hdr_fault(const struct shunt_bootstrap* b, const struct shunt_boot_hdr* h, int from) {
  if (h->magic != SHUNT_BOOT_WIRE_MAGIC) return "not shunt's protocol";
  if (h->key != b->key) return "it did not present this communicator's key";
  if (from < 0) {
    if (h->type != SHUNT_BOOT_HELLO || h->len != 0) return "malformed greeting";
    if (h->from < 0 || h->from >= b->nranks || h->from == b->rank) return "greeting from a rank out of range";
    return NULL;
  }
  if (h->from != from) return "the sender's rank changed";
  if (h->type != SHUNT_BOOT_USER && h->type != SHUNT_BOOT_COLL) return "unknown message type";
  if (h->len > SHUNT_BOOTSTRAP_MAX_MSG) return "oversized message";
  return NULL;
}

enum read_result { READ_AGAIN, READ_GREETED, READ_CLOSED, READ_FAULT };

/* Reads what l has (from: the peer, or -1 for a connection still to greet); complete messages
 * join the peer's queue. */
static enum read_result read_link(struct shunt_bootstrap* b, struct boot_in* l, int from, const char** why) {
  for (;;) {
    char* dst;
    size_t want;
    if (!l->body) {
      dst = (char*)&l->h + l->hgot;
      want = sizeof(l->h) - l->hgot;
    } else {
      dst = (char*)l->body->data + l->bgot;
      want = l->body->len - l->bgot;
    }
    if (want > 0) {
      ssize_t r = recv(l->fd, dst, want, MSG_DONTWAIT);
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return READ_AGAIN;
      if (r <= 0) {
        *why = r == 0 ? "closed" : strerror(errno);
        return READ_CLOSED;
      }
      if (!l->body) {
        l->hgot += (size_t)r;
        if (l->hgot >= sizeof(l->h.magic) && l->h.magic != SHUNT_BOOT_WIRE_MAGIC) {
          *why = "not shunt's protocol";
          return READ_FAULT;
        }
        if (l->hgot < sizeof(l->h)) continue;
      } else {
        l->bgot += (size_t)r;
        if (l->bgot < l->body->len) continue;
      }
    }
    if (!l->body) { /* a complete header */
      if ((*why = hdr_fault(b, &l->h, from)) != NULL) return READ_FAULT;
      l->hgot = 0;
      if (from < 0) return READ_GREETED;
      l->body = malloc(sizeof(*l->body) + l->h.len);
      if (!l->body) {
        *why = "out of memory for a message";
        return READ_FAULT;
      }
      *l->body = (struct boot_msg){NULL, l->h.type, l->h.tag, l->h.len};
      l->bgot = 0;
      if (l->h.len > 0) continue;
    }
    enqueue(&b->peers[from], l->body);
    l->body = NULL;
  }
}

static void read_peer(struct shunt_bootstrap* b, int p) {
  struct boot_peer* peer = &b->peers[p];
  const char* why = NULL;
  enum read_result r = read_link(b, &peer->in, p, &why);
  if (r == READ_AGAIN) return;
  if (r == READ_FAULT)
    SHUNT_WARN("bootstrap: rank %d of %d: rank %d broke the protocol (%s); its connection is closed", b->rank,
               b->nranks, p, why);
  else
    SHUNT_INFO(SHUNT_BOOTSTRAP, "bootstrap: rank %d of %d: rank %d's connection %s", b->rank, b->nranks, p,
               why);
  reset_in(b, &peer->in);
  peer->gone = r == READ_FAULT ? 2 : 1;
}

static void read_pending(struct shunt_bootstrap* b, struct boot_in* l) {
  const char* why = NULL;
  enum read_result r = read_link(b, l, -1, &why);
  if (r == READ_AGAIN) return;
  if (r != READ_GREETED) {
    drop_pending(b, l, r == READ_CLOSED ? "it closed before greeting" : why);
    return;
  }
  int from = l->h.from;
  struct boot_peer* peer = &b->peers[from];
  if (peer->in.fd >= 0 || peer->gone) {
    drop_pending(b, l, "a second connection claims the same rank");
    return;
  }
  pthread_mutex_lock(&b->lock);
  peer->in = *l;
  l->fd = -1;
  pthread_mutex_unlock(&b->lock);
  read_peer(b, from); /* messages may have come along with the greeting */
}

static void accept_all(struct shunt_bootstrap* b) {
  for (;;) {
    int fd = shunt_sock_accept(b->lfd);
    if (fd < 0) return;
    struct boot_in* slot = NULL;
    for (int i = 0; i < BOOT_PENDING && !slot; i++)
      if (b->pending[i].fd < 0) slot = &b->pending[i];
    if (!slot) { /* full of silent connections: the oldest goes */
      slot = &b->pending[0];
      for (int i = 1; i < BOOT_PENDING; i++)
        if (b->pending[i].deadline < slot->deadline) slot = &b->pending[i];
      drop_pending(b, slot, "too many connections were still greeting");
    }
    slot->deadline = shunt_sock_now_ms() + GREETING_WAIT_MS;
    slot->hgot = slot->bgot = 0;
    set_fd(b, &slot->fd, fd);
    /* A rank greets right after connecting: take it in now, before a flood of strays could
     * push it out of the pending slots. */
    read_pending(b, slot);
  }
}

/* Waits at most one slice (or until `until`) for anything to arrive and reads it. Returns
 * whether xfd (-1: none) became ready for xev. */
static int pump(struct shunt_bootstrap* b, int xfd, short xev, int64_t until) {
  int64_t now = shunt_sock_now_ms();
  int n = 0;
  b->pfd[n] = (struct pollfd){b->lfd, POLLIN, 0};
  b->pfd_who[n++] = -1;
  for (int i = 0; i < BOOT_PENDING; i++) {
    struct boot_in* l = &b->pending[i];
    if (l->fd >= 0 && now >= l->deadline) drop_pending(b, l, "it did not greet in time");
    if (l->fd < 0) continue;
    b->pfd[n] = (struct pollfd){l->fd, POLLIN, 0};
    b->pfd_who[n++] = -2 - i;
  }
  for (int p = 0; p < b->nranks; p++) {
    if (b->peers[p].in.fd < 0) continue;
    b->pfd[n] = (struct pollfd){b->peers[p].in.fd, POLLIN, 0};
    b->pfd_who[n++] = p;
  }
  int x = n;
  if (xfd >= 0) b->pfd[n++] = (struct pollfd){xfd, xev, 0};
  int64_t left = until - now;
  int wait = left <= 0 ? 0 : left > POLL_SLICE_MS ? POLL_SLICE_MS : (int)left;
  if (poll(b->pfd, (nfds_t)n, wait) <= 0) return 0;
  for (int k = 1; k < x; k++) {
    if (!b->pfd[k].revents) continue;
    int who = b->pfd_who[k];
    if (who >= 0) {
      if (b->peers[who].in.fd == b->pfd[k].fd) read_peer(b, who);
    } else if (b->pending[-2 - who].fd == b->pfd[k].fd) {
      read_pending(b, &b->pending[-2 - who]);
    }
  }
  if (b->pfd[0].revents) accept_all(b);
  return xfd >= 0 && b->pfd[x].revents != 0;
}

static int check_peer(struct shunt_bootstrap* b, int peer, char* err, size_t errlen) {
  if (atomic_load(&b->aborted))
    return shunt_boot_fail(b, SHUNT_E_ABORTED, err, errlen, "the communicator was aborted");
  if (!b->table)
    return shunt_boot_fail(b, SHUNT_E_INVALID, err, errlen, "the communicator's init has not finished");
  if (peer < 0 || peer >= b->nranks)
    return shunt_boot_fail(b, SHUNT_E_INVALID, err, errlen, "rank %d is not a peer", peer);
  return 0;
}

/* Writes n bytes on the connection to peer, reading meanwhile. */
static int write_all(struct shunt_bootstrap* b, int peer, const void* buf, size_t n, int64_t deadline,
                     char* err, size_t errlen) {
  struct boot_peer* p = &b->peers[peer];
  const char* c = buf;
  while (n > 0) {
    ssize_t w = send(p->out, c, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      c += w, n -= (size_t)w;
      continue;
    }
    int e = errno;
    if (w < 0 && (e == EAGAIN || e == EWOULDBLOCK || e == EINTR) && !atomic_load(&b->aborted) &&
        shunt_sock_now_ms() < deadline) {
      pump(b, p->out, POLLOUT, deadline);
      continue;
    }
    p->out_broken = 1;
    if (atomic_load(&b->aborted))
      return shunt_boot_fail(b, SHUNT_E_ABORTED, err, errlen, "the communicator was aborted");
    if (w < 0 && (e == EAGAIN || e == EWOULDBLOCK || e == EINTR))
      return shunt_boot_fail(b, SHUNT_E_TIMEOUT, err, errlen, "rank %d read nothing for %d s", peer,
                             b->timeout_s);
    return shunt_boot_fail(b, w < 0 ? shunt_errno_status(e) : SHUNT_E_PEER, err, errlen,
                           "sending to rank %d: %s", peer, w < 0 ? strerror(e) : "nothing sent");
  }
  return 0;
}

/* Opens the connection to peer and greets it. */
static int open_link(struct shunt_bootstrap* b, int peer, int64_t deadline, char* err, size_t errlen) {
  struct sockaddr_storage a;
  if (shunt_wire_to_sockaddr(&b->table[peer], &a) != 0)
    return shunt_boot_fail(b, SHUNT_E_INVALID, err, errlen, "rank %d's address is not valid", peer);
  char why[160];
  int fd = shunt_sock_connect_start(&a, why, sizeof(why));
  if (fd < 0) return shunt_boot_fail(b, fd, err, errlen, "rank %d: %s", peer, why);
  struct boot_peer* p = &b->peers[peer];
  set_fd(b, &p->out, fd);
  while (!pump(b, fd, POLLOUT, deadline)) {
    if (atomic_load(&b->aborted))
      return shunt_boot_fail(b, SHUNT_E_ABORTED, err, errlen, "the communicator was aborted");
    if (shunt_sock_now_ms() >= deadline) {
      p->out_broken = 1;
      return shunt_boot_fail(b, SHUNT_E_TIMEOUT, err, errlen, "connecting to rank %d timed out after %d s",
                             peer, b->timeout_s);
    }
  }
  int e = shunt_sock_connect_result(fd);
  if (e != 0) {
    p->out_broken = 1;
    char s[80];
    return shunt_boot_fail(b, shunt_errno_status(e), err, errlen, "connecting to rank %d at %s: %s", peer,
                           shunt_sock_str(&a, s, sizeof(s)), strerror(e));
  }
  struct shunt_boot_hdr h = {SHUNT_BOOT_WIRE_MAGIC, SHUNT_BOOT_HELLO, b->key, b->rank, 0, 0};
  return write_all(b, peer, &h, sizeof(h), deadline, err, errlen);
}

int shunt_boot_send(struct shunt_bootstrap* b, int peer, uint32_t type, int32_t tag, const void* data,
                    size_t len, int64_t deadline, char* err, size_t errlen) {
  SHUNT_TRY(check_peer(b, peer, err, errlen));
  if (len > SHUNT_BOOTSTRAP_MAX_MSG)
    return shunt_boot_fail(b, SHUNT_E_INVALID, err, errlen,
                           "a message of %zu bytes exceeds the bootstrap's limit of %u", len,
                           SHUNT_BOOTSTRAP_MAX_MSG);
  if (peer == b->rank) {
    struct boot_msg* m = malloc(sizeof(*m) + len);
    if (!m) return shunt_boot_fail(b, SHUNT_E_NOMEM, err, errlen, "out of memory for a message to itself");
    *m = (struct boot_msg){NULL, type, tag, len};
    if (len) memcpy(m->data, data, len);
    enqueue(&b->peers[peer], m);
    return 0;
  }
  struct boot_peer* p = &b->peers[peer];
  if (p->out_broken)
    return shunt_boot_fail(b, SHUNT_E_PEER, err, errlen, "the connection to rank %d broke earlier", peer);
  if (p->out < 0) SHUNT_TRY(open_link(b, peer, deadline, err, errlen));
  struct shunt_boot_hdr h = {SHUNT_BOOT_WIRE_MAGIC, type, b->key, b->rank, tag, len};
  SHUNT_TRY(write_all(b, peer, &h, sizeof(h), deadline, err, errlen));
  return len ? write_all(b, peer, data, len, deadline, err, errlen) : 0;
}

int shunt_boot_recv(struct shunt_bootstrap* b, int peer, uint32_t type, int32_t tag, void* data, size_t len,
                    int64_t deadline, char* err, size_t errlen) {
  SHUNT_TRY(check_peer(b, peer, err, errlen));
  struct boot_peer* p = &b->peers[peer];
  for (;;) {
    if (atomic_load(&b->aborted))
      return shunt_boot_fail(b, SHUNT_E_ABORTED, err, errlen, "the communicator was aborted");
    struct boot_msg* m = take(p, type, tag);
    if (m) {
      int ok = m->len == len;
      if (ok && len) memcpy(data, m->data, len);
      size_t got = m->len;
      free(m);
      if (!ok)
        return shunt_boot_fail(b, SHUNT_E_INVALID, err, errlen,
                               "rank %d sent %zu bytes with tag %d where %zu were expected", peer, got, tag,
                               len);
      return 0;
    }
    if (p->gone)
      return shunt_boot_fail(b, SHUNT_E_PEER, err, errlen,
                             "rank %d %s before sending what this rank waits for (tag %d)", peer,
                             p->gone == 2 ? "broke the protocol" : "closed its connection", tag);
    if (shunt_sock_now_ms() >= deadline)
      return shunt_boot_fail(b, SHUNT_E_TIMEOUT, err, errlen, "rank %d sent nothing with tag %d within %d s",
                             peer, tag, b->timeout_s);
    pump(b, -1, 0, deadline);
  }
}

struct shunt_bootstrap* shunt_boot_new(int rank, int nranks, uint64_t key, int timeout_s, int lfd,
                                       const struct sockaddr_storage* self, char* err, size_t errlen) {
  struct shunt_bootstrap* b = calloc(1, sizeof(*b));
  size_t npfd = 2 + BOOT_PENDING + (size_t)nranks;
  if (b) {
    b->peers = calloc((size_t)nranks, sizeof(*b->peers));
    b->pfd = calloc(npfd, sizeof(*b->pfd));
    b->pfd_who = calloc(npfd, sizeof(*b->pfd_who));
  }
  if (!b || !b->peers || !b->pfd || !b->pfd_who) {
    if (b) free(b->peers), free(b->pfd), free(b->pfd_who);
    free(b);
    close(lfd);
    snprintf(err, errlen, "out of memory for a communicator of %d ranks", nranks);
    return NULL;
  }
  b->rank = rank;
  b->nranks = nranks;
  b->key = key;
  b->timeout_s = timeout_s;
  b->lfd = lfd;
  b->root_fd = -1;
  shunt_wire_from_sockaddr(&b->self, self);
  for (int p = 0; p < nranks; p++) b->peers[p].out = b->peers[p].in.fd = -1;
  for (int i = 0; i < BOOT_PENDING; i++) b->pending[i].fd = -1;
  pthread_mutex_init(&b->lock, NULL);
  atomic_init(&b->aborted, 0);
  return b;
}

void shunt_boot_close_links(struct shunt_bootstrap* b) {
  for (int p = 0; p < b->nranks; p++) {
    struct boot_peer* peer = &b->peers[p];
    close_fd(b, &peer->out);
    reset_in(b, &peer->in);
    while (peer->head) {
      struct boot_msg* m = peer->head;
      peer->head = m->next;
      free(m);
    }
    peer->tail = NULL;
  }
  for (int i = 0; i < BOOT_PENDING; i++) reset_in(b, &b->pending[i]);
  close_fd(b, &b->root_fd);
  close_fd(b, &b->lfd);
}
