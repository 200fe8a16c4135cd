/* The host proxy of one rank: a thread that drains a FIFO of port-channel triggers
 * (transport/trigger.h) and performs each over its peer's link (transport/link.h): copies
 * into a shared region and semaphore increments on the same host, messages over TCP to
 * another.
 *
 * Promises: triggers complete strictly in push order; shunt_proxy_done(p) > pos means the
 * trigger at pos and every earlier one are complete as their links promise (link.h: the
 * source may be reused; on a shared-memory link the copies and flags are also visible to any
 * thread that acquires the peer's semaphore, or this counter). Pushing is safe from any
 * number of threads; a full FIFO makes the pusher wait for the proxy, which never blocks while
 * triggers wait. An idle proxy polls briefly, then sleeps until a push wakes it (no CPU spent
 * while a world has no port-channel work). */
#ifndef SHUNT_TRANSPORT_PROXY_H
#define SHUNT_TRANSPORT_PROXY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "transport/trigger.h"

struct shunt_proxy;
struct shunt_link_ops;
struct shunt_link_peers;

/* What the proxy drives: each peer's link and what the links reach, this rank's scratch, and
 * who to wake after a trigger completed (this rank, and the peer when its memory is mapped
 * here and it may wait for the write). */
struct shunt_proxy_config {
  const struct shunt_link_ops* const* links; /* [nranks] */
  const struct shunt_link_peers* peers;
  char* scratch;
  void* ctx;
  void (*done)(void* ctx, uint32_t peer);
  /* The host has fewer cores than ranks: an idle proxy sleeps at once rather than polling (its
   * polling would take a core from a rank, and wake-ups cost less than that there). */
  bool crowded;
};

int shunt_proxy_start(const struct shunt_proxy_config* cfg, struct shunt_proxy** out, char* err, size_t len);
void shunt_proxy_stop(struct shunt_proxy* p);

/* This rank's input and output bases for the coming run (scratch is the world's). Only
 * while the proxy is idle: before a run's threads start, after shunt_proxy_drain. */
void shunt_proxy_bind(struct shunt_proxy* p, char* input, char* output);
uint64_t shunt_proxy_push(struct shunt_proxy* p, const struct shunt_trigger* t);
uint64_t shunt_proxy_done(struct shunt_proxy* p);
uint64_t shunt_proxy_pushed(struct shunt_proxy* p);
/* Waits until every pushed trigger is complete. */
void shunt_proxy_drain(struct shunt_proxy* p);

#endif
