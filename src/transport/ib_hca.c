/* NIC choice, the parts that need no verbs: SHUNT_IB_HCA's syntax and PCI distance read from
 * sysfs (ib_pick.h). */
#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/ib_pick.h"
#include "util/status.h"

int shunt_ib_hca_parse(const char* s, struct shunt_ib_hca_spec* out, char* err, size_t len) {
  memset(out, 0, sizeof(*out));
  if (!s) return 0;
  if (*s == '^') {
    out->exclude = true;
    s++;
  }
  if (*s == '=') {
    out->exact = true;
    s++;
  }
  while (*s) {
    const char* end = strchr(s, ',');
    size_t n = end ? (size_t)(end - s) : strlen(s);
    const char* colon = memchr(s, ':', n);
    size_t nl = colon ? (size_t)(colon - s) : n;
    if (nl == 0 || nl >= sizeof(out->e[0].name)) {
      snprintf(err, len, "SHUNT_IB_HCA: entry %u: a device name of 1 to %zu characters expected", out->n + 1,
               sizeof(out->e[0].name) - 1);
      return SHUNT_E_INVALID;
    }
    if (out->n == SHUNT_IB_HCA_MAX) {
      snprintf(err, len, "SHUNT_IB_HCA: more than %d entries", SHUNT_IB_HCA_MAX);
      return SHUNT_E_INVALID;
    }
    int port = -1;
    if (colon) {
      char* stop = NULL;
      long v = strtol(colon + 1, &stop, 10);
      if (stop == colon + 1 || stop != s + n || v < 1 || v > 255) {
        snprintf(err, len, "SHUNT_IB_HCA: entry %u: port after ':' must be 1-255", out->n + 1);
        return SHUNT_E_INVALID;
      }
      port = (int)v;
    }
    for (size_t i = 0; i < nl; i++)
      if (isspace((unsigned char)s[i])) {
        snprintf(err, len, "SHUNT_IB_HCA: entry %u: spaces in a device name", out->n + 1);
        return SHUNT_E_INVALID;
      }
    memcpy(out->e[out->n].name, s, nl);
    out->e[out->n].port = port;
    out->n++;
    s += n;
    if (*s == ',') {
      s++;
      if (!*s) {
        snprintf(err, len, "SHUNT_IB_HCA: trailing ','");
        return SHUNT_E_INVALID;
      }
    }
  }
  if ((out->exclude || out->exact) && out->n == 0) {
    snprintf(err, len, "SHUNT_IB_HCA: no device after '%s'", out->exclude ? "^" : "=");
    return SHUNT_E_INVALID;
  }
  return 0;
}

bool shunt_ib_hca_match(const struct shunt_ib_hca_spec* s, const char* dev, int port) {
  if (s->n == 0) return true;
  bool found = false;
  for (uint32_t i = 0; i < s->n && !found; i++) {
    const char* name = s->e[i].name;
    bool named = s->exact ? strcmp(dev, name) == 0 : strncmp(dev, name, strlen(name)) == 0;
    found = named && (s->e[i].port < 0 || s->e[i].port == port);
  }
  return s->exclude ? !found : found;
}

/* Components of a sysfs path below ".../devices/": the root complex, then one per bridge. */
static int split(const char* p, const char* parts[], size_t lens[], int max) {
  const char* prefix = "/devices/";
  const char* at = strstr(p, prefix);
  p = at ? at + strlen(prefix) : p;
  int n = 0;
  while (*p && n < max) {
    while (*p == '/') p++;
    if (!*p) break;
    const char* e = strchr(p, '/');
    size_t l = e ? (size_t)(e - p) : strlen(p);
    parts[n] = p;
    lens[n++] = l;
    p += l;
  }
  return n;
}

int shunt_ib_pci_hops(const char* a, const char* b) {
  const char* pa[64];
  const char* pb[64];
  size_t la[64], lb[64];
  int na = split(a, pa, la, 64), nb = split(b, pb, lb, 64);
  int common = 0;
  while (common < na && common < nb && la[common] == lb[common] &&
         memcmp(pa[common], pb[common], la[common]) == 0)
    common++;
  if (common == 0) return SHUNT_IB_FAR;
  return (na - common) + (nb - common);
}

int shunt_ib_nic_path(const char* ibdev_path, char* out, size_t len) {
  char p[PATH_MAX], r[PATH_MAX];
  snprintf(p, sizeof(p), "%s/device", ibdev_path);
  if (!realpath(p, r)) return -1;
  snprintf(out, len, "%s", r);
  return 0;
}

int shunt_ib_bus_path(const char* sysfs_root, const char* busid, char* out, size_t len) {
  char p[PATH_MAX], r[PATH_MAX], id[32];
  size_t i = 0;
  for (; busid[i] && i + 1 < sizeof(id); i++) id[i] = (char)tolower((unsigned char)busid[i]);
  id[i] = 0;
  snprintf(p, sizeof(p), "%s/bus/pci/devices/%s", sysfs_root, id);
  if (!realpath(p, r)) return -1;
  snprintf(out, len, "%s", r);
  return 0;
}
