/* Choosing the interface the bootstrap listens on (SHUNT_SOCKET_IFNAME); see socket.h. */
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "util/socket.h"
#include "util/status.h"
#include "util/env.h"

int shunt_sock_ifname_matches(const char* name, const char* filter) {
  int exclude = 0, exact = 0;
  if (*filter == '^') exclude = 1, filter++;
  if (*filter == '=') exact = 1, filter++;
  int hit = 0;
  for (const char* t = filter; *t && !hit;) {
    size_t n = strcspn(t, ",");
    if (n > 0) hit = exact ? strlen(name) == n && strncmp(name, t, n) == 0 : strncmp(name, t, n) == 0;
    t += n + (t[n] == ',');
  }
  return exclude ? !hit : hit;
}

/* Whether filter lists interfaces to use (so that a loopback it matches counts as named). */
static int names_interfaces(const char* filter) {
  return filter && filter[0] != '^';
}

/* Pass 0 takes interfaces chosen on their own merit, pass 1 the loopback fallback. */
static int eligible(const struct ifaddrs* i, int family, const char* filter, int pass) {
  if (!i->ifa_addr || !(i->ifa_flags & IFF_UP) || i->ifa_addr->sa_family != family) return 0;
  if (family == AF_INET6 && IN6_IS_ADDR_LINKLOCAL(&((const struct sockaddr_in6*)i->ifa_addr)->sin6_addr))
    return 0;
  int lo = (i->ifa_flags & IFF_LOOPBACK) != 0;
  if (!filter) return pass == 0 ? !lo && strncmp(i->ifa_name, "docker", 6) != 0 : lo;
  if (!shunt_sock_ifname_matches(i->ifa_name, filter)) return 0;
  if (pass == 0) return !lo || names_interfaces(filter);
  return lo;
}

int shunt_sock_pick_addr(struct sockaddr_storage* addr, char* err, size_t errlen) {
  const char* filter = shunt_env_str("SHUNT_SOCKET_IFNAME", NULL);
  struct ifaddrs* ifs = NULL;
  if (getifaddrs(&ifs) != 0) {
    int e = errno;
    snprintf(err, errlen, "getifaddrs: %s", strerror(e));
    return shunt_errno_status(e);
  }
  int found = 0;
  for (int pass = 0; pass < 2 && !found; pass++)
    for (int fam = 0; fam < 2 && !found; fam++)
      for (struct ifaddrs* i = ifs; i && !found; i = i->ifa_next) {
        int family = fam == 0 ? AF_INET : AF_INET6;
        if (!eligible(i, family, filter, pass)) continue;
        memset(addr, 0, sizeof(*addr));
        memcpy(addr, i->ifa_addr,
               family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6));
        found = 1;
      }
  freeifaddrs(ifs);
  if (!found) {
    snprintf(err, errlen, "no usable network interface%s%s", filter ? " matches SHUNT_SOCKET_IFNAME=" : "",
             filter ? filter : "");
    return SHUNT_E_NET;
  }
  return 0;
}
