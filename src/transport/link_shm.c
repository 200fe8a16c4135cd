/* The shared-memory link: the peer's region is mapped here, so a put is a copy into it and a
 * signal an atomic increment of its semaphore. */
#include <stdatomic.h>
#include <string.h>

#include "transport/link.h"

static int shm_trigger(const struct shunt_link_peers* p, const struct shunt_trigger* t, const char* src) {
  char* base = p->base[t->peer];
  if ((t->type & SHUNT_TRIG_DATA) && t->size) {
    char* dst = base + p->buf_off[t->dst_buf] + t->dst_off;
    if (t->type & SHUNT_TRIG_PACKETS)
      shunt_copy_words(dst, src, t->size);
    else
      memmove(dst, src, t->size);
  }
  if (t->type & SHUNT_TRIG_FLAG) {
    _Atomic uint64_t* sem =
        (_Atomic uint64_t*)(void*)(base + p->port_off) + (size_t)p->rank * p->ordinals + t->ordinal;
    atomic_fetch_add_explicit(sem, 1, memory_order_release);
  }
  return 0;
}

const struct shunt_link_ops shunt_link_shm = {"shm", shm_trigger};
