/* Connections that are not ranks, during a rendezvous and while the ranks talk: garbage, a
 * well-formed greeting or message with a wrong key, an oversized message, silence. Each is
 * dropped with a WARN; the rendezvous and every exchange still succeed. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/socket.h>

#include "bootstrap/ranks.h"
#include "comm/bootstrap_wire.h"

#define NRANKS 4
#define MAX_STRAYS 256

static int strays[MAX_STRAYS];
static int nstrays; /* used by one thread at a time: main, then the stray thread, then main */

static void stray(const struct shunt_wire_addr* to, const void* bytes, size_t n) {
  struct sockaddr_storage a;
  if (nstrays >= MAX_STRAYS || shunt_wire_to_sockaddr(to, &a) != 0) return;
  int fd = socket(a.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  socklen_t len = a.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
  if (fd < 0) return;
  if (connect(fd, (struct sockaddr*)&a, len) != 0) {
    close(fd);
    return;
  }
  if (n) (void)!send(fd, bytes, n, MSG_NOSIGNAL);
  strays[nstrays++] = fd; /* kept open: a silent or half-sent connection must not stall anyone */
}

/* Every kind of stray at one address. key: the right key of whoever listens there. */
static void strays_at(const struct shunt_wire_addr* to, uint64_t key, int root) {
  static const char http[] = "GET / HTTP/1.0\r\n\r\n";
  stray(to, http, sizeof(http) - 1);
  stray(to, NULL, 0);
  struct {
    struct shunt_boot_hdr h;
    struct shunt_wire_addr addr;
  } g = {{SHUNT_BOOT_WIRE_MAGIC, root ? SHUNT_BOOT_ROOT_HELLO : SHUNT_BOOT_HELLO, key ^ 1, 0, NRANKS,
          root ? sizeof(g.addr) : 0},
         *to};
  stray(to, &g, root ? sizeof(g) : sizeof(g.h)); /* wrong key */
  g.h.key = key;
  g.h.type = SHUNT_BOOT_USER;
  g.h.len = 4;
  stray(to, &g, sizeof(g.h)); /* right key, but not a greeting */
  g.h.type = root ? SHUNT_BOOT_ROOT_HELLO : SHUNT_BOOT_HELLO;
  g.h.len = (uint64_t)1 << 40;
  stray(to, &g, sizeof(g.h)); /* oversized */
  g.h.len = root ? sizeof(g.addr) : 0;
  stray(to, &g, 7); /* half a header, then silence */
}

static int use_started(void* ctx, int rank, int n) {
  struct shunt_bootstrap** bs = ctx;
  (void)n;
  return exercise_comm(bs[rank]);
}

struct stray_thread {
  struct shunt_wire_addr addrs[NRANKS];
  uint64_t key;
  atomic_int stop;
};

static void* keep_straying(void* p) {
  struct stray_thread* s = p;
  while (!atomic_load(&s->stop) && nstrays + 6 <= MAX_STRAYS)
    for (int r = 0; r < NRANKS; r++) {
      strays_at(&s->addrs[r], s->key, 0);
      usleep(10000);
    }
  return NULL;
}

int main(void) {
  struct shunt_bootstrap_id id;
  char err[512] = "";
  CHECK_MSG(shunt_bootstrap_root_create_timeout(&id, 30, err, sizeof(err)) == 0, "%s", err);
  if (check_failures) CHECK_DONE();
  /* At the root before anyone arrives. */
  strays_at(&id.root, id.key, 1);
  struct shunt_bootstrap* bs[NRANKS] = {0};
  for (int r = 0; r < NRANKS; r++) {
    CHECK_MSG(shunt_bootstrap_init_start(&id, r, NRANKS, &bs[r], err, sizeof(err)) == 0, "%s", err);
    if (r == 1) strays_at(&id.root, id.key, 1); /* at the root while ranks arrive */
  }
  if (check_failures) CHECK_DONE();
  /* At the ranks' own ports before they know each other. */
  struct stray_thread st = {.key = id.key};
  for (int r = 0; r < NRANKS; r++) {
    shunt_bootstrap_listen_addr(bs[r], &st.addrs[r]);
    strays_at(&st.addrs[r], id.key, 0);
  }
  for (int r = 0; r < NRANKS; r++)
    CHECK_MSG(shunt_bootstrap_init_finish(bs[r], err, sizeof(err)) == 0, "rank %d: %s", r, err);
  if (check_failures) CHECK_DONE();
  /* And at the ranks while they talk. */
  atomic_init(&st.stop, 0);
  pthread_t t;
  CHECK(pthread_create(&t, NULL, keep_straying, &st) == 0);
  CHECK_EQ_INT(run_threads(use_started, bs, NRANKS), 0);
  atomic_store(&st.stop, 1);
  pthread_join(t, NULL);
  CHECK(nstrays > 6 * (2 + NRANKS));
  for (int r = 0; r < NRANKS; r++) shunt_bootstrap_destroy(bs[r]);
  for (int i = 0; i < nstrays; i++) close(strays[i]);
  CHECK_DONE();
}
