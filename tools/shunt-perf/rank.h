/* One thread from start to end: the ranks it drives, their devices and communicators, the
 * header, the tables, the verdict. */
#ifndef SHUNT_PERF_RANK_H
#define SHUNT_PERF_RANK_H

#include <nccl.h>

#include "channel.h"
#include "options.h"

#define PERF_EXIT_OK 0
#define PERF_EXIT_WRONG 1  /* ran to the end, some element was wrong */
#define PERF_EXIT_FAILED 2 /* a call failed, or the command line was bad */

/* Runs ranks first .. first + nlocal - 1 (at most 64) from the calling thread. shm is the
 * channel shared with the other ranks' threads and processes, or NULL to exchange through
 * NCCL (then nlocal must be 1). Returns a PERF_EXIT_* code. */
int perf_run_thread(const struct perf_opts* o, int first, int nlocal, int nranks, const ncclUniqueId* id,
                    struct perf_chan* shm);

/* The header lines before the ranks start (version, parameters); printed by the process
 * that prints the tables. */
void perf_print_preamble(const struct perf_opts* o, int nranks);

#endif
