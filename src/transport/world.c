/* World setup: one shared region per rank, exchanged by name over the caller's bootstrap. */
#include "transport/world.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/link.h"
#include "transport/link_ib.h"
#include "transport/link_socket.h"
#include "transport/net_kind.h"
#include "transport/proxy.h"
#include "util/env.h"
#include "util/log.h"

struct announce {
  char name[SHUNT_SHM_NAME_MAX];
  uint64_t bytes;
  struct shunt_world_config cfg;
  uint32_t node, pad_;
  struct shunt_net_card card;
  struct shunt_ib_card ib;
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
  shunt_net_leave(w->net);
  shunt_net_close(w->net);
  shunt_ib_close(w->ib);
  if (w->backend && w->backend_free) w->backend_free(w->backend);
  if (w->regions)
    for (uint32_t r = 0; r < w->nranks; r++) shunt_shm_close(&w->regions[r]);
  free(w->regions);
  free(w->node_of);
  free(w->where);
  free(w->net_remote);
  free((void*)w->links);
  free(w->peers);
  free(w->expected);
  free(w);
}

/* The network transports for ranks of other hosts, as SHUNT_NET allows: verbs when it can (auto,
 * ib), TCP listening as well under auto, so that the ranks can still agree on sockets when one
 * of them has no usable NIC. */
static int open_net(struct shunt_world* w, const struct shunt_world_exchange* bs, enum shunt_net_kind kind,
                    struct announce* me, char* err, size_t len) {
  if (kind != SHUNT_NET_SOCKET) {
    char why[256];
    if (shunt_world_ib_open(w, &me->ib, why, sizeof(why)) != 0) {
      if (kind == SHUNT_NET_IB) {
        snprintf(err, len, "SHUNT_NET=ib: %s", why);
        return -1;
      }
      SHUNT_INFO(SHUNT_NET, "rank %u: no verbs transport (%s)", w->rank, why);
    }
  }
  if (kind == SHUNT_NET_IB) return 0;
  return shunt_world_net_open(w, bs->net_addr.ss_family ? &bs->net_addr : NULL, &me->card, err, len);
}

/* Collective among all ranks: every rank reaches its peers of other hosts the same way, verbs
 * when every rank has it. */
static int connect_net(struct shunt_world* w, enum shunt_net_kind kind, const struct announce* all, char* err,
                       size_t len) {
  uint32_t n = w->nranks;
  char why[64];
  bool ib = shunt_net_use_ib(kind, &all[0].ib, sizeof(*all), n, why, sizeof(why));
  const struct shunt_link_ops** links = (const struct shunt_link_ops**)w->links;
  for (uint32_t r = 0; r < n; r++) {
    if (!shunt_world_remote(w, r)) continue;
    links[r] = ib ? &shunt_link_ib : &shunt_link_socket;
    struct sockaddr_storage a;
    if (ib)
      shunt_ib_card_where(&all[r].ib, w->where[r], sizeof(w->where[r]));
    else if (shunt_wire_to_sockaddr(&all[r].card.addr, &a) == 0)
      shunt_sock_str(&a, w->where[r], sizeof(w->where[r]));
  }
  SHUNT_INFO(SHUNT_NET, "rank %u (host %u of %u): port channels to other hosts use %s (SHUNT_NET=%s%s)",
             w->rank, w->node_of[w->rank], w->bs.nnodes, ib ? "verbs" : "TCP sockets",
             shunt_net_kind_name(kind), why);
  void* cards = calloc(n, ib ? sizeof(struct shunt_ib_card) : sizeof(struct shunt_net_card));
  int rc = 0;
  if (ib) {
    shunt_net_close(w->net);
    w->net = NULL;
    struct shunt_ib_card* c = cards;
    for (uint32_t r = 0; c && r < n; r++) c[r] = all[r].ib;
    /* Collective: called even without memory for the cards, so that no peer waits. */
    rc = shunt_world_ib_connect(w, c, err, len);
  } else {
    shunt_ib_close(w->ib);
    w->ib = NULL;
    struct shunt_net_card* c = cards;
    for (uint32_t r = 0; c && r < n; r++) c[r] = all[r].card;
    rc = c ? shunt_world_net_connect(w, c, err, len) : -1;
  }
  if (!cards && rc == 0) rc = -1;
  if (!cards) snprintf(err, len, "out of memory");
  free(cards);
  return rc;
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
  enum shunt_net_kind kind = shunt_net_kind();
  if (rc == 0 && spans) rc = open_net(w, bs, kind, me, err, len);
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
    if (rc == 0) rc = connect_net(w, kind, all, err, len);
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
  shunt_net_leave(w->net);
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
