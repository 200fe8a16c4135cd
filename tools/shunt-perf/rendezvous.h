/* Handing the unique id to the ranks of a run spread over machines, given only the root's
 * address (SHUNT_PERF_ROOT=host:port), as launchers such as torchrun do with their store.
 *
 * Rank 0 listens on that address and serves the id to each other rank that asks, from a
 * thread of its own, until all have it or the timeout passes; the others connect (retrying
 * while rank 0 is not up yet) and read it. Each request carries a magic and the run's size,
 * so a stray connection or a rank of another run is refused. */
#ifndef SHUNT_PERF_RENDEZVOUS_H
#define SHUNT_PERF_RENDEZVOUS_H

#include <nccl.h>

/* Rank 0: starts serving *id (which must outlive the serving thread) on addr. */
int perf_rdv_serve(const char* addr, int nranks, const ncclUniqueId* id, int timeout_s);
/* Other ranks: fetches the id from addr. */
int perf_rdv_fetch(const char* addr, int rank, int nranks, ncclUniqueId* id, int timeout_s);

#endif
