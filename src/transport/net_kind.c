/* SHUNT_NET's choice (net_kind.h). */
#include "transport/net_kind.h"

#include <stdio.h>

#include "transport/ib_ep.h"
#include "util/env.h"

static const char* const kinds[] = {"auto", "ib", "socket"};

enum shunt_net_kind shunt_net_kind(void) {
  return (enum shunt_net_kind)shunt_env_choice("SHUNT_NET", NULL, kinds, 3, SHUNT_NET_AUTO);
}

const char* shunt_net_kind_name(enum shunt_net_kind k) {
  return k <= SHUNT_NET_SOCKET ? kinds[k] : "?";
}

bool shunt_net_use_ib(enum shunt_net_kind k, const void* ib_cards, size_t stride, uint32_t nranks, char* why,
                      size_t len) {
  uint32_t lacking = nranks;
  for (uint32_t r = 0; r < nranks && lacking == nranks; r++) {
    const struct shunt_ib_card* c = (const void*)((const char*)ib_cards + (size_t)r * stride);
    if (!c->ok) lacking = r;
  }
  bool ib = k != SHUNT_NET_SOCKET && lacking == nranks;
  if (len) why[0] = 0;
  if (!ib && k == SHUNT_NET_AUTO) snprintf(why, len, "; rank %u has no verbs transport", lacking);
  return ib;
}
