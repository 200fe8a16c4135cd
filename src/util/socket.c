/* Listening, connecting and exact-count transfers with deadlines; see socket.h. */
#include "util/socket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "util/status.h"

int64_t shunt_sock_now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static socklen_t addr_len(const struct sockaddr_storage* a) {
  return a->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

void shunt_wire_from_sockaddr(struct shunt_wire_addr* w, const struct sockaddr_storage* a) {
  memset(w, 0, sizeof(*w));
  w->family = a->ss_family;
  if (a->ss_family == AF_INET6) {
    const struct sockaddr_in6* s = (const struct sockaddr_in6*)a;
    w->port = s->sin6_port;
    memcpy(w->addr, &s->sin6_addr, 16);
  } else {
    const struct sockaddr_in* s = (const struct sockaddr_in*)a;
    w->port = s->sin_port;
    memcpy(w->addr, &s->sin_addr, 4);
  }
}

int shunt_wire_to_sockaddr(const struct shunt_wire_addr* w, struct sockaddr_storage* a) {
  memset(a, 0, sizeof(*a));
  if (w->family == AF_INET) {
    struct sockaddr_in* s = (struct sockaddr_in*)a;
    s->sin_family = AF_INET;
    s->sin_port = w->port;
    memcpy(&s->sin_addr, w->addr, 4);
    return 0;
  }
  if (w->family == AF_INET6) {
    struct sockaddr_in6* s = (struct sockaddr_in6*)a;
    s->sin6_family = AF_INET6;
    s->sin6_port = w->port;
    memcpy(&s->sin6_addr, w->addr, 16);
    return 0;
  }
  return SHUNT_E_INVALID;
}

const char* shunt_sock_str(const struct sockaddr_storage* a, char* buf, size_t len) {
  char ip[INET6_ADDRSTRLEN] = "?";
  if (a->ss_family == AF_INET6) {
    const struct sockaddr_in6* s = (const struct sockaddr_in6*)a;
    inet_ntop(AF_INET6, &s->sin6_addr, ip, sizeof(ip));
    snprintf(buf, len, "[%s]:%u", ip, ntohs(s->sin6_port));
  } else if (a->ss_family == AF_INET) {
    const struct sockaddr_in* s = (const struct sockaddr_in*)a;
    inet_ntop(AF_INET, &s->sin_addr, ip, sizeof(ip));
    snprintf(buf, len, "%s:%u", ip, ntohs(s->sin_port));
  } else {
    snprintf(buf, len, "?");
  }
  return buf;
}

const char* shunt_sock_peer_str(int fd, char* buf, size_t len) {
  struct sockaddr_storage a;
  socklen_t n = sizeof(a);
  memset(&a, 0, sizeof(a));
  if (getpeername(fd, (struct sockaddr*)&a, &n) != 0) a.ss_family = AF_UNSPEC;
  return shunt_sock_str(&a, buf, len);
}

int shunt_sock_listen(struct sockaddr_storage* addr, char* err, size_t errlen) {
  int fd = socket(addr->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    int e = errno;
    snprintf(err, errlen, "socket: %s", strerror(e));
    return shunt_errno_status(e);
  }
  socklen_t len = addr_len(addr);
  if (bind(fd, (struct sockaddr*)addr, len) != 0 || listen(fd, SOMAXCONN) != 0 ||
      getsockname(fd, (struct sockaddr*)addr, &len) != 0) {
    char a[80];
    int e = errno;
    snprintf(err, errlen, "listening on %s: %s", shunt_sock_str(addr, a, sizeof(a)), strerror(e));
    close(fd);
    return shunt_errno_status(e);
  }
  return fd;
}

static void no_delay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

int shunt_sock_accept(int lfd) {
  int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd >= 0) no_delay(fd);
  return fd;
}

/* 1 when fd is ready, 0 at the deadline, -1 on error. Waits in slices so that a clock jump
 * or a lost wake-up costs at most one slice. */
static int wait_fd(int fd, short events, int64_t deadline_ms) {
  for (;;) {
    int64_t left = deadline_ms - shunt_sock_now_ms();
    if (left <= 0) return 0;
    struct pollfd p = {fd, events, 0};
    int r = poll(&p, 1, left > 1000 ? 1000 : (int)left);
    if (r > 0) return 1;
    if (r < 0 && errno != EINTR) return -1;
  }
}

int shunt_sock_connect(const struct sockaddr_storage* addr, int64_t deadline_ms, char* err, size_t errlen) {
  char a[80];
  for (;;) {
    int fd = socket(addr->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
      int se = errno;
      snprintf(err, errlen, "socket: %s", strerror(se));
      return shunt_errno_status(se);
    }
    int e = 0;
    if (connect(fd, (const struct sockaddr*)addr, addr_len(addr)) != 0) {
      e = errno;
      if (e == EINPROGRESS) {
        int r = wait_fd(fd, POLLOUT, deadline_ms);
        socklen_t n = sizeof(e);
        if (r <= 0)
          e = r == 0 ? ETIMEDOUT : errno;
        else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &n) != 0)
          e = errno;
      }
    }
    if (e == 0) {
      no_delay(fd);
      return fd;
    }
    close(fd);
    /* Refused: the listener may not be up yet; anything else is final. */
    if ((e != ECONNREFUSED && e != EINTR && e != EAGAIN) || shunt_sock_now_ms() + 20 >= deadline_ms) {
      snprintf(err, errlen, "connecting to %s: %s", shunt_sock_str(addr, a, sizeof(a)), strerror(e));
      return shunt_errno_status(e);
    }
    usleep(20000);
  }
}

int shunt_sock_connect_start(const struct sockaddr_storage* addr, char* err, size_t errlen) {
  char a[80];
  int fd = socket(addr->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    int e = errno;
    snprintf(err, errlen, "socket: %s", strerror(e));
    return shunt_errno_status(e);
  }
  if (connect(fd, (const struct sockaddr*)addr, addr_len(addr)) != 0 && errno != EINPROGRESS) {
    int e = errno;
    snprintf(err, errlen, "connecting to %s: %s", shunt_sock_str(addr, a, sizeof(a)), strerror(e));
    close(fd);
    return shunt_errno_status(e);
  }
  no_delay(fd);
  return fd;
}

int shunt_sock_connect_result(int fd) {
  int e = 0;
  socklen_t n = sizeof(e);
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &n) != 0) return errno;
  return e;
}

int shunt_sock_send(int fd, const void* buf, size_t n, int64_t deadline_ms, char* err, size_t errlen) {
  const char* p = buf;
  while (n > 0) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      p += w;
      n -= (size_t)w;
      continue;
    }
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      int r = wait_fd(fd, POLLOUT, deadline_ms);
      if (r <= 0) {
        int e = errno;
        snprintf(err, errlen, "send timed out");
        return r == 0 ? SHUNT_E_TIMEOUT : shunt_errno_status(e);
      }
      continue;
    }
    int e = errno;
    snprintf(err, errlen, "send: %s", w < 0 ? strerror(e) : "connection closed");
    return w < 0 ? shunt_errno_status(e) : SHUNT_E_PEER;
  }
  return 0;
}

int shunt_sock_recv(int fd, void* buf, size_t n, int64_t deadline_ms, char* err, size_t errlen) {
  char* p = buf;
  while (n > 0) {
    ssize_t got = recv(fd, p, n, MSG_DONTWAIT);
    if (got > 0) {
      p += got;
      n -= (size_t)got;
      continue;
    }
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      int r = wait_fd(fd, POLLIN, deadline_ms);
      if (r <= 0) {
        int e = errno;
        if (r == 0)
          snprintf(err, errlen, "timed out");
        else
          snprintf(err, errlen, "poll: %s", strerror(e));
        return r == 0 ? SHUNT_E_TIMEOUT : SHUNT_E_SYSTEM;
      }
      continue;
    }
    int e = errno;
    snprintf(err, errlen, "%s", got == 0 ? "connection closed by the other end" : strerror(e));
    return got == 0 ? SHUNT_E_PEER : shunt_errno_status(e);
  }
  return 0;
}
