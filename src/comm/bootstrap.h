/* shunt's TCP bootstrap: the rendezvous of a communicator's ranks and the small exchanges that
 * communicator setup needs (allgather, broadcast, barrier, point-to-point, split).
 *
 * Promises:
 * - The id is 40 bytes (it rides in bytes 40-127 of ncclUniqueId, which NCCL leaves unused): a
 *   magic saying the bytes are shunt's, the root's IPv4 or IPv6 address and port, a random
 *   64-bit key and the timeout. The key names the communicator: every message on every
 *   connection carries it, and a connection that does not present it first, or that sends a
 *   malformed or oversized message, is dropped with a WARN and never disturbs the rendezvous
 *   or the communicator.
 * - The root lives in the process that called shunt_bootstrap_root_create, in a detached
 *   thread of its own that gathers every rank's listening address, hands out the table and
 *   ends once every rank was served or the timeout passed. Roots are independent: a process
 *   may hold several, and the ranks of a rendezvous may be processes or threads.
 * - Init waits on the root only, never on other ranks: shunt_bootstrap_init_start registers
 *   the rank without waiting; shunt_bootstrap_init_finish waits for the table. One thread may
 *   thus start every rank it holds and then finish each in turn (ncclCommInitAll, or all ranks
 *   inside one group); shunt_bootstrap_init does both.
 * - If a rank does not arrive within the timeout (SHUNT_BOOTSTRAP_TIMEOUT seconds, default
 *   300, read where the id is made), init fails on every waiting rank with an error naming the
 *   missing ranks ("ranks 2, 5 of 8 did not arrive within 3 s").
 * - Connections between ranks open lazily, on first use, each rank keeping its listening
 *   socket for the communicator's life; the collectives use rings and trees, so a rank holds
 *   O(log n) connections unless the caller's point-to-point traffic asks for more.
 * - While a call waits to send, it keeps reading whatever peers send it, so exchanges in both
 *   directions never deadlock on full socket buffers. Every wait ends at the timeout with an
 *   error naming the peer; a peer that closed its connection fails the wait at once.
 * - A communicator is used by one thread at a time (NCCL's rule), except shunt_bootstrap_abort,
 *   which any thread may call at any time; different communicators are independent.
 * Errors are returned as a SHUNT_E_* code (util/status.h: SHUNT_E_TIMEOUT a rank did not come in
 * time, SHUNT_E_PEER a rank closed or broke its connection, SHUNT_E_ABORTED this communicator
 * was aborted, a socket's own code, ...) with a message in err (NUL-terminated, errlen bytes at
 * most), and WARNed. Messages are limited to SHUNT_BOOTSTRAP_MAX_MSG bytes. */
#ifndef SHUNT_COMM_BOOTSTRAP_H
#define SHUNT_COMM_BOOTSTRAP_H

#include <stddef.h>
#include <stdint.h>

#include "util/socket.h"

struct shunt_bootstrap_id {
  uint64_t key;                /* random (getrandom); 0 never */
  uint32_t magic;              /* SHUNT_BOOTSTRAP_MAGIC: the bytes are shunt's */
  uint32_t timeout_s;          /* how long the root waits for the ranks, and ranks for peers */
  struct shunt_wire_addr root; /* where the root listens */
  uint32_t reserved;           /* zero */
};

#define SHUNT_BOOTSTRAP_MAGIC 0x53484e54u /* "SHNT" */
#define SHUNT_BOOTSTRAP_MAX_MSG (64u << 20)
#define SHUNT_BOOTSTRAP_MAX_RANKS (1 << 20)
#define SHUNT_SPLIT_NOCOLOR (-1)

struct shunt_bootstrap;

/* Starts a root listening on the interface SHUNT_SOCKET_IFNAME selects and describes it in
 * *id. The timeout is SHUNT_BOOTSTRAP_TIMEOUT; the _timeout form takes it from the caller. */
int shunt_bootstrap_root_create(struct shunt_bootstrap_id* id, char* err, size_t errlen);
int shunt_bootstrap_root_create_timeout(struct shunt_bootstrap_id* id, int timeout_s, char* err,
                                        size_t errlen);

/* Whether id was made by shunt_bootstrap_root_create (and not left zero). */
int shunt_bootstrap_id_valid(const struct shunt_bootstrap_id* id);

/* Joins the rendezvous as `rank` of `nranks` and blocks until the root handed out the table. */
int shunt_bootstrap_init(const struct shunt_bootstrap_id* id, int rank, int nranks,
                         struct shunt_bootstrap** out, char* err, size_t errlen);

/* The two halves of shunt_bootstrap_init. start listens, connects to the root and registers
 * this rank; it waits for no other rank. finish waits for the table; on failure the caller
 * still owns b and destroys it. A started rank that is never finished is destroyed as usual. */
int shunt_bootstrap_init_start(const struct shunt_bootstrap_id* id, int rank, int nranks,
                               struct shunt_bootstrap** out, char* err, size_t errlen);
int shunt_bootstrap_init_finish(struct shunt_bootstrap* b, char* err, size_t errlen);

int shunt_bootstrap_rank(const struct shunt_bootstrap* b);
int shunt_bootstrap_nranks(const struct shunt_bootstrap* b);
/* Where this rank listens (valid from init_start on). */
void shunt_bootstrap_listen_addr(const struct shunt_bootstrap* b, struct shunt_wire_addr* out);

/* Collectives: every rank of b calls them in the same order.
 * allgather: buf holds nranks slots of `bytes`; this rank's slot is filled in, the others arrive.
 * bcast: root's `bytes` at buf reach every rank's buf. barrier: returns once every rank entered. */
int shunt_bootstrap_allgather(struct shunt_bootstrap* b, void* buf, size_t bytes, char* err, size_t errlen);
int shunt_bootstrap_bcast(struct shunt_bootstrap* b, void* buf, size_t bytes, int root, char* err,
                          size_t errlen);
int shunt_bootstrap_barrier(struct shunt_bootstrap* b, char* err, size_t errlen);

/* Point-to-point: messages from one rank with one tag arrive in order; messages of other tags
 * wait until asked for. recv expects exactly `bytes` (a message of another size is consumed and
 * reported as an error). A rank may send to itself. send may wait until the receiver reads
 * once the socket buffers are full. */
int shunt_bootstrap_send(struct shunt_bootstrap* b, int peer, int tag, const void* data, size_t bytes,
                         char* err, size_t errlen);
int shunt_bootstrap_recv(struct shunt_bootstrap* b, int peer, int tag, void* data, size_t bytes, char* err,
                         size_t errlen);

/* Collective over b: ranks with the same color form a child, ordered by (key, rank); its rank
 * and size come from shunt_bootstrap_rank / _nranks. A negative color (NCCL_SPLIT_NOCOLOR)
 * joins none and gets *child = NULL. Needs no root: one allgather over b. */
int shunt_bootstrap_split(struct shunt_bootstrap* b, int color, int key, struct shunt_bootstrap** child,
                          char* err, size_t errlen);

/* Collective over the ranks of b that are not in exclude (which may be gone): they form a
 * child in their old order. Needs no root and never waits on an excluded rank. The caller
 * must not be excluded. */
int shunt_bootstrap_shrink(struct shunt_bootstrap* b, const int* exclude, int nexclude,
                           struct shunt_bootstrap** child, char* err, size_t errlen);

/* Closes every connection of b now, without waiting on peers; calls in progress in other
 * threads and all later calls fail. Peers waiting on this rank see it gone. */
void shunt_bootstrap_abort(struct shunt_bootstrap* b);
/* Releases b (after abort, or after the last call). NULL is ignored. */
void shunt_bootstrap_destroy(struct shunt_bootstrap* b);

#endif
