/* shunt-perf: shunt's benchmark, in the manner of nccl-tests (see `shunt-perf --help`). */
#include <stdio.h>

#include "launch.h"
#include "options.h"
#include "rank.h"

int main(int argc, char** argv) {
  struct perf_opts o;
  int rc = perf_parse_options(argc, argv, &o);
  if (rc != 0) return rc > 0 ? PERF_EXIT_OK : PERF_EXIT_FAILED;
  if (o.make_id) return perf_make_id();
  if (o.nprocs && perf_env_requested()) {
    fprintf(stderr, "shunt-perf: -np and SHUNT_PERF_RANK/NRANKS/ID exclude each other\n");
    return PERF_EXIT_FAILED;
  }
  if (o.nprocs) return perf_launch_procs(&o);
  if (perf_env_requested()) return perf_launch_env(&o);
  return perf_launch_single(&o);
}
