/* The bootstrap root: a detached thread that gathers every rank's listening address and hands
 * out the table, or tells every waiting rank which ranks never came. See bootstrap.h. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "comm/bootstrap.h"
#include "comm/bootstrap_wire.h"
#include "util/env.h"
#include "util/log.h"
#include "util/status.h"

#define ROOT_PENDING 32        /* connections that have not finished their greeting */
#define GREETING_WAIT_MS 10000 /* how long a fresh connection may take to say who it is */
#define ANSWER_WAIT_MS 10000   /* how long one rank may take to read its answer */

struct greeting {
  struct shunt_boot_hdr h;
  struct shunt_wire_addr addr;
};

struct pending {
  int fd; /* -1: free slot */
  int64_t deadline;
  size_t got;
  struct greeting g;
};

struct root {
  int lfd;
  uint64_t key;
  int timeout_s;
  int64_t deadline;
  int nranks, arrived; /* nranks: 0 until the first rank tells */
  int* fds;            /* per rank: its connection, -1 until it arrives */
  struct shunt_wire_addr* table;
  struct pending pend[ROOT_PENDING];
};

static void drop(struct pending* p, const char* why) {
  char a[80];
  SHUNT_WARN("bootstrap root: dropped a connection from %s: %s", shunt_sock_peer_str(p->fd, a, sizeof(a)),
             why);
  close(p->fd);
  p->fd = -1;
}

/* Tells one rank why it cannot join, then closes its connection. */
static void refuse(int fd, uint64_t key, const char* why) {
  struct shunt_boot_hdr h = {SHUNT_BOOT_WIRE_MAGIC, SHUNT_BOOT_FAIL, key, -1, 0, strlen(why)};
  char err[64];
  int64_t dl = shunt_sock_now_ms() + ANSWER_WAIT_MS;
  if (shunt_sock_send(fd, &h, sizeof(h), dl, err, sizeof(err)) == 0)
    shunt_sock_send(fd, why, h.len, dl, err, sizeof(err));
  close(fd);
}

/* A complete greeting with the right key: takes the rank in, or refuses it. */
static void admit(struct root* rt, struct pending* p) {
  const struct shunt_boot_hdr* h = &p->g.h;
  int fd = p->fd, rank = h->from, n = h->tag;
  p->fd = -1;
  char why[160];
  if (rt->nranks == 0) {
    rt->fds = malloc((size_t)n * sizeof(int));
    rt->table = calloc((size_t)n, sizeof(*rt->table));
    if (!rt->fds || !rt->table) {
      free(rt->fds);
      free(rt->table);
      rt->fds = NULL, rt->table = NULL;
      refuse(fd, rt->key, "the bootstrap root is out of memory");
      return;
    }
    for (int i = 0; i < n; i++) rt->fds[i] = -1;
    rt->nranks = n;
  }
  if (n != rt->nranks) {
    snprintf(why, sizeof(why), "rank %d was told of %d ranks, the ranks before it of %d", rank, n,
             rt->nranks);
  } else if (rt->fds[rank] >= 0) {
    snprintf(why, sizeof(why), "rank %d of %d joined twice", rank, n);
  } else {
    rt->fds[rank] = fd;
    rt->table[rank] = p->g.addr;
    rt->arrived++;
    return;
  }
  SHUNT_WARN("bootstrap root: %s", why);
  refuse(fd, rt->key, why);
}

/* Why a greeting (complete so far as `got` bytes) is not a rank's, or NULL while it may be. */
static const char* greeting_fault(const struct root* rt, const struct greeting* g, size_t got) {
  const struct shunt_boot_hdr* h = &g->h;
  if (got >= sizeof(h->magic) && h->magic != SHUNT_BOOT_WIRE_MAGIC) return "not shunt's protocol";
  if (got < sizeof(*h)) return NULL;
  if (h->type != SHUNT_BOOT_ROOT_HELLO || h->len != sizeof(g->addr)) return "malformed greeting";
  if (h->key != rt->key) return "it did not present this rendezvous's key";
  if (h->tag < 1 || h->tag > SHUNT_BOOTSTRAP_MAX_RANKS || h->from < 0 || h->from >= h->tag)
    return "rank or rank count out of range";
  return NULL;
}

/* Reads what a fresh connection sent so far; drops it once it is clearly not a rank. */
static void read_greeting(struct root* rt, struct pending* p) {
  for (;;) {
    ssize_t r = recv(p->fd, (char*)&p->g + p->got, sizeof(p->g) - p->got, MSG_DONTWAIT);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      drop(p, "closed before it finished its greeting");
      return;
    }
    if (r < 0) return;
    p->got += (size_t)r;
    const char* fault = greeting_fault(rt, &p->g, p->got);
    if (fault) {
      drop(p, fault);
      return;
    }
    if (p->got == sizeof(p->g)) {
      admit(rt, p);
      return;
    }
  }
}

static void accept_all(struct root* rt) {
  for (;;) {
    int fd = shunt_sock_accept(rt->lfd);
    if (fd < 0) return;
    struct pending* slot = NULL;
    for (int i = 0; i < ROOT_PENDING && !slot; i++)
      if (rt->pend[i].fd < 0) slot = &rt->pend[i];
    if (!slot) { /* full of silent connections: the oldest goes */
      slot = &rt->pend[0];
      for (int i = 1; i < ROOT_PENDING; i++)
        if (rt->pend[i].deadline < slot->deadline) slot = &rt->pend[i];
      drop(slot, "too many connections were still greeting");
    }
    *slot = (struct pending){fd, shunt_sock_now_ms() + GREETING_WAIT_MS, 0, {{0}, {0}}};
  }
}

/* "ranks 2, 5 of 8 did not arrive within 3 s" (the list cut after 32 names). */
static void missing_text(const struct root* rt, char* why, size_t len) {
  int missing = rt->nranks - rt->arrived, listed = 0;
  size_t o = (size_t)snprintf(why, len, "%s", missing == 1 ? "rank" : "ranks");
  for (int i = 0; i < rt->nranks && listed < 32; i++)
    if (rt->fds[i] < 0)
      o += (size_t)snprintf(why + o, o < len ? len - o : 0, "%s %d", listed++ ? "," : "", i);
  if (listed < missing) o += (size_t)snprintf(why + o, o < len ? len - o : 0, ", ... (%d in all)", missing);
  snprintf(why + o, o < len ? len - o : 0, " of %d did not arrive within %d s", rt->nranks, rt->timeout_s);
}

static void answer(struct root* rt) {
  char why[512], err[128];
  struct shunt_boot_hdr h = {
      SHUNT_BOOT_WIRE_MAGIC, SHUNT_BOOT_TABLE, rt->key, -1, 0, (uint64_t)rt->nranks * sizeof(*rt->table)};
  const void* body = rt->table;
  if (rt->arrived < rt->nranks) {
    missing_text(rt, why, sizeof(why));
    SHUNT_WARN("bootstrap root: %s", why);
    h.type = SHUNT_BOOT_FAIL;
    h.len = strlen(why);
    body = why;
  }
  for (int i = 0; i < rt->nranks; i++) {
    if (rt->fds[i] < 0) continue;
    int64_t dl = shunt_sock_now_ms() + ANSWER_WAIT_MS;
    if (shunt_sock_send(rt->fds[i], &h, sizeof(h), dl, err, sizeof(err)) != 0 ||
        shunt_sock_send(rt->fds[i], body, h.len, dl, err, sizeof(err)) != 0)
      SHUNT_WARN("bootstrap root: could not answer rank %d: %s", i, err);
  }
}

static void* root_main(void* arg) {
  struct root* rt = arg;
  struct pollfd pfd[1 + ROOT_PENDING];
  int slot_of[1 + ROOT_PENDING];
  while (rt->nranks == 0 || rt->arrived < rt->nranks) {
    int64_t now = shunt_sock_now_ms();
    if (now >= rt->deadline) break;
    int n = 0;
    pfd[n++] = (struct pollfd){rt->lfd, POLLIN, 0};
    for (int i = 0; i < ROOT_PENDING; i++) {
      struct pending* p = &rt->pend[i];
      if (p->fd >= 0 && now >= p->deadline) drop(p, "it sent no complete greeting in time");
      if (p->fd < 0) continue;
      slot_of[n] = i;
      pfd[n++] = (struct pollfd){p->fd, POLLIN, 0};
    }
    int64_t left = rt->deadline - now;
    if (poll(pfd, (nfds_t)n, left > 1000 ? 1000 : (int)left) <= 0) continue;
    for (int k = 1; k < n; k++) {
      struct pending* p = &rt->pend[slot_of[k]];
      if (pfd[k].revents && p->fd == pfd[k].fd) read_greeting(rt, p);
    }
    if (pfd[0].revents) accept_all(rt);
  }
  if (rt->nranks > 0)
    answer(rt);
  else
    SHUNT_WARN("bootstrap root: no rank arrived within %d s", rt->timeout_s);
  for (int i = 0; i < rt->nranks; i++)
    if (rt->fds[i] >= 0) close(rt->fds[i]);
  for (int i = 0; i < ROOT_PENDING; i++)
    if (rt->pend[i].fd >= 0) close(rt->pend[i].fd);
  close(rt->lfd);
  free(rt->fds);
  free(rt->table);
  free(rt);
  return NULL;
}

int shunt_bootstrap_root_create_timeout(struct shunt_bootstrap_id* id, int timeout_s, char* err,
                                        size_t errlen) {
  memset(id, 0, sizeof(*id));
  if (timeout_s < 1) {
    snprintf(err, errlen, "bootstrap timeout %d s is not positive", timeout_s);
    return SHUNT_E_INVALID;
  }
  struct sockaddr_storage addr;
  SHUNT_TRY(shunt_sock_pick_addr(&addr, err, errlen));
  int lfd = shunt_sock_listen(&addr, err, errlen);
  if (lfd < 0) return lfd;
  struct root* rt = calloc(1, sizeof(*rt));
  uint64_t key = 0;
  while (rt && key == 0)
    if (getrandom(&key, sizeof(key), 0) != (ssize_t)sizeof(key)) break;
  if (!rt || key == 0) {
    snprintf(err, errlen, "%s", rt ? "no random bytes for the key" : "out of memory");
    int code = rt ? SHUNT_E_SYSTEM : SHUNT_E_NOMEM;
    free(rt);
    close(lfd);
    return code;
  }
  rt->lfd = lfd;
  rt->key = key;
  rt->timeout_s = timeout_s;
  rt->deadline = shunt_sock_now_ms() + (int64_t)timeout_s * 1000;
  for (int i = 0; i < ROOT_PENDING; i++) rt->pend[i].fd = -1;
  id->key = key;
  id->magic = SHUNT_BOOTSTRAP_MAGIC;
  id->timeout_s = (uint32_t)timeout_s;
  shunt_wire_from_sockaddr(&id->root, &addr);
  pthread_t t;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  int rc = pthread_create(&t, &attr, root_main, rt);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    snprintf(err, errlen, "cannot start the root thread: %s", strerror(rc));
    close(lfd);
    free(rt);
    memset(id, 0, sizeof(*id));
    return shunt_errno_status(rc);
  }
  char a[80];
  SHUNT_INFO(SHUNT_BOOTSTRAP, "bootstrap root listening on %s (timeout %d s)",
             shunt_sock_str(&addr, a, sizeof(a)), timeout_s);
  return 0;
}

int shunt_bootstrap_root_create(struct shunt_bootstrap_id* id, char* err, size_t errlen) {
  int timeout_s = (int)shunt_env_int("SHUNT_BOOTSTRAP_TIMEOUT", 300, 1, 7 * 86400);
  return shunt_bootstrap_root_create_timeout(id, timeout_s, err, errlen);
}

int shunt_bootstrap_id_valid(const struct shunt_bootstrap_id* id) {
  struct sockaddr_storage a;
  return id->magic == SHUNT_BOOTSTRAP_MAGIC && id->key != 0 && id->timeout_s > 0 && id->root.port != 0 &&
         shunt_wire_to_sockaddr(&id->root, &a) == 0;
}
