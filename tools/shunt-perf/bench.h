/* One thread's part of the benchmark: for each collective a table over datatypes, ops and
 * sizes, timed out of place and in place, then checked. A thread drives one rank, or several
 * (-g): then each of its calls is one NCCL group holding the call of every rank it drives, as
 * nccl-tests does. */
#ifndef SHUNT_PERF_BENCH_H
#define SHUNT_PERF_BENCH_H

#include <nccl.h>
#include <stdint.h>

#include "channel.h"
#include "device.h"
#include "options.h"

/* One rank driven by the thread. */
struct perf_lane {
  int rank;
  ncclComm_t comm;
  struct perf_dev* dev;
  void *send, *recv;   /* device buffers */
  unsigned char* host; /* host staging for inputs and outputs */
  int64_t my_wrong;    /* wrong elements this rank saw */
};

struct perf_thread {
  const struct perf_opts* o;
  int nranks;
  int nlocal; /* ranks this thread drives: lanes[0..nlocal-1], consecutive from lanes[0].rank */
  struct perf_lane* lanes;
  struct perf_chan* chan;
  size_t bytes;         /* size of every lane's send, recv and host */
  int64_t wrong;        /* the largest #wrong of any row, over all ranks (known to rank 0's thread) */
  double next_progress; /* when rank 0's thread next reports progress on stderr */
};

/* Allocates buffers, runs every table, frees them. 0 on success; -1 after a failed call. */
int perf_bench(struct perf_thread* t);

#endif
