// The environment that configures the stand-in: devices, their address, port state, faults.
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fakeibv_internal.h"

void fib_log(const char* fmt, ...) {
  // One write per line keeps lines whole when several threads and processes share stderr.
  char line[512];
  int n = snprintf(line, sizeof(line), "fakeibv: ");
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
  va_end(ap);
  size_t len = strlen(line);
  line[len] = '\n';
  fwrite(line, 1, len + 1, stderr);
}

uint64_t fib_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static struct in_addr default_addr(void) {
  struct in_addr a = {htonl(INADDR_LOOPBACK)};
  struct ifaddrs* ifs = NULL;
  if (getifaddrs(&ifs) != 0) return a;
  for (struct ifaddrs* i = ifs; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
    if (!(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK)) continue;
    a = ((struct sockaddr_in*)i->ifa_addr)->sin_addr;
    break;
  }
  freeifaddrs(ifs);
  return a;
}

// Takes the next comma-separated item of *s into buf; returns 0 when none is left.
static int next_item(const char** s, char* buf, size_t cap) {
  while (**s == ',' || **s == ' ') (*s)++;
  if (!**s) return 0;
  size_t n = strcspn(*s, ", ");
  size_t k = n < cap - 1 ? n : cap - 1;
  memcpy(buf, *s, k);
  buf[k] = 0;
  *s += n;
  return 1;
}

// Every device record ever listed, never freed: an ibv_device pointer stays valid for the process
// even when the environment changes and a later list no longer names it.
#define FIB_MAX_RECORDS 64
static struct fib_device g_devs[FIB_MAX_RECORDS];
static int g_ndevs;
static pthread_mutex_t g_devs_lock = PTHREAD_MUTEX_INITIALIZER;

static struct fib_device* record(const struct fib_device* want) {
  for (int i = 0; i < g_ndevs; i++) {
    struct fib_device* d = &g_devs[i];
    if (d->addr.s_addr == want->addr.s_addr && strcmp(d->dev.name, want->dev.name) == 0 &&
        strcmp(d->dev.ibdev_path, want->dev.ibdev_path) == 0 &&
        strcmp(d->dev.dev_name, want->dev.dev_name) == 0)
      return d;
  }
  if (g_ndevs == FIB_MAX_RECORDS) {
    fib_log("too many distinct device settings in one process; %s is left out", want->dev.name);
    return NULL;
  }
  g_devs[g_ndevs] = *want;
  return &g_devs[g_ndevs++];
}

// The environment is read at every listing, so a test may change it between listings.
int fib_devices(struct fib_device** out, int cap) {
  const char* names = getenv("FAKEIBV_DEVICES");
  if (!names || !*names) names = "fakeibv0";
  const char* addrs = getenv("FAKEIBV_ADDR");
  const char* sysfs = getenv("FAKEIBV_SYSFS");
  const char* root = sysfs && *sysfs ? sysfs : "/sys";
  struct in_addr fallback = default_addr();
  struct in_addr last = fallback;
  char name[IBV_SYSFS_NAME_MAX];
  char abuf[64];
  int n = 0;
  pthread_mutex_lock(&g_devs_lock);
  for (const char* s = names; n < cap && next_item(&s, name, sizeof(name));) {
    struct fib_device d;
    memset(&d, 0, sizeof(d));
    d.dev.node_type = IBV_NODE_CA;
    d.dev.transport_type = IBV_TRANSPORT_IB;
    snprintf(d.dev.name, sizeof(d.dev.name), "%s", name);
    snprintf(d.dev.dev_name, sizeof(d.dev.dev_name), "uverbs%d", n);
    snprintf(d.dev.dev_path, sizeof(d.dev.dev_path), "%s/class/infiniband_verbs/uverbs%d", root, n);
    snprintf(d.dev.ibdev_path, sizeof(d.dev.ibdev_path), "%s/class/infiniband/%s", root, name);
    // FAKEIBV_ADDR may list one address per device; a shorter list repeats its last entry.
    if (addrs && next_item(&addrs, abuf, sizeof(abuf)) && inet_pton(AF_INET, abuf, &last) != 1) {
      fib_log("FAKEIBV_ADDR entry '%s' is not an IPv4 address; using the default", abuf);
      last = fallback;
    }
    d.addr = last;
    d.guid = 0x0200000000000000ull | ((uint64_t)ntohl(d.addr.s_addr) << 16) | (uint64_t)n;
    struct fib_device* r = record(&d);
    if (r) out[n++] = r;
  }
  pthread_mutex_unlock(&g_devs_lock);
  return n;
}

int fib_device_known(const struct ibv_device* dev) {
  pthread_mutex_lock(&g_devs_lock);
  int known = 0;
  for (int i = 0; i < g_ndevs && !known; i++) known = &g_devs[i].dev == dev;
  pthread_mutex_unlock(&g_devs_lock);
  return known;
}

int fib_device_down(const struct fib_device* d) {
  // Read at every query so a test can take a port down while the process runs.
  const char* s = getenv("FAKEIBV_DOWN");
  char name[IBV_SYSFS_NAME_MAX];
  while (s && next_item(&s, name, sizeof(name))) {
    if (strcmp(name, d->dev.name) == 0) return 1;
  }
  return 0;
}

void fib_fault_parse(const char* spec, struct fib_fault* out) {
  out->kind = FIB_FAULT_NONE;
  out->n = 0;
  if (!spec || !*spec) return;
  static const struct {
    const char* name;
    enum fib_fault_kind kind;
  } forms[] = {
      {"wc_error", FIB_FAULT_WC_ERROR}, {"qp_error", FIB_FAULT_QP_ERROR}, {"stall", FIB_FAULT_STALL}};
  const char* colon = strchr(spec, ':');
  for (size_t i = 0; colon && i < sizeof(forms) / sizeof(forms[0]); i++) {
    size_t len = strlen(forms[i].name);
    if ((size_t)(colon - spec) != len || strncmp(spec, forms[i].name, len) != 0) continue;
    char* end = NULL;
    errno = 0;
    unsigned long long n = strtoull(colon + 1, &end, 10);
    if (errno || end == colon + 1 || *end || n == 0) break;
    out->kind = forms[i].kind;
    out->n = n;
    return;
  }
  fib_log("ignoring FAKEIBV_FAULT='%s' (expected wc_error:N, qp_error:N or stall:N, N >= 1)", spec);
}
