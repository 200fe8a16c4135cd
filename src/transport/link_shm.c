/* The shared-memory link: the peer's region is mapped here, so a put is a copy into it and a
 * signal an atomic increment of its semaphore. */
#include <stdatomic.h>
#include <string.h>

#include "transport/link.h"
#include "transport/world.h"

static void copy_words(char* dst, const char* src, uint64_t bytes) {
  /* Packets are read by spinning peers: move whole 8-byte words atomically. */
  _Atomic uint64_t* d = (_Atomic uint64_t*)(void*)dst;
  _Atomic uint64_t* s = (_Atomic uint64_t*)(void*)src;
  for (uint64_t i = 0; i < bytes / 8; i++)
    atomic_store_explicit(&d[i], atomic_load_explicit(&s[i], memory_order_relaxed), memory_order_relaxed);
}

static int shm_trigger(struct shunt_world* w, const struct shunt_trigger* t, const char* src) {
  if ((t->type & SHUNT_TRIG_DATA) && t->size) {
    char* dst = shunt_world_buf(w, t->peer, t->dst_buf) + t->dst_off;
    if (t->type & SHUNT_TRIG_PACKETS)
      copy_words(dst, src, t->size);
    else
      memmove(dst, src, t->size);
  }
  if (t->type & SHUNT_TRIG_FLAG) {
    _Atomic uint64_t* sem = &w->peers[t->peer].inbound[shunt_world_sem(w, 2, w->rank, t->ordinal)];
    atomic_fetch_add_explicit(sem, 1, memory_order_release);
  }
  return 0;
}

const struct shunt_link_ops shunt_link_shm = {"shm", shm_trigger};
