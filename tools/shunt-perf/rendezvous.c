/* See rendezvous.h. Messages: request {magic, nranks, rank} as three u32 in network order;
 * answer: the 128 bytes of the id. */
#include "rendezvous.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define RDV_MAGIC 0x53505246u /* "SPRF" */

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* host:port (the last colon splits, so [v6]:port and v6 literals in brackets work). */
static struct addrinfo* resolve(const char* addr, int passive) {
  char host[256];
  const char* colon = strrchr(addr, ':');
  if (!colon || colon == addr || (size_t)(colon - addr) >= sizeof(host)) {
    fprintf(stderr, "shunt-perf: SHUNT_PERF_ROOT must be host:port, not \"%s\"\n", addr);
    return NULL;
  }
  size_t hl = (size_t)(colon - addr);
  if (addr[0] == '[' && hl >= 2 && addr[hl - 1] == ']') {
    memcpy(host, addr + 1, hl - 2);
    host[hl - 2] = 0;
  } else {
    memcpy(host, addr, hl);
    host[hl] = 0;
  }
  struct addrinfo hints = {
      .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = passive ? AI_PASSIVE : 0};
  struct addrinfo* res = NULL;
  int rc = getaddrinfo(host, colon + 1, &hints, &res);
  if (rc != 0) {
    fprintf(stderr, "shunt-perf: cannot resolve SHUNT_PERF_ROOT %s: %s\n", addr, gai_strerror(rc));
    return NULL;
  }
  return res;
}

static int io_all(int fd, void* buf, size_t n, int writing, double deadline) {
  char* p = buf;
  while (n > 0) {
    int ms = (int)((deadline - now_s()) * 1000);
    struct pollfd pf = {fd, writing ? POLLOUT : POLLIN, 0};
    if (ms <= 0 || poll(&pf, 1, ms) <= 0) return -1;
    ssize_t k = writing ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
    if (k <= 0) return -1;
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

struct server {
  int lfd, nranks, timeout_s;
  const ncclUniqueId* id;
};

static void* serve_main(void* arg) {
  struct server* s = arg;
  double deadline = now_s() + s->timeout_s;
  char* served = calloc((size_t)s->nranks, 1);
  int left = s->nranks - 1;
  while (served && left > 0 && now_s() < deadline) {
    struct pollfd pf = {s->lfd, POLLIN, 0};
    if (poll(&pf, 1, 1000) <= 0) continue;
    int fd = accept(s->lfd, NULL, NULL);
    if (fd < 0) continue;
    uint32_t req[3];
    /* A silent or foreign peer costs at most a few seconds, never the run. */
    if (io_all(fd, req, sizeof(req), 0, now_s() + 5) == 0 && ntohl(req[0]) == RDV_MAGIC &&
        (int)ntohl(req[1]) == s->nranks && ntohl(req[2]) > 0 && (int)ntohl(req[2]) < s->nranks &&
        io_all(fd, (void*)s->id, sizeof(*s->id), 1, now_s() + 5) == 0 && !served[ntohl(req[2])]) {
      served[ntohl(req[2])] = 1;
      left--;
    } else {
      fprintf(stderr, "shunt-perf: refused a connection to the rendezvous that is not a rank of this run\n");
    }
    close(fd);
  }
  if (left > 0) fprintf(stderr, "shunt-perf: %d rank(s) never fetched the id from the rendezvous\n", left);
  free(served);
  close(s->lfd);
  free(s);
  return NULL;
}

int perf_rdv_serve(const char* addr, int nranks, const ncclUniqueId* id, int timeout_s) {
  if (nranks < 2) return 0;
  struct addrinfo* res = resolve(addr, 1);
  if (!res) return -1;
  int fd = -1;
  for (struct addrinfo* a = res; a && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    int one = 1;
    if (fd >= 0 && (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
                    bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 128) != 0)) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd < 0) {
    perror("shunt-perf: cannot listen on SHUNT_PERF_ROOT");
    return -1;
  }
  struct server* s = malloc(sizeof(*s));
  pthread_t t;
  if (!s) {
    close(fd);
    return -1;
  }
  *s = (struct server){fd, nranks, timeout_s, id};
  if (pthread_create(&t, NULL, serve_main, s) != 0) {
    close(fd);
    free(s);
    return -1;
  }
  pthread_detach(t);
  return 0;
}

int perf_rdv_fetch(const char* addr, int rank, int nranks, ncclUniqueId* id, int timeout_s) {
  double deadline = now_s() + timeout_s;
  while (now_s() < deadline) {
    struct addrinfo* res = resolve(addr, 0);
    if (!res) return -1;
    int got = 0;
    for (struct addrinfo* a = res; a && !got; a = a->ai_next) {
      int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
      if (fd < 0) continue;
      uint32_t req[3] = {htonl(RDV_MAGIC), htonl((uint32_t)nranks), htonl((uint32_t)rank)};
      got = connect(fd, a->ai_addr, a->ai_addrlen) == 0 && io_all(fd, req, sizeof(req), 1, deadline) == 0 &&
            io_all(fd, id, sizeof(*id), 0, deadline) == 0;
      close(fd);
    }
    freeaddrinfo(res);
    if (got) return 0;
    usleep(100000); /* rank 0 may not be listening yet */
  }
  fprintf(stderr, "shunt-perf: rank %d: no id from the rendezvous at %s within %d s\n", rank, addr,
          timeout_s);
  return -1;
}
