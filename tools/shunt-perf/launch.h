/* How ranks come to be: -np forks them here, SHUNT_PERF_* joins a run spread over machines,
 * --make-id produces the id such a run shares. */
#ifndef SHUNT_PERF_LAUNCH_H
#define SHUNT_PERF_LAUNCH_H

#include "options.h"

/* Each returns the process's exit status. */
int perf_launch_procs(const struct perf_opts* o);
int perf_launch_single(const struct perf_opts* o);
/* 1 when SHUNT_PERF_RANK, _NRANKS or _ID is set. */
int perf_env_requested(void);
int perf_launch_env(const struct perf_opts* o);
int perf_make_id(void);

#endif
