/* SHUNT_NET and what it leads to, the same for the host backend's world and the GPU backend's:
 * which transport carries port channels to ranks of other hosts.
 *
 * Promises: every rank decides from the same gathered cards, so all agree; verbs only when
 * SHUNT_NET allows it and every rank has a verbs endpoint. */
#ifndef SHUNT_TRANSPORT_NET_KIND_H
#define SHUNT_TRANSPORT_NET_KIND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum shunt_net_kind { SHUNT_NET_AUTO, SHUNT_NET_IB, SHUNT_NET_SOCKET };

/* SHUNT_NET (auto, ib, socket; default auto) and its name. */
enum shunt_net_kind shunt_net_kind(void);
const char* shunt_net_kind_name(enum shunt_net_kind k);

/* Whether the ranks use verbs: rank r's card (struct shunt_ib_card) lies at
 * ib_cards + r * stride. why: "" or, under auto without verbs, "; rank R has no verbs
 * transport", for the caller's INFO line. */
bool shunt_net_use_ib(enum shunt_net_kind k, const void* ib_cards, size_t stride, uint32_t nranks, char* why,
                      size_t len);

#endif
