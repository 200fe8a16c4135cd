/* File descriptors handed to other processes of this host over a Unix socket (gpu_fdpass.h). */
#include "exec/gpu/gpu_fdpass.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "util/status.h"

#define TAKE_TIMEOUT_S 10
#define ANSWER_TIMEOUT_S 2 /* a taker that connects and says nothing holds the thread no longer */

struct offer {
  uint64_t key;
  int fd;
  struct offer* next;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct offer* offers;
static int listener = -1;
static char name[SHUNT_FDPASS_NAME];
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static uint64_t random64(void) {
  uint64_t v = 0;
  while (v == 0) {
    if (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v)) {
      /* No entropy source: the time, the pid and an address still differ between processes. */
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      v = ((uint64_t)ts.tv_nsec << 20 ^ (uint64_t)ts.tv_sec ^ (uint64_t)getpid() << 40) *
              0x9e3779b97f4a7c15ull ^
          (uint64_t)(uintptr_t)&v;
    }
  }
  return v;
}

/* An abstract address: no file, gone with the socket. */
static socklen_t address(struct sockaddr_un* a, const char* n) {
  memset(a, 0, sizeof(*a));
  a->sun_family = AF_UNIX;
  size_t k = strnlen(n, SHUNT_FDPASS_NAME - 1);
  memcpy(a->sun_path + 1, n, k);
  return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + k);
}

static void timeouts(int s, int seconds) {
  struct timeval tv = {seconds, 0};
  setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

/* One connection: a key in, one byte out, with the descriptor when the key is on offer. */
static void answer(int c) {
  struct ucred who;
  socklen_t wl = sizeof(who);
  uint64_t key = 0;
  timeouts(c, ANSWER_TIMEOUT_S);
  if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &who, &wl) != 0 || who.uid != geteuid() ||
      recv(c, &key, sizeof(key), MSG_WAITALL) != (ssize_t)sizeof(key))
    return;
  char yes = 'y', no = 'n';
  struct iovec iov = {&no, 1};
  union {
    struct cmsghdr h;
    char buf[CMSG_SPACE(sizeof(int))];
  } ctl;
  struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
  /* Sent under the lock: a withdrawal waits, so the descriptor is still open when the kernel
   * duplicates it into the message. */
  pthread_mutex_lock(&mu);
  struct offer* o = offers;
  while (o && o->key != key) o = o->next;
  if (o) {
    iov.iov_base = &yes;
    memset(&ctl, 0, sizeof(ctl));
    m.msg_control = ctl.buf;
    m.msg_controllen = sizeof(ctl.buf);
    struct cmsghdr* h = CMSG_FIRSTHDR(&m);
    h->cmsg_level = SOL_SOCKET;
    h->cmsg_type = SCM_RIGHTS;
    h->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(h), &o->fd, sizeof(int));
  }
  if (sendmsg(c, &m, MSG_NOSIGNAL) < 0) { /* the taker gave up: nothing to do */
  }
  pthread_mutex_unlock(&mu);
}

static void* serve(void* arg) {
  int s = (int)(intptr_t)arg;
  for (;;) {
    int c = accept4(s, NULL, NULL, SOCK_CLOEXEC);
    if (c < 0) {
      if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE) {
        if (errno == EMFILE || errno == ENFILE) nanosleep(&(struct timespec){0, 10000000}, NULL);
        continue;
      }
      return NULL;
    }
    answer(c);
    close(c);
  }
}

/* The child of a fork has no thread answering: it starts over (its first offer makes its own
 * socket). The descriptors offered are the parent's to close. */
static void forget_in_child(void) {
  while (offers) {
    struct offer* o = offers;
    offers = o->next;
    free(o);
  }
  if (listener >= 0) close(listener);
  listener = -1;
  name[0] = 0;
  pthread_mutex_init(&mu, NULL);
}
static void install_atfork(void) {
  pthread_atfork(NULL, NULL, forget_in_child);
}

/* The socket and its thread, made at the first offer; the caller holds mu. */
static int start_locked(char* err, size_t len) {
  if (listener >= 0) return 0;
  pthread_once(&atfork_once, install_atfork);
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) {
    int e = errno;
    snprintf(err, len, "socket: %s", strerror(e));
    return shunt_errno_status(e);
  }
  int e = EADDRINUSE;
  for (int tries = 0; tries < 4 && e == EADDRINUSE; tries++) {
    struct sockaddr_un a;
    snprintf(name, sizeof(name), "shunt-fd-%016llx", (unsigned long long)random64());
    socklen_t al = address(&a, name);
    e = bind(s, (struct sockaddr*)&a, al) == 0 && listen(s, 64) == 0 ? 0 : errno;
  }
  pthread_t th;
  pthread_attr_t at;
  if (e == 0 && pthread_attr_init(&at) == 0) {
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    e = pthread_create(&th, &at, serve, (void*)(intptr_t)s);
    pthread_attr_destroy(&at);
  }
  if (e != 0) {
    snprintf(err, len, "a socket to pass descriptors on: %s", strerror(e));
    close(s);
    name[0] = 0;
    return SHUNT_E_SYSTEM;
  }
  listener = s;
  return 0;
}

int shunt_fdpass_offer(int fd, struct shunt_fdpass_ticket* t, char* err, size_t len) {
  struct offer* o = malloc(sizeof(*o));
  if (!o) {
    snprintf(err, len, "out of memory");
    return SHUNT_E_NOMEM;
  }
  pthread_mutex_lock(&mu);
  int rc = start_locked(err, len);
  if (rc == 0) {
    *o = (struct offer){random64(), fd, offers};
    offers = o;
    memset(t, 0, sizeof(*t));
    t->key = o->key;
    memcpy(t->name, name, sizeof(t->name));
  } else {
    free(o);
  }
  pthread_mutex_unlock(&mu);
  return rc;
}

void shunt_fdpass_withdraw(const struct shunt_fdpass_ticket* t) {
  pthread_mutex_lock(&mu);
  for (struct offer** pp = &offers; *pp; pp = &(*pp)->next)
    if ((*pp)->key == t->key) {
      struct offer* o = *pp;
      *pp = o->next;
      free(o);
      break;
    }
  pthread_mutex_unlock(&mu);
}

int shunt_fdpass_take(const struct shunt_fdpass_ticket* t, char* err, size_t len) {
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) {
    int e = errno;
    snprintf(err, len, "socket: %s", strerror(e));
    return shunt_errno_status(e);
  }
  timeouts(s, TAKE_TIMEOUT_S);
  struct sockaddr_un a;
  socklen_t al = address(&a, t->name);
  int fd = SHUNT_E_PEER; /* until the owner hands a descriptor over */
  char got = 0;
  union {
    struct cmsghdr h;
    char buf[CMSG_SPACE(sizeof(int))];
  } ctl;
  memset(&ctl, 0, sizeof(ctl));
  struct iovec iov = {&got, 1};
  struct msghdr m = {
      .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf)};
  if (connect(s, (struct sockaddr*)&a, al) != 0) {
    snprintf(err, len, "connecting to @%.*s: %s", SHUNT_FDPASS_NAME, t->name, strerror(errno));
  } else if (send(s, &t->key, sizeof(t->key), MSG_NOSIGNAL) != (ssize_t)sizeof(t->key) ||
             recvmsg(s, &m, MSG_CMSG_CLOEXEC) != 1) {
    snprintf(err, len, "no answer from @%.*s: %s", SHUNT_FDPASS_NAME, t->name, strerror(errno));
  } else {
    struct cmsghdr* h = CMSG_FIRSTHDR(&m);
    if (got == 'y' && h && h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS &&
        h->cmsg_len == CMSG_LEN(sizeof(int)))
      memcpy(&fd, CMSG_DATA(h), sizeof(int));
    else
      snprintf(err, len, "@%.*s no longer offers that descriptor", SHUNT_FDPASS_NAME, t->name);
  }
  close(s);
  return fd;
}
