/* Choosing the NIC port (ib_pick.h). */
#include "transport/ib_pick.h"

#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/ibv.h"
#include "util/env.h"
#include "util/log.h"

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
      return -1;
    }
    if (out->n == SHUNT_IB_HCA_MAX) {
      snprintf(err, len, "SHUNT_IB_HCA: more than %d entries", SHUNT_IB_HCA_MAX);
      return -1;
    }
    int port = -1;
    if (colon) {
      char* stop = NULL;
      long v = strtol(colon + 1, &stop, 10);
      if (stop == colon + 1 || stop != s + n || v < 1 || v > 255) {
        snprintf(err, len, "SHUNT_IB_HCA: entry %u: port after ':' must be 1-255", out->n + 1);
        return -1;
      }
      port = (int)v;
    }
    for (size_t i = 0; i < nl; i++)
      if (isspace((unsigned char)s[i])) {
        snprintf(err, len, "SHUNT_IB_HCA: entry %u: spaces in a device name", out->n + 1);
        return -1;
      }
    memcpy(out->e[out->n].name, s, nl);
    out->e[out->n].port = port;
    out->n++;
    s += n;
    if (*s == ',') {
      s++;
      if (!*s) {
        snprintf(err, len, "SHUNT_IB_HCA: trailing ','");
        return -1;
      }
    }
  }
  if ((out->exclude || out->exact) && out->n == 0) {
    snprintf(err, len, "SHUNT_IB_HCA: no device after '%s'", out->exclude ? "^" : "=");
    return -1;
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

static int pick_gid(const struct shunt_ibv* ibv, struct shunt_ib_port* c, int tbl_len) {
  int forced = (int)shunt_env_int("SHUNT_IB_GID_INDEX", -1, -1, 255);
  union ibv_gid g;
  if (forced >= 0) {
    if (ibv->query_gid(c->ctx, c->port, forced, &g) != 0) return -1;
    c->gid_index = forced;
    memcpy(c->gid, g.raw, 16);
    return 0;
  }
  int first = -1;
  for (int i = 0; i < tbl_len && i < 256; i++) {
    if (ibv->query_gid(c->ctx, c->port, i, &g) != 0) continue;
    static const uint8_t zero[16], v4[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (!memcmp(g.raw, zero, 16)) continue;
    if (first < 0 || c->link_layer != IBV_LINK_LAYER_ETHERNET) {
      first = i;
      memcpy(c->gid, g.raw, 16);
      if (c->link_layer != IBV_LINK_LAYER_ETHERNET) break;
    }
    if (!memcmp(g.raw, v4, 12)) {
      first = i;
      memcpy(c->gid, g.raw, 16);
      break;
    }
  }
  c->gid_index = first < 0 ? 0 : first;
  return first < 0 && c->link_layer == IBV_LINK_LAYER_ETHERNET ? -1 : 0;
}

struct cand {
  int dev;
  uint8_t port;
  int hops;
};

int shunt_ib_pick(const struct shunt_ibv* ibv, const char* gpu, uint32_t spread, struct shunt_ib_port* out,
                  char* err, size_t len) {
  memset(out, 0, sizeof(*out));
  struct shunt_ib_hca_spec spec;
  const char* hca = shunt_env_str("SHUNT_IB_HCA", NULL);
  if (shunt_ib_hca_parse(hca, &spec, err, len) != 0) return -1;
  if (!gpu) gpu = "";
  int ndev = 0;
  struct ibv_device** list = ibv->get_device_list(&ndev);
  if (!list || ndev <= 0) {
    if (list) ibv->free_device_list(list);
    snprintf(err, len, "no verbs device (%s lists none)", ibv->path);
    return -1;
  }
  struct cand cands[64];
  int nc = 0, best = SHUNT_IB_FAR + 1;
  for (int d = 0; d < ndev && nc < 64; d++) {
    const char* name = ibv->get_device_name(list[d]);
    struct ibv_context* ctx = ibv->open_device(list[d]);
    struct ibv_device_attr da;
    if (!ctx || ibv->query_device(ctx, &da) != 0) {
      SHUNT_INFO(SHUNT_NET, "verbs: %s: cannot open or query it, skipped", name);
      if (ctx) ibv->close_device(ctx);
      continue;
    }
    char nic[PATH_MAX] = "";
    int hops = SHUNT_IB_FAR;
    if (gpu[0] && shunt_ib_nic_path(list[d]->ibdev_path, nic, sizeof(nic)) == 0)
      hops = shunt_ib_pci_hops(gpu, nic);
    for (uint8_t p = 1; p <= da.phys_port_cnt && nc < 64; p++) {
      struct ibv_port_attr pa;
      if (!shunt_ib_hca_match(&spec, name, p)) {
        SHUNT_INFO(SHUNT_NET, "verbs: %s:%u excluded by SHUNT_IB_HCA=%s", name, p, hca);
        continue;
      }
      if (ibv->query_port(ctx, p, &pa) != 0 || pa.state != IBV_PORT_ACTIVE) {
        SHUNT_INFO(SHUNT_NET, "verbs: %s:%u is not active, skipped", name, p);
        continue;
      }
      char dist[48] = "";
      if (gpu[0] && hops < SHUNT_IB_FAR) snprintf(dist, sizeof(dist), ", %d PCI hops from its GPU", hops);
      if (gpu[0] && hops >= SHUNT_IB_FAR) snprintf(dist, sizeof(dist), ", under another root complex");
      SHUNT_INFO(SHUNT_NET, "verbs: candidate %s:%u (%s%s)", name, p,
                 pa.link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand", dist);
      cands[nc++] = (struct cand){d, p, hops};
      if (hops < best) best = hops;
    }
    ibv->close_device(ctx);
  }
  int ties = 0;
  for (int i = 0; i < nc; i++) ties += cands[i].hops == best;
  if (ties == 0) {
    ibv->free_device_list(list);
    snprintf(err, len, "no active verbs port%s%s", hca ? " allowed by SHUNT_IB_HCA=" : "", hca ? hca : "");
    return -1;
  }
  int want = (int)(spread % (uint32_t)ties), chosen = -1;
  for (int i = 0; i < nc && chosen < 0; i++)
    if (cands[i].hops == best && want-- == 0) chosen = i;
  const struct cand* c = &cands[chosen];
  snprintf(out->dev, sizeof(out->dev), "%s", ibv->get_device_name(list[c->dev]));
  out->port = c->port;
  out->ctx = ibv->open_device(list[c->dev]);
  ibv->free_device_list(list);
  struct ibv_port_attr pa;
  if (!out->ctx || ibv->query_port(out->ctx, out->port, &pa) != 0) {
    if (out->ctx) ibv->close_device(out->ctx);
    out->ctx = NULL;
    snprintf(err, len, "verbs: cannot reopen %s:%u", out->dev, out->port);
    return -1;
  }
  out->link_layer = pa.link_layer;
  out->mtu = (uint8_t)pa.active_mtu;
  out->lid = pa.lid;
  if (pick_gid(ibv, out, pa.gid_tbl_len) != 0) {
    ibv->close_device(out->ctx);
    out->ctx = NULL;
    snprintf(err, len, "verbs: %s:%u has no usable GID (SHUNT_IB_GID_INDEX picks one)", out->dev, out->port);
    return -1;
  }
  SHUNT_INFO(SHUNT_NET, "verbs: using %s:%u, GID index %d, MTU %d, %s%s", out->dev, out->port, out->gid_index,
             128 << out->mtu, gpu[0] ? "the closest to its GPU at " : "spread by rank", gpu);
  return 0;
}
