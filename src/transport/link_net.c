/* The network link: a peer of another host, reached through the network table's chosen row
 * (net.h): the data put into its region, then the flag, then a flush, so that the trigger's
 * source may be reused when it returns. */
#include "transport/link.h"
#include "transport/net.h"
#include "util/status.h"

/* The world failed before (a transport reported it, with its code): SHUNT_E_PEER here. */
static int net_trigger(const struct shunt_link_peers* p, const struct shunt_trigger* t, const char* src) {
  if (p->failed(p->ctx)) return SHUNT_E_PEER;
  if ((t->type & SHUNT_TRIG_DATA) && t->size)
    SHUNT_TRY(p->net->put(p->ep, t->peer, t->ordinal, src, t->size, p->buf_off[t->dst_buf] + t->dst_off,
                          (t->type & SHUNT_TRIG_PACKETS) != 0));
  if (t->type & SHUNT_TRIG_FLAG) SHUNT_TRY(p->net->signal(p->ep, t->peer, t->ordinal));
  return p->net->flush(p->ep, t->peer);
}

const struct shunt_link_ops shunt_link_net = {"net", net_trigger};
