/* The one peer set-up (peers.h). */
#include "transport/peers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"
#include "util/status.h"

#define CARD_MAGIC 0x7372656570746e73ull /* "sntpeers" */

/* What each rank tells the others: this head, then the sizes, the memory row's card and, when
 * the ranks span hosts, the network rows' cards; only what this world uses, since an exchange
 * may carry little (a few hundred bytes per rank). */
struct card {
  uint64_t magic;
  uint32_t ok; /* its region exists (and its endpoints opened, when the ranks span hosts) */
  uint32_t nranks;
  uint32_t node, pad_;
};

static size_t up8(size_t x) {
  return (x + 7) & ~(size_t)7;
}

static struct card* card_of(const struct shunt_peers* p, uint32_t r) {
  return (struct card*)(void*)((char*)p->cards + (size_t)r * p->card_bytes);
}

static uint8_t* sizes_of(const struct shunt_peers* p, uint32_t r) {
  return (uint8_t*)card_of(p, r) + sizeof(struct card);
}

const void* shunt_peers_mem_card(const struct shunt_peers* p, uint32_t r) {
  return (char*)card_of(p, r) + p->mem_at;
}

static void* net_of(const struct shunt_peers* p, uint32_t r) {
  return (char*)card_of(p, r) + p->net_at;
}

static struct shunt_net_ep_config net_config(const struct shunt_peers_config* c,
                                             const struct shunt_peers* p) {
  struct shunt_net_ep_config n = c->net;
  n.rank = c->rank;
  n.nranks = c->nranks;
  n.region = p->region;
  n.bytes = p->bytes;
  n.oob = &c->bs->oob;
  n.at = c->bs->at;
  return n;
}

/* This rank's card: its region made or described, its endpoints opened. */
static int open_local(const struct shunt_peers_config* c, struct shunt_peers* p, struct card* me, char* err,
                      size_t len) {
  SHUNT_TRY(c->mem->open(&p->env, &p->region, p->bytes, (char*)me + p->mem_at, err, len));
  p->opened = true;
  if (p->spans) {
    struct shunt_net_ep_config n = net_config(c, p);
    SHUNT_TRY(shunt_nets_open(&n, &p->nets, net_of(p, c->rank), err, len));
  }
  me->magic = CARD_MAGIC;
  me->ok = 1;
  me->nranks = c->nranks;
  me->node = c->bs->at.node;
  memcpy(sizes_of(p, c->rank), c->sizes, c->sizes_bytes);
  return 0;
}

/* Every rank's card checked; the regions of ranks of this host mapped. */
static int map_peers(const struct shunt_peers_config* c, struct shunt_peers* p, char* err, size_t len) {
  const struct card* me = card_of(p, c->rank);

  for (uint32_t r = 0; r < c->nranks; r++) {
    const struct card* k = card_of(p, r);
    if (!k->ok || k->magic != CARD_MAGIC) {
      snprintf(err, len, "rank %u could not create its %s", r, c->what);
      return SHUNT_E_PEER;
    }
    if (k->nranks != c->nranks || memcmp(sizes_of(p, r), sizes_of(p, c->rank), c->sizes_bytes) != 0) {
      snprintf(err, len, "rank %u asked for different world sizes than rank %u", r, c->rank);
      return SHUNT_E_INVALID;
    }
    p->node_of[r] = k->node;
    p->remote[r] = k->node != me->node;
  }
  for (uint32_t r = 0; r < c->nranks; r++) {
    if (r == c->rank) {
      p->base[r] = p->region;
    } else if (!p->remote[r]) {
      int rc = c->mem->map(&p->env, c->rank, shunt_peers_mem_card(p, c->rank), r, shunt_peers_mem_card(p, r),
                           &p->base[r], &p->how[r], err, len);
      if (rc != SHUNT_OK) {
        p->base[r] = NULL;
        return rc;
      }
    }
  }
  return 0;
}

int shunt_peers_setup(const struct shunt_peers_config* c, bool local_ok, struct shunt_peers* p, char* err,
                      size_t len) {
  uint32_t n = c->nranks;
  memset(p, 0, sizeof(*p));
  p->rank = c->rank;
  p->nranks = n;
  p->region = c->region;
  p->bytes = c->bytes;
  p->spans = c->bs->at.nnodes > 1;
  p->mem = c->mem;
  p->env = c->env;
  p->mem_at = sizeof(struct card) + up8(c->sizes_bytes);
  p->net_at = p->mem_at + up8(c->mem->card_bytes);
  p->card_bytes = p->net_at + (p->spans ? shunt_nets_card_bytes() : 0);
  p->cards = calloc(n, p->card_bytes);
  p->base = calloc(n, sizeof(*p->base));
  p->how = calloc(n, sizeof(*p->how));
  p->remote = calloc(n, sizeof(*p->remote));
  p->node_of = calloc(n, sizeof(*p->node_of));
  p->where = calloc(n, sizeof(*p->where));
  uint8_t* votes = calloc(n, 1);
  if (!p->cards || !votes) {
    /* No memory to take part in the exchange with: the peers' waits end in their timeouts. */
    if (local_ok) snprintf(err, len, "out of memory");
    free(votes);
    shunt_peers_free(p, false);
    return local_ok ? SHUNT_E_NOMEM : SHUNT_E_INVALID;
  }
  /* The first failure's code is kept; what follows only votes. */
  int rc = local_ok ? SHUNT_OK : SHUNT_E_INVALID;
  if (rc == 0 && (!p->base || !p->how || !p->remote || !p->node_of || !p->where)) {
    snprintf(err, len, "out of memory");
    rc = SHUNT_E_NOMEM;
  }
  if (rc == 0) rc = open_local(c, p, card_of(p, c->rank), err, len);
  int ag = c->bs->oob.allgather(c->bs->oob.ctx, p->cards, p->card_bytes);
  if (ag != 0 && rc == 0) {
    snprintf(err, len, "bootstrap allgather failed");
    rc = ag < 0 ? ag : SHUNT_E_PEER;
  }
  if (rc == 0) rc = map_peers(c, p, err, len);
  if (p->spans) {
    int agreed = shunt_world_agree(&c->bs->oob, c->rank, n, rc == 0, votes, err, len);
    if (rc == 0) rc = agreed;
    struct shunt_net_ep_config nc = net_config(c, p);
    if (rc == 0)
      rc = shunt_nets_connect(&p->nets, &nc, p->remote, net_of(p, 0), p->card_bytes, p->where, err, len);
  }
  bool ready = rc == 0 && c->ready && (rc = c->ready(c->ctx, p, err, len)) == 0;
  /* Every rank learns whether all others succeeded: all keep their peers or none does. */
  int agreed = shunt_world_agree(&c->bs->oob, c->rank, n, rc == 0, votes, err, len);
  if (rc == 0) rc = agreed;
  /* Every rank has mapped what it will. */
  if (p->opened) c->mem->sealed(&p->env, shunt_peers_mem_card(p, c->rank));
  free(votes);
  if (rc == 0) return 0;
  if (ready && c->unready) c->unready(c->ctx);
  shunt_peers_free(p, false);
  return rc;
}

void shunt_peers_leave(struct shunt_peers* p) {
  shunt_nets_leave(&p->nets);
}

void shunt_peers_close_net(struct shunt_peers* p) {
  shunt_nets_close(&p->nets);
}

void shunt_peers_unmap(struct shunt_peers* p) {
  if (!p->base || !p->cards) return;
  for (uint32_t r = 0; r < p->nranks; r++) {
    if (r != p->rank && p->base[r]) p->mem->unmap(&p->env, p->base[r], p->how[r], shunt_peers_mem_card(p, r));
    if (r != p->rank) p->base[r] = NULL;
  }
}

void shunt_peers_free(struct shunt_peers* p, bool keep_maps) {
  shunt_peers_close_net(p);
  if (!keep_maps) {
    shunt_peers_unmap(p);
    if (p->opened) p->mem->close(&p->env, p->region, shunt_peers_mem_card(p, p->rank));
  }
  p->opened = false;
  free(p->cards);
  free(p->base);
  free(p->how);
  free(p->remote);
  free(p->node_of);
  free(p->where);
  p->cards = NULL;
  p->base = NULL;
  p->how = NULL;
  p->remote = NULL;
  p->node_of = NULL;
  p->where = NULL;
}
