/* World setup: one shared region per rank, exchanged by name over the caller's bootstrap. */
#include "transport/world.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/link.h"
#include "transport/net.h"
#include "transport/proxy.h"
#include "util/env.h"
#include "util/log.h"

struct announce {
  char name[SHUNT_SHM_NAME_MAX];
  uint64_t bytes;
  struct shunt_world_config cfg;
  uint32_t node, pad_;
  struct shunt_net_cards net;
};

static size_t page_up(uint64_t x) {
  return (size_t)((x + 4095) & ~(uint64_t)4095);
}

/* The semaphores, then the rank's bell, then its host's sleeper count (used in the region of
 * a host's lowest rank only), each on a cache line of its own. */
static uint64_t bell_offset(uint32_t nranks) {
  return (uint64_t)2 * nranks * SHUNT_WORLD_MAX_ORDINAL * sizeof(uint64_t);
}

static size_t sem_bytes(uint32_t nranks) {
  return page_up(bell_offset(nranks) + 128);
}

uint64_t shunt_world_buf_offset(const struct shunt_world* w, unsigned type) {
  uint64_t scratch = sem_bytes(w->nranks), input = scratch + page_up(w->cfg.scratch_bytes);
  return type == 0 ? input : type == 1 ? input + page_up(w->cfg.input_bytes) : scratch;
}

static void layout(struct shunt_world* w, uint32_t r) {
  char* b = w->regions[r].base;
  w->peers[r].inbound = (_Atomic uint64_t*)b;
  w->peers[r].bell = (struct shunt_rank_bell*)(void*)(b + bell_offset(w->nranks));
  w->peers[r].scratch = b + shunt_world_buf_offset(w, 2);
  w->peers[r].input = b + shunt_world_buf_offset(w, 0);
  w->peers[r].output = b + shunt_world_buf_offset(w, 1);
}

static void release(struct shunt_world* w) {
  if (w->proxy) shunt_proxy_stop(w->proxy);
  shunt_nets_close(&w->nets);
  if (w->backend && w->backend_free) w->backend_free(w->backend);
  if (w->regions)
    for (uint32_t r = 0; r < w->nranks; r++) shunt_shm_close(&w->regions[r]);
  free(w->regions);
  free(w->node_of);
  free(w->where);
  free(w->remote);
  free((void*)w->links);
  free(w->peers);
  free(w->expected);
  free(w);
}

/* A flag from a rank of another host: this rank's counter for it, then its bell. */
static void net_signal(void* ctx, uint32_t peer, uint16_t ordinal) {
  struct shunt_world* w = ctx;
  _Atomic uint64_t* sem = &w->peers[w->rank].inbound[shunt_world_sem(w, 2, peer, ordinal)];
  atomic_fetch_add_explicit(sem, 1, memory_order_release);
  shunt_world_ring(w, w->rank);
}

static struct shunt_net_ep_config net_config(struct shunt_world* w) {
  return (struct shunt_net_ep_config){.rank = w->rank,
                                      .nranks = w->nranks,
                                      .region = w->regions[w->rank].base,
                                      .bytes = w->regions[w->rank].bytes,
                                      .dmabuf_fd = -1,
                                      .port_off = shunt_world_sem(w, 2, 0, 0) * sizeof(uint64_t),
                                      .ordinals = SHUNT_WORLD_MAX_ORDINAL,
                                      .bs = &w->bs,
                                      .ctx = w,
                                      .fail = shunt_world_fail_msg,
                                      .give_up = shunt_world_gives_up,
                                      .signal = net_signal};
}

/* Collective among all ranks: every rank reaches its peers of other hosts the same way. */
static int connect_net(struct shunt_world* w, const struct announce* all, char* err, size_t len) {
  const struct shunt_link_ops** links = (const struct shunt_link_ops**)w->links;
  w->remote = calloc(w->nranks, sizeof(*w->remote));
  if (!w->remote) {
    snprintf(err, len, "out of memory");
    return -1;
  }
  for (uint32_t r = 0; r < w->nranks; r++) {
    w->remote[r] = shunt_world_remote(w, r);
    if (w->remote[r]) links[r] = &shunt_link_net;
  }
  struct shunt_net_ep_config c = net_config(w);
  return shunt_nets_connect(&w->nets, &c, w->remote, &all[0].net, sizeof(*all), w->where, err, len);
}

int shunt_world_create(uint32_t rank, uint32_t nranks, const struct shunt_world_config* cfg,
                       const struct shunt_world_exchange* bs, struct shunt_world** out, char* err,
                       size_t len) {
  *out = NULL;
  if (nranks == 0 || rank >= nranks || nranks > 65535) {
    snprintf(err, len, "rank %u of %u is not valid", rank, nranks);
    return -1;
  }
  struct shunt_world* w = calloc(1, sizeof(*w));
  if (!w) {
    snprintf(err, len, "out of memory");
    return -1;
  }
  w->rank = rank;
  w->nranks = nranks;
  w->cfg = *cfg;
  w->bs = *bs;
  atomic_init(&w->epoch, 0);
  atomic_init(&w->broken, false);
  atomic_init(&w->failed, false);
  atomic_flag_clear(&w->fail_claimed);
  size_t nsem = sem_bytes(nranks) / sizeof(uint64_t);
  w->regions = calloc(nranks, sizeof(*w->regions));
  w->peers = calloc(nranks, sizeof(*w->peers));
  w->expected = calloc(nsem, sizeof(*w->expected));
  struct announce* all = calloc(nranks, sizeof(*all));
  w->node_of = calloc(nranks, sizeof(*w->node_of));
  w->where = calloc(nranks, sizeof(*w->where));
  const struct shunt_link_ops** links = calloc(nranks, sizeof(*links));
  w->links = links;
  uint8_t* votes = calloc(nranks, 1);
  if (!w->regions || !w->peers || !w->expected || !all || !w->node_of || !w->where || !links || !votes) {
    free(votes);
    snprintf(err, len, "out of memory");
    free(all);
    release(w);
    return -1;
  }
  uint64_t bytes = sem_bytes(nranks) + page_up(cfg->scratch_bytes) + page_up(cfg->input_bytes) +
                   page_up(cfg->output_bytes);
  int rc = shunt_shm_create(&w->regions[rank], bytes, err, len);
  struct announce* me = &all[rank];
  if (rc == 0) {
    snprintf(me->name, sizeof(me->name), "%s", w->regions[rank].name);
    me->bytes = bytes;
    me->cfg = *cfg;
    me->node = bs->node;
  }
  bool spans = bs->nnodes > 1;
  struct shunt_net_ep_config nc = net_config(w);
  if (rc == 0 && spans) rc = shunt_nets_open(&nc, &w->nets, &me->net, err, len);
  /* Everyone takes part in the exchange even after a local failure, so no peer hangs. */
  if (bs->allgather(bs->ctx, all, sizeof(*all)) != 0) {
    if (rc == 0) snprintf(err, len, "bootstrap allgather failed");
    rc = -1;
  }
  for (uint32_t r = 0; r < nranks && rc == 0; r++) {
    if (!all[r].name[0]) {
      snprintf(err, len, "rank %u could not create its shared region", r);
      rc = -1;
    } else if (memcmp(&all[r].cfg, cfg, sizeof(*cfg)) != 0) {
      snprintf(err, len, "rank %u asked for different world sizes than rank %u", r, rank);
      rc = -1;
    } else {
      bool here = all[r].node == bs->node;
      w->node_of[r] = all[r].node;
      links[r] = &shunt_link_shm; /* a rank of another host's: chosen when connecting */
      if (here && r != rank) rc = shunt_shm_open(&w->regions[r], all[r].name, all[r].bytes, err, len);
      if (here && rc == 0) layout(w, r);
    }
  }
  if (rc == 0) {
    uint32_t first = 0;
    while (w->node_of[first] != w->node_of[rank]) first++;
    w->sleepers =
        (struct shunt_host_sleepers*)(void*)((char*)w->regions[first].base + bell_offset(nranks) + 64);
  }
  /* Connecting waits on every peer of another host: agree first, so that a rank that failed
   * above does not leave the others waiting for its connections. */
  if (spans) {
    char why[256];
    if (shunt_world_agree(bs, rank, nranks, rc == 0, votes, why, sizeof(why)) != 0 && rc == 0) {
      snprintf(err, len, "%s", why);
      rc = -1;
    }
    if (rc == 0) rc = connect_net(w, all, err, len);
  }
  if (bs->barrier(bs->ctx) != 0 && rc == 0) {
    snprintf(err, len, "bootstrap barrier failed");
    rc = -1;
  }
  if (w->regions[rank].base) shunt_shm_unlink(w->regions[rank].name);
  free(all);
  free(votes);
  if (rc == 0 && shunt_proxy_start(w, &w->proxy, err, len) != 0) rc = -1;
  if (rc != 0) {
    release(w);
    return -1;
  }
  SHUNT_INFO(SHUNT_ALLOC, "world rank %u/%u: shared region %llu bytes (scratch %llu, staging %llu + %llu)",
             rank, nranks, (unsigned long long)bytes, (unsigned long long)cfg->scratch_bytes,
             (unsigned long long)cfg->input_bytes, (unsigned long long)cfg->output_bytes);
  *out = w;
  return 0;
}

void shunt_world_fail(struct shunt_world* w, const char* fmt, ...) {
  if (atomic_flag_test_and_set(&w->fail_claimed)) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(w->fail_msg, sizeof(w->fail_msg), fmt, ap);
  va_end(ap);
  atomic_store_explicit(&w->failed, true, memory_order_release);
  shunt_world_ring(w, w->rank); /* its waits give up (no sleeper count yet: nobody sleeps) */
  SHUNT_WARN("rank %u: %s", w->rank, w->fail_msg);
}

void shunt_world_fail_msg(void* world, const char* msg) {
  shunt_world_fail(world, "%s", msg);
}

bool shunt_world_gives_up(void* world) {
  const struct shunt_world* w = world;
  return atomic_load_explicit(&w->failed, memory_order_relaxed) ||
         atomic_load_explicit(&w->aborted, memory_order_relaxed) ||
         atomic_load_explicit(&w->broken, memory_order_relaxed);
}

bool shunt_world_fits(const struct shunt_world* w, uint32_t rpn, uint32_t* a, uint32_t* b) {
  if (w->bs.nnodes <= 1) return true; /* every rank on this host */
  return shunt_nodes_fit(w->node_of, w->nranks, rpn, a, b);
}

bool shunt_nodes_fit(const uint32_t* node_of, uint32_t nranks, uint32_t rpn, uint32_t* a, uint32_t* b) {
  if (!rpn) return true;
  for (uint32_t r = 0; r < nranks; r++)
    if (r % rpn && node_of[r] != node_of[r - r % rpn]) {
      *a = r - r % rpn;
      *b = r;
      return false;
    }
  return true;
}

void shunt_world_release(struct shunt_world* w) {
  if (w) release(w);
}

void shunt_world_destroy(struct shunt_world* w) {
  if (!w) return;
  if (w->proxy) shunt_proxy_stop(w->proxy);
  w->proxy = NULL;
  shunt_nets_leave(&w->nets);
  /* No peer may still touch our region when it goes away. */
  w->bs.barrier(w->bs.ctx);
  release(w);
}

int shunt_world_agree(const struct shunt_world_exchange* bs, uint32_t rank, uint32_t nranks, bool local_ok,
                      uint8_t* ok, char* err, size_t len) {
  memset(ok, 0, nranks);
  ok[rank] = local_ok ? 1 : 0;
  int rc = local_ok ? 0 : -1;
  if (bs->allgather(bs->ctx, ok, 1) != 0) {
    if (rc == 0 && err && len) snprintf(err, len, "bootstrap allgather failed");
    rc = -1;
  }
  for (uint32_t r = 0; r < nranks && rc == 0; r++)
    if (!ok[r]) {
      if (err && len) snprintf(err, len, "rank %u failed to set up its world", r);
      rc = -1;
    }
  return rc;
}
