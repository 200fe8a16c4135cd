/* Links: how a rank's port channels reach one peer. A world picks one per peer when it is
 * built, as NCCL's transport table picks P2P, SHM or NET per pair: shared memory for a rank of
 * the same host, the network table's chosen row (transport/net.h) for a rank of another host.
 * The proxy drives every kind the same way and never knows which it has. A link knows the
 * peers (struct shunt_link_peers) and its callbacks, never the world that made them.
 *
 * Promises of every link, for one trigger (transport/trigger.h) towards t->peer:
 * - its data are in the peer's buffer before its flag raises the peer's semaphore, and flags
 *   of one rank to one peer are raised in the order they were triggered;
 * - when trigger() returns, the local source bytes may be reused (a flush needs no more);
 * - a failure is reported through the network row's fail callback (with the peer's rank and
 *   host) and returns -1; later triggers return -1 at once once `failed` says so. */
#ifndef SHUNT_TRANSPORT_LINK_H
#define SHUNT_TRANSPORT_LINK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "transport/trigger.h"

struct shunt_net_ops;

/* What the links reach: every rank's region as mapped here, laid out the same on every rank. */
struct shunt_link_peers {
  uint32_t rank, nranks;
  char* const* base;   /* [nranks]: NULL for a rank of another host */
  uint64_t buf_off[3]; /* where input, output and scratch start in every region */
  /* The counter rank p's port channel of ordinal k raises: port_off + 8 (p * ordinals + k). */
  uint64_t port_off;
  uint32_t ordinals;
  const struct shunt_net_ops* net; /* ranks of other hosts: the chosen row and its endpoint */
  void* ep;
  void* ctx;
  bool (*failed)(void* ctx); /* a transport failed: triggers return -1 at once */
};

/* Packets are read by ranks spinning on their flags: they land in whole 8-byte words, each at
 * once, never as a byte copy could tear them. */
static inline void shunt_copy_words(char* dst, const char* src, uint64_t bytes) {
  _Atomic uint64_t* d = (_Atomic uint64_t*)(void*)dst;
  _Atomic uint64_t* s = (_Atomic uint64_t*)(void*)src;
  for (uint64_t i = 0; i < bytes / 8; i++)
    atomic_store_explicit(&d[i], atomic_load_explicit(&s[i], memory_order_relaxed), memory_order_relaxed);
}

struct shunt_link_ops {
  const char* name;
  /* 0 once the trigger's source may be reused, or a SHUNT_E_* code (util/status.h). */
  int (*trigger)(const struct shunt_link_peers* p, const struct shunt_trigger* t, const char* src);
};

extern const struct shunt_link_ops shunt_link_shm; /* link_shm.c */
extern const struct shunt_link_ops shunt_link_net; /* link_net.c: the network table's chosen row */

#endif
