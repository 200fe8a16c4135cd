/* World setup: one shared region per rank, reached through the one peer set-up
 * (transport/peers.h) with the shared-memory row of the memory table. */
#include "transport/world.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/link.h"
#include "transport/mem.h"
#include "transport/net.h"
#include "transport/proxy.h"
#include "util/host.h"
#include "util/log.h"
#include "util/status.h"

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
  char* b = w->reach.base[r];
  w->peers[r].inbound = (_Atomic uint64_t*)b;
  w->peers[r].bell = (struct shunt_rank_bell*)(void*)(b + bell_offset(w->nranks));
  w->peers[r].scratch = b + shunt_world_buf_offset(w, 2);
  w->peers[r].input = b + shunt_world_buf_offset(w, 0);
  w->peers[r].output = b + shunt_world_buf_offset(w, 1);
}

static void release(struct shunt_world* w) {
  if (w->proxy) shunt_proxy_stop(w->proxy);
  shunt_peers_free(&w->reach, false);
  free(w->links);
  free(w->peers);
  free(w->expected);
  free(w);
}

static void world_fail_msg(void* world, int code, const char* msg) {
  shunt_world_fail(world, code, "%s", msg);
}

static bool world_gives_up(void* world) {
  const struct shunt_world* w = world;
  return atomic_load_explicit(&w->failed, memory_order_relaxed) ||
         atomic_load_explicit(&w->aborted, memory_order_relaxed) ||
         atomic_load_explicit(&w->broken, memory_order_relaxed);
}

static bool world_failed(void* world) {
  const struct shunt_world* w = world;
  return atomic_load_explicit(&w->failed, memory_order_relaxed);
}

/* A trigger to `peer` completed: the done count may end this rank's wait, what it wrote a
 * wait of a rank of this host. */
static void proxy_done(void* world, uint32_t peer) {
  struct shunt_world* w = world;
  shunt_world_ring(w, w->rank);
  if (!shunt_world_remote(w, peer)) shunt_world_ring(w, peer);
}

/* Once every peer is reached: the layout of each mapped region, the host's sleeper count, the
 * links and the proxy. */
static int world_ready(void* ctx, const struct shunt_peers* p, char* err, size_t len) {
  struct shunt_world* w = ctx;
  w->node_of = p->node_of;
  w->where = p->where;
  uint32_t first = w->nranks;
  for (uint32_t r = 0; r < w->nranks; r++) {
    w->links[r] = p->remote[r] ? &shunt_link_net : &shunt_link_shm;
    if (p->base[r]) layout(w, r);
    if (p->base[r] && first == w->nranks) first = r;
  }
  w->sleepers = (struct shunt_host_sleepers*)(void*)(p->base[first] + bell_offset(w->nranks) + 64);
  w->linkp = (struct shunt_link_peers){
      .rank = w->rank,
      .nranks = w->nranks,
      .base = p->base,
      .buf_off = {shunt_world_buf_offset(w, 0), shunt_world_buf_offset(w, 1), shunt_world_buf_offset(w, 2)},
      .port_off = shunt_world_sem(w, 2, 0, 0) * sizeof(uint64_t),
      .ordinals = SHUNT_WORLD_MAX_ORDINAL,
      .net = p->nets.ops,
      .ep = p->nets.chosen,
      .ctx = w,
      .failed = world_failed};
  struct shunt_proxy_config pc = {.links = w->links,
                                  .peers = &w->linkp,
                                  .scratch = w->peers[w->rank].scratch,
                                  .ctx = w,
                                  .done = proxy_done,
                                  .crowded = (long)w->nranks > shunt_online_cpus()};
  return shunt_proxy_start(&pc, &w->proxy, err, len);
}

static void world_unready(void* ctx) {
  struct shunt_world* w = ctx;
  shunt_proxy_stop(w->proxy);
  w->proxy = NULL;
}

/* A flag from a rank of another host: this rank's counter for it, then its bell. */
static void net_signal(void* ctx, uint32_t peer, uint16_t ordinal) {
  struct shunt_world* w = ctx;
  _Atomic uint64_t* sem = &w->peers[w->rank].inbound[shunt_world_sem(w, 2, peer, ordinal)];
  atomic_fetch_add_explicit(sem, 1, memory_order_release);
  shunt_world_ring(w, w->rank);
}

/* The shared-memory row for the ranks of this host, the network table for the others. */
static struct shunt_peers_config peers_config(struct shunt_world* w, uint64_t bytes) {
  return (struct shunt_peers_config){.rank = w->rank,
                                     .nranks = w->nranks,
                                     .bs = &w->bs,
                                     .what = "shared region",
                                     .sizes = &w->cfg,
                                     .sizes_bytes = sizeof(w->cfg),
                                     .mem = &shunt_mem_shm,
                                     .bytes = bytes,
                                     .net = {.dmabuf_fd = -1,
                                             .port_off = shunt_world_sem(w, 2, 0, 0) * sizeof(uint64_t),
                                             .ordinals = SHUNT_WORLD_MAX_ORDINAL,
                                             .ctx = w,
                                             .fail = world_fail_msg,
                                             .give_up = world_gives_up,
                                             .signal = net_signal},
                                     .ctx = w,
                                     .ready = world_ready,
                                     .unready = world_unready};
}

int shunt_world_create(uint32_t rank, uint32_t nranks, const struct shunt_world_config* cfg,
                       const struct shunt_world_exchange* bs, struct shunt_world** out, char* err,
                       size_t len) {
  *out = NULL;
  if (nranks == 0 || rank >= nranks || nranks > 65535) {
    snprintf(err, len, "rank %u of %u is not valid", rank, nranks);
    return SHUNT_E_INVALID;
  }
  struct shunt_world* w = calloc(1, sizeof(*w));
  if (!w) {
    snprintf(err, len, "out of memory");
    return SHUNT_E_NOMEM;
  }
  w->rank = rank;
  w->nranks = nranks;
  w->cfg = *cfg;
  w->bs = *bs;
  atomic_flag_clear(&w->fail_claimed);
  w->peers = calloc(nranks, sizeof(*w->peers));
  w->expected = calloc(sem_bytes(nranks) / sizeof(uint64_t), sizeof(*w->expected));
  w->links = calloc(nranks, sizeof(*w->links));
  uint64_t bytes = sem_bytes(nranks) + page_up(cfg->scratch_bytes) + page_up(cfg->input_bytes) +
                   page_up(cfg->output_bytes);
  struct shunt_peers_config pc = peers_config(w, bytes);
  bool ok = w->peers && w->expected && w->links;
  if (!ok) snprintf(err, len, "out of memory");
  int rc = shunt_peers_setup(&pc, ok, &w->reach, err, len);
  if (rc != SHUNT_OK) {
    release(w);
    return ok ? rc : SHUNT_E_NOMEM;
  }
  SHUNT_INFO(SHUNT_ALLOC, "world rank %u/%u: shared region %llu bytes (scratch %llu, staging %llu + %llu)",
             rank, nranks, (unsigned long long)bytes, (unsigned long long)cfg->scratch_bytes,
             (unsigned long long)cfg->input_bytes, (unsigned long long)cfg->output_bytes);
  *out = w;
  return 0;
}

void shunt_world_fail(struct shunt_world* w, int code, const char* fmt, ...) {
  if (atomic_flag_test_and_set(&w->fail_claimed)) return;
  w->fail_code = code;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(w->fail_msg, sizeof(w->fail_msg), fmt, ap);
  va_end(ap);
  atomic_store_explicit(&w->failed, true, memory_order_release);
  shunt_world_ring(w, w->rank); /* its waits give up (no sleeper count yet: nobody sleeps) */
  SHUNT_WARN("rank %u: %s", w->rank, w->fail_msg);
}

bool shunt_world_fits(const struct shunt_world* w, uint32_t rpn, uint32_t* a, uint32_t* b) {
  if (w->bs.at.nnodes <= 1) return true; /* every rank on this host */
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
  shunt_peers_leave(&w->reach);
  /* No peer may still touch our region when it goes away. */
  w->bs.oob.barrier(w->bs.oob.ctx);
  release(w);
}
