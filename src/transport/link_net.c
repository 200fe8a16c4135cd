/* The network link: a peer of another host, reached through the network table's chosen row
 * (net.h): the data put into its region, then the flag, then a flush, so that the trigger's
 * source may be reused when it returns. */
#include <stdatomic.h>

#include "transport/link.h"
#include "transport/net.h"
#include "transport/world.h"

static int net_trigger(struct shunt_world* w, const struct shunt_trigger* t, const char* src) {
  if (atomic_load_explicit(&w->failed, memory_order_relaxed)) return -1;
  const struct shunt_net_ops* ops = w->nets.ops;
  void* ep = w->nets.chosen;
  if ((t->type & SHUNT_TRIG_DATA) && t->size &&
      ops->put(ep, t->peer, src, t->size, shunt_world_buf_offset(w, t->dst_buf) + t->dst_off,
               (t->type & SHUNT_TRIG_PACKETS) != 0) != 0)
    return -1;
  if ((t->type & SHUNT_TRIG_FLAG) && ops->signal(ep, t->peer, t->ordinal) != 0) return -1;
  return ops->flush(ep, t->peer);
}

const struct shunt_link_ops shunt_link_net = {"net", net_trigger};
