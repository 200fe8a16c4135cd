/* The host world's verbs link (link_ib.h). */
#include "transport/link_ib.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "transport/link.h"
#include "transport/world.h"

int shunt_world_ib_open(struct shunt_world* w, struct shunt_ib_card* card, char* err, size_t len) {
  const struct shunt_shm* reg = &w->regions[w->rank];
  struct shunt_ib_config cfg = {.rank = w->rank,
                                .nranks = w->nranks,
                                .region = reg->base,
                                .bytes = reg->bytes,
                                .dmabuf_fd = -1,
                                .spread = w->rank,
                                .signals = (size_t)w->nranks * SHUNT_WORLD_MAX_ORDINAL * sizeof(uint64_t),
                                .ctx = w,
                                .fail = shunt_world_fail_msg,
                                .give_up = shunt_world_gives_up};
  return shunt_ib_open(&cfg, &w->ib, card, err, len);
}

int shunt_world_ib_connect(struct shunt_world* w, const struct shunt_ib_card* cards, char* err, size_t len) {
  bool* remote = calloc(w->nranks, sizeof(*remote));
  for (uint32_t r = 0; remote && r < w->nranks; r++) remote[r] = shunt_world_remote(w, r);
  /* Collective: called even without memory for the list (then as a rank without an endpoint). */
  int rc =
      shunt_ib_connect(remote && cards ? w->ib : NULL, w->rank, w->nranks, &w->bs, remote, cards, err, len);
  free(remote);
  return rc;
}

static int ib_trigger(struct shunt_world* w, const struct shunt_trigger* t, const char* src) {
  struct shunt_ib* ib = w->ib;
  if (atomic_load_explicit(&w->failed, memory_order_relaxed)) return -1;
  uint64_t id = 0;
  if ((t->type & SHUNT_TRIG_DATA) && t->size &&
      shunt_ib_write(ib, t->peer, src, t->size, shunt_world_buf_offset(w, t->dst_buf) + t->dst_off, NULL,
                     &id) != 0)
    return -1;
  if (t->type & SHUNT_TRIG_FLAG) {
    /* Only this rank raises its channel's semaphore at the peer, so writing its own count is
     * the increment; on the same queue pair after the data, so it lands after them. */
    uint64_t* c = &shunt_ib_signals(ib)[(size_t)t->peer * SHUNT_WORLD_MAX_ORDINAL + t->ordinal];
    (*c)++;
    uint64_t sem = (uint64_t)shunt_world_sem(w, 2, w->rank, t->ordinal) * sizeof(uint64_t);
    if (shunt_ib_write(ib, t->peer, c, sizeof(*c), sem, NULL, &id) != 0) return -1;
  }
  /* The writes have landed once acknowledged: the source may be reused, flush holds. */
  return shunt_ib_wait(ib, t->peer, 0);
}

const struct shunt_link_ops shunt_link_ib = {"verbs", ib_trigger};
