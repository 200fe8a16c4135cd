/* A world: the host transport of one communicator. Every rank maps the shared region
 * (semaphores, scratch, staging for input and output) of every rank on its host, connects to
 * the ranks of other hosts through a network transport (verbs or TCP, SHUNT_NET), and runs one
 * proxy thread that serves its port channels over each peer's link (transport/link.h).
 *
 * Promises:
 * - Creation and destruction are collective over the caller's bootstrap (allgather and
 *   barrier callbacks); the sizes must agree on every rank (checked) so scratch halves line
 *   up. Ranks may be processes or threads of one process.
 * - Channel semaphores are 64-bit atomics in shared memory that persist for the world's
 *   life: my k-th channel of a type to peer P waits on my inbound counter (type, P, k),
 *   which P's k-th channel of that type back to me increments (docs/plan-format.md §6.1-6.2).
 * - Every rank has a bell in its shared region (transport/host_bell.h), every host a count of
 *   its sleeping ranks (in its lowest rank's region): a rank whose blocks all wait sleeps on its
 *   bell; shunt_world_ring / shunt_world_ring_at wake the rank written to after a write it may
 *   wait for (signals, packets, a proxy's completion, a failure).
 * - The epoch advances once per execution on each rank; equal execution counts give equal
 *   epochs on every rank, independent of any other world in the process (docs/decisions.md D5).
 * - Nothing here prints to stdout; errors are values with a message. */
#ifndef SHUNT_TRANSPORT_WORLD_H
#define SHUNT_TRANSPORT_WORLD_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "transport/exchange.h"
#include "transport/host_bell.h"
#include "transport/link.h"
#include "transport/peers.h"
#include "util/log.h"

struct shunt_world_config {
  uint64_t scratch_bytes; /* per rank, both halves of a double scratch included */
  uint64_t input_bytes;   /* staging capacity for a rank's input */
  uint64_t output_bytes;  /* staging capacity for a rank's output */
};

#define SHUNT_WORLD_MAX_ORDINAL 256 /* channels per (type, peer) */

/* A peer on another host has no mapping here: its pointers are NULL and only its link
 * (transport/link.h) reaches it. */
struct shunt_world_peer {
  char* scratch;
  char* input;
  char* output;
  _Atomic uint64_t* inbound; /* [type-1][from rank][ordinal] */
  struct shunt_rank_bell* bell;
};

struct shunt_proxy;

struct shunt_world {
  uint32_t rank, nranks;
  struct shunt_world_config cfg;
  struct shunt_world_exchange bs;
  struct shunt_peers reach;       /* the regions mapped, the network (transport/peers.h) */
  struct shunt_world_peer* peers; /* [nranks], peers[rank] is this rank */
  _Atomic uint64_t* expected;     /* this rank's waits so far per channel, same indexing as inbound */
  atomic_uint_fast64_t epoch;
  atomic_bool broken;  /* a run timed out: the shared state is no longer consistent */
  atomic_bool aborted; /* the communicator is going away: waits give up at once */
  struct shunt_proxy* proxy;
  struct shunt_host_sleepers* sleepers; /* this host's, in its lowest rank's region */
  uint32_t* node_of;                    /* [nranks] each rank's host (reach's) */
  char (*where)[64];                    /* [nranks] a rank of another host's address, else "" */
  const struct shunt_link_ops** links;  /* [nranks] how port channels reach each peer */
  struct shunt_link_peers linkp;        /* what the links reach */
  /* A transport failed (a connection reset, a peer gone): every wait gives up, later runs
   * refuse with fail_code (util/status.h: SHUNT_E_PEER, SHUNT_E_NET, ...), fail_msg names the
   * peer. Set once (shunt_world_fail); read after `failed` (acquire). */
  atomic_bool failed;
  atomic_flag fail_claimed;
  int fail_code;
  char fail_msg[512];
};

/* SHUNT_OK, or the code of the first failure (util/status.h; transport/peers.h) with err. */
int shunt_world_create(uint32_t rank, uint32_t nranks, const struct shunt_world_config* cfg,
                       const struct shunt_world_exchange* bs, struct shunt_world** out, char* err,
                       size_t len);
/* Collective: waits for every rank before unmapping. */
void shunt_world_destroy(struct shunt_world* w);
/* Not collective: stops this rank's proxy and unmaps its view. Safe while peers still run:
 * each rank maps every region itself and the names are unlinked at creation, so a region
 * lives until its last mapping goes. For teardown, where ranks may be destroyed one after
 * another by one thread (NCCL allows that) or be gone. */
void shunt_world_release(struct shunt_world* w);

/* Marks the world failed with a code and a message (the first one wins; logged at WARN) so that
 * waits give up and the run reports both. Safe from any thread. */
void shunt_world_fail(struct shunt_world* w, int code, const char* fmt, ...) SHUNT_PRINTF(3, 4);

/* Wakes rank r (of this host) if it sleeps, after a write it may wait for. */
static inline void shunt_world_ring(struct shunt_world* w, uint32_t r) {
  if (shunt_host_sleepers_any(w->sleepers)) shunt_rank_bell_ring(w->peers[r].bell);
}

/* The same for whichever rank of this host owns the memory at p (nothing when none does). */
static inline void shunt_world_ring_at(struct shunt_world* w, const void* p) {
  if (!shunt_host_sleepers_any(w->sleepers)) return;
  for (uint32_t r = 0; r < w->nranks; r++) {
    const char* base = w->reach.base[r]; /* NULL for a rank of another host */
    if (base && (const char*)p >= base && (const char*)p < base + w->reach.bytes) {
      shunt_rank_bell_ring(w->peers[r].bell);
      return;
    }
  }
}

/* Whether rank r is on another host than this rank (reached only through its link). */
static inline bool shunt_world_remote(const struct shunt_world* w, uint32_t r) {
  return w->node_of[r] != w->node_of[w->rank];
}

/* Whether the plan's memory groups (rpn consecutive ranks, plan.h's ranks_per_node; 0: none)
 * each lie on one host of this world; if not, *a and *b are two ranks of a group apart. */
bool shunt_world_fits(const struct shunt_world* w, uint32_t rpn, uint32_t* a, uint32_t* b);
/* The same for any backend's world: node_of[r] is rank r's host. */
bool shunt_nodes_fit(const uint32_t* node_of, uint32_t nranks, uint32_t rpn, uint32_t* a, uint32_t* b);

/* Where buffer type (0 input, 1 output, 2 scratch) starts in every rank's shared region (the
 * semaphores start at 0): the same on every rank of a world. */
uint64_t shunt_world_buf_offset(const struct shunt_world* w, unsigned type);

/* Index of the counter for channel (type MEMORY or PORT, peer, ordinal). */
static inline size_t shunt_world_sem(const struct shunt_world* w, unsigned type, uint32_t peer,
                                     uint32_t ordinal) {
  return ((size_t)(type - 1) * w->nranks + peer) * SHUNT_WORLD_MAX_ORDINAL + ordinal;
}

/* Base of buffer type (0 input, 1 output, 2 scratch) of a rank's shared region. */
static inline char* shunt_world_buf(const struct shunt_world* w, uint32_t rank, unsigned type) {
  const struct shunt_world_peer* p = &w->peers[rank];
  return type == 0 ? p->input : type == 1 ? p->output : p->scratch;
}

#endif
