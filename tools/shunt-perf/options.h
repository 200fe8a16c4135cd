/* shunt-perf's command line: nccl-tests' flags where they apply, plus how ranks are started. */
#ifndef SHUNT_PERF_OPTIONS_H
#define SHUNT_PERF_OPTIONS_H

#include <nccl.h>
#include <stddef.h>
#include <stdio.h>

#define PERF_COLL_ALLREDUCE 1
#define PERF_COLL_ALLGATHER 2
#define PERF_COLL_REDUCESCATTER 4
#define PERF_COLL_ALLTOALL 8
#define PERF_COLL_BROADCAST 16
#define PERF_COLL_REDUCE 32
#define PERF_MAX_OPS 8

struct perf_opts {
  size_t min_bytes, max_bytes, step_bytes;
  double step_factor; /* > 1: multiply sizes by it; otherwise add step_bytes */
  int iters, warmup, check, blocking, cycles, graph;
  int ntypes;
  ncclDataType_t types[16];
  int nops;
  int ops[PERF_MAX_OPS];
  int colls;        /* PERF_COLL_* bits */
  int nprocs;       /* -np: processes to start; 0 when not given */
  int nthreads;     /* -t: threads per process (default 1) */
  int ngpus;        /* -g: ranks each thread drives, each call a group of theirs (default 1) */
  int make_id;      /* --make-id */
  int random_sizes; /* --random: that many sizes drawn in [min_bytes, max_bytes] */
  unsigned long random_seed;
  int root; /* --root: broadcast's root (default 0); -1: every root in turn */
};

/* Returns 0 to run, 1 when help was printed, -1 on a bad command line (reason on stderr). */
int perf_parse_options(int argc, char** argv, struct perf_opts* o);
void perf_usage(FILE* f);

#endif
