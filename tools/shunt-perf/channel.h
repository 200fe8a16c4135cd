/* A side channel between ranks for what the benchmark itself needs to agree on: the device
 * list, times, #wrong counts, and each rank's final verdict.
 *
 * With -np the parent maps shared memory before it forks, so these exchanges never touch
 * the library under test (a broken collective cannot hide its own errors) and the parent
 * reads every rank's verdict after the children exit. Ranks started on several machines
 * have no shared memory and exchange through NCCL instead. */
#ifndef SHUNT_PERF_CHANNEL_H
#define SHUNT_PERF_CHANNEL_H

#include <nccl.h>
#include <stddef.h>
#include <stdint.h>

#define PERF_CHAN_BYTES 256 /* the most one rank contributes to one exchange */

struct perf_verdict {
  int finished;  /* the rank ran to its end */
  int failed;    /* an NCCL call or an allocation failed */
  int64_t wrong; /* wrong elements this rank saw */
};

struct perf_chan;

struct perf_dev;

/* Shared memory for nranks ranks driven by nthreads threads in all (a thread may drive
 * several ranks); call before fork. */
struct perf_chan* perf_chan_shm(int nranks, int nthreads);
/* Exchanges through comm (bytes go through dev's buffers); one rank per thread. */
struct perf_chan* perf_chan_nccl(ncclComm_t comm, struct perf_dev* dev, int nranks);
/* The calling thread's ranks first .. first + nlocal - 1 pass `bytes` bytes each (mine holds
 * them in that order); all receives nranks * bytes, rank order. 0 on success. */
int perf_chan_allgather(struct perf_chan* ch, int first, int nlocal, const void* mine, size_t bytes,
                        void* all);
int perf_chan_barrier(struct perf_chan* ch, int first, int nlocal);
/* A rank's verdict; kept only by the shared-memory channel, for the parent. */
void perf_chan_set_verdict(struct perf_chan* ch, int rank, const struct perf_verdict* v);
const struct perf_verdict* perf_chan_verdict(struct perf_chan* ch, int rank);
/* Frees what this process holds of the channel; a rank using the shared-memory channel
 * leaves it to the parent. */
void perf_chan_close(struct perf_chan* ch);

#endif
