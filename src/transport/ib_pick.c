/* Choosing the NIC port among the devices libibverbs lists (ib_pick.h). */
#include "transport/ib_pick.h"

#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/ibv.h"
#include "util/env.h"
#include "util/log.h"
#include "util/status.h"

static int pick_gid(const struct shunt_ibv* ibv, struct shunt_ib_port* c, int tbl_len) {
  int forced = (int)shunt_env_int("SHUNT_IB_GID_INDEX", -1, -1, 255);
  union ibv_gid g;
  if (forced >= 0) {
    if (ibv->query_gid(c->ctx, c->port, forced, &g) != 0) return SHUNT_E_NET;
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
  return first < 0 && c->link_layer == IBV_LINK_LAYER_ETHERNET ? SHUNT_E_NET : SHUNT_OK;
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
  SHUNT_TRY(shunt_ib_hca_parse(hca, &spec, err, len));
  if (!gpu) gpu = "";
  int ndev = 0;
  struct ibv_device** list = ibv->get_device_list(&ndev);
  if (!list || ndev <= 0) {
    if (list) ibv->free_device_list(list);
    snprintf(err, len, "no verbs device (%s lists none)", ibv->path);
    return SHUNT_E_NET;
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
    return SHUNT_E_NET;
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
    return SHUNT_E_NET;
  }
  out->link_layer = pa.link_layer;
  out->mtu = (uint8_t)pa.active_mtu;
  out->lid = pa.lid;
  if (pick_gid(ibv, out, pa.gid_tbl_len) != 0) {
    ibv->close_device(out->ctx);
    out->ctx = NULL;
    snprintf(err, len, "verbs: %s:%u has no usable GID (SHUNT_IB_GID_INDEX picks one)", out->dev, out->port);
    return SHUNT_E_NET;
  }
  SHUNT_INFO(SHUNT_NET, "verbs: using %s:%u, GID index %d, MTU %d, %s%s", out->dev, out->port, out->gid_index,
             128 << out->mtu, gpu[0] ? "the closest to its GPU at " : "spread by rank", gpu);
  return 0;
}
