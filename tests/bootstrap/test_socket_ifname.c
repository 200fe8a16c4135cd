/* SHUNT_SOCKET_IFNAME: the NCCL_SOCKET_IFNAME syntax, and which address the bootstrap picks. */
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <unistd.h>

#include "util/socket.h"
#include "common/check.h"

static int has_other_interface(void) {
  struct ifaddrs* ifs = NULL;
  int found = 0;
  if (getifaddrs(&ifs) != 0) return 0;
  for (struct ifaddrs* i = ifs; i; i = i->ifa_next)
    found |= i->ifa_addr && i->ifa_addr->sa_family == AF_INET && (i->ifa_flags & IFF_UP) &&
             !(i->ifa_flags & IFF_LOOPBACK) && strncmp(i->ifa_name, "docker", 6) != 0;
  freeifaddrs(ifs);
  return found;
}

static int is_loopback(const struct sockaddr_storage* a) {
  if (a->ss_family == AF_INET) return (ntohl(((const struct sockaddr_in*)a)->sin_addr.s_addr) >> 24) == 127;
  return a->ss_family == AF_INET6 && IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6*)a)->sin6_addr);
}

int main(void) {
  CHECK(shunt_sock_ifname_matches("eth0", "eth"));
  CHECK(shunt_sock_ifname_matches("ib0", "eth,ib"));
  CHECK(!shunt_sock_ifname_matches("eth0", "^eth"));
  CHECK(shunt_sock_ifname_matches("ib0", "^eth,docker"));
  CHECK(!shunt_sock_ifname_matches("eth0", "=eth"));
  CHECK(shunt_sock_ifname_matches("eth0", "=eth1,eth0"));
  CHECK(shunt_sock_ifname_matches("docker0", "^=docker"));
  CHECK(!shunt_sock_ifname_matches("docker", "^=docker"));
  CHECK(!shunt_sock_ifname_matches("lo", "^docker,lo"));
  CHECK(!shunt_sock_ifname_matches("eth0", ""));

  char err[256] = "";
  struct sockaddr_storage a;
  setenv("SHUNT_SOCKET_IFNAME", "lo", 1);
  CHECK_MSG(shunt_sock_pick_addr(&a, err, sizeof(err)) == 0, "%s", err);
  CHECK(is_loopback(&a));
  setenv("SHUNT_SOCKET_IFNAME", "=no_such_if0", 1);
  CHECK(shunt_sock_pick_addr(&a, err, sizeof(err)) != 0);
  CHECK_STR_CONTAINS(err, "SHUNT_SOCKET_IFNAME==no_such_if0");
  unsetenv("SHUNT_SOCKET_IFNAME");
  CHECK_MSG(shunt_sock_pick_addr(&a, err, sizeof(err)) == 0, "%s", err);
  CHECK_EQ_INT(is_loopback(&a), !has_other_interface());
  /* Excluding everything but loopback still leaves loopback as the last resort. */
  setenv("SHUNT_SOCKET_IFNAME", "^no_such_if", 1);
  CHECK_MSG(shunt_sock_pick_addr(&a, err, sizeof(err)) == 0, "%s", err);
  CHECK_EQ_INT(is_loopback(&a), !has_other_interface());

  /* The wire form round-trips. */
  int lfd = shunt_sock_listen(&a, err, sizeof(err));
  CHECK_MSG(lfd >= 0, "%s", err);
  struct shunt_wire_addr w;
  struct sockaddr_storage back;
  shunt_wire_from_sockaddr(&w, &a);
  CHECK(w.port != 0);
  CHECK(shunt_wire_to_sockaddr(&w, &back) == 0);
  char s1[80], s2[80];
  CHECK_EQ_INT(strcmp(shunt_sock_str(&a, s1, sizeof(s1)), shunt_sock_str(&back, s2, sizeof(s2))), 0);
  w.family = 0;
  CHECK(shunt_wire_to_sockaddr(&w, &back) != 0);
  if (lfd >= 0) close(lfd);
  CHECK_DONE();
}
