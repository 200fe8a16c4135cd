/* The host world's link over the socket transport (link.h: shunt_link_socket; link_socket.h's
 * endpoint): what arrives is written into this rank's region and a flag raises its semaphore
 * and rings its bell. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "transport/link.h"
#include "transport/link_socket.h"
#include "transport/world.h"

static char* world_sink(void* ctx, unsigned buf, uint64_t off) {
  struct shunt_world* w = ctx;
  return shunt_world_buf(w, w->rank, buf) + off;
}

static void world_signal(void* ctx, uint32_t peer, uint16_t ordinal) {
  struct shunt_world* w = ctx;
  _Atomic uint64_t* sem = &w->peers[w->rank].inbound[shunt_world_sem(w, 2, peer, ordinal)];
  atomic_fetch_add_explicit(sem, 1, memory_order_release);
  shunt_world_ring(w, w->rank);
}

int shunt_world_net_open(struct shunt_world* w, const struct sockaddr_storage* where,
                         struct shunt_net_card* card, char* err, size_t len) {
  struct shunt_net_config c = {.rank = w->rank,
                               .nranks = w->nranks,
                               .caps = {w->cfg.input_bytes, w->cfg.output_bytes, w->cfg.scratch_bytes, 0},
                               .ctx = w,
                               .sink = world_sink,
                               .signal = world_signal,
                               .fail = shunt_world_fail_msg,
                               .give_up = shunt_world_gives_up};
  return shunt_net_open(&c, where, &w->net, card, err, len);
}

int shunt_world_net_connect(struct shunt_world* w, const struct shunt_net_card* cards, char* err,
                            size_t len) {
  bool* remote = calloc(w->nranks, sizeof(*remote));
  if (!remote) {
    snprintf(err, len, "out of memory");
    return -1;
  }
  for (uint32_t r = 0; r < w->nranks; r++) remote[r] = shunt_world_remote(w, r);
  w->net_remote = remote; /* the endpoint keeps the list; freed with the world */
  return shunt_net_connect(w->net, remote, cards, err, len);
}

static int socket_trigger(struct shunt_world* w, const struct shunt_trigger* t, const char* src) {
  if (atomic_load_explicit(&w->failed, memory_order_relaxed)) return -1;
  return shunt_net_send(w->net, t, src);
}

const struct shunt_link_ops shunt_link_socket = {"socket", socket_trigger};
