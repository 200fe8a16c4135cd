/* One rank's part of the benchmark: for each collective a table over datatypes, ops and
 * sizes, timed out of place and in place, then checked. */
#ifndef SHUNT_PERF_BENCH_H
#define SHUNT_PERF_BENCH_H

#include <nccl.h>
#include <stdint.h>

#include "channel.h"
#include "options.h"

struct perf_rank {
  const struct perf_opts* o;
  int rank, nranks;
  ncclComm_t comm;
  struct perf_chan* chan;
  void *send, *recv;        /* device buffers */
  unsigned char* host;      /* host staging for inputs and outputs */
  size_t bytes;             /* size of send, recv and host */
  int64_t wrong;            /* the largest #wrong of any row, over all ranks (known on rank 0) */
  int64_t my_wrong;         /* wrong elements this rank saw */
  double next_progress;     /* when rank 0 next reports progress on stderr */
};

/* Allocates buffers, runs every table, frees them. 0 on success; -1 after a failed call. */
int perf_bench(struct perf_rank* r);

#endif
