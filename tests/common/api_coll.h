/* The frame of a collective's NCCL API test (tests/api/test_api_<coll>.c): N ranks as processes,
 * one communicator each, one scenario run on every rank. A test writes its scenarios and calls
 * api_coll_main; the scenarios share the helpers below.
 *
 * Scenarios every collective's test has, by name:
 *   served    exact on the collective's plans (in place and out of place, plain and *Config)
 *   badinput  NCCL's answers to bad arguments, never a crash
 *   force     SHUNT_FORCE_FALLBACK=<coll>: the collective goes to NCCL, allreduce stays on plans
 *   devptr    buffers the CUDA driver stand-in calls device memory: to NCCL with the reason */
#ifndef SHUNT_TEST_API_COLL_H
#define SHUNT_TEST_API_COLL_H

#include <dlfcn.h>
#include <nccl.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/coll_config.h"
#include "common/fork_ranks.h"
#include "fallback/nccl_compat.h"
#include "shunt/shunt.h"

/* The communicator's size, set by api_coll_main before any scenario runs. */
static int nranks;

struct api_coll_scenarios {
  void (*served)(ncclComm_t comm, int rank);
  void (*badinput)(ncclComm_t comm, int rank);
  void (*force)(ncclComm_t comm, int rank);
  void (*devptr)(ncclComm_t comm, int rank);
};

static const char* api_coll_scenario;
static const struct api_coll_scenarios* api_coll_table;

/* Whether NCCL (the double) stands behind shunt in this run. */
static inline int fallback_on(void) {
  const char* fb = getenv("SHUNT_FALLBACK");
  return !fb || strcmp(fb, "0") != 0;
}

/* The plan that served the communicator's last call, "nccl" when NCCL did. */
static inline const char* last_plan(ncclComm_t comm) {
  const char* name = NULL;
  if (shuntLastPlan(comm, &name) != 0) return "?";
  return name ? name : "nccl";
}

/* An allreduce after the collective under test still runs on a plan (the forced fallback names
 * one collective only). */
static inline void check_allreduce_on_plan(ncclComm_t comm) {
  float a[256];
  for (int i = 0; i < 256; i++) a[i] = 1;
  CHECK_EQ_INT(ncclAllReduce(a, a, 256, ncclFloat, ncclSum, comm, NULL), ncclSuccess);
  CHECK_MSG(strncmp(last_plan(comm), "allreduce_", 10) == 0, "allreduce went to %s", last_plan(comm));
  for (int i = 0; i < 256; i++) CHECK_MSG(a[i] == (float)nranks, "allreduce a[%d] = %g", i, (double)a[i]);
}

/* Marks [p, p + bytes) as device memory in the CUDA driver stand-in (TEST_FAKE_CUDA names it),
 * after the cuInit the driver wants first. Returns 0 on success. */
static inline int standin_add_device(const void* p, size_t bytes) {
  void* h = dlopen(getenv("TEST_FAKE_CUDA"), RTLD_NOW | RTLD_GLOBAL);
  CHECK_MSG(h != NULL, "cannot load the CUDA stand-in: %s", dlerror());
  if (!h) return -1;
  int (*add_device)(const void*, size_t) = (int (*)(const void*, size_t))dlsym(h, "fakecuda_add_device");
  int (*cu_init)(unsigned) = (int (*)(unsigned))dlsym(h, "cuInit");
  CHECK(cu_init && cu_init(0) == 0);
  CHECK(add_device != NULL);
  return add_device ? add_device(p, bytes) : -1;
}

static inline int api_coll_rank(int rank, const ncclUniqueId* ids) {
  ncclComm_t comm = NULL;
  CHECK_EQ_INT(ncclCommInitRank(&comm, nranks, ids[0], rank), ncclSuccess);
  if (!comm) CHECK_DONE();
  const struct api_coll_scenarios* t = api_coll_table;
  void (*run)(ncclComm_t, int) = !strcmp(api_coll_scenario, "served")     ? t->served
                                 : !strcmp(api_coll_scenario, "badinput") ? t->badinput
                                 : !strcmp(api_coll_scenario, "force")    ? t->force
                                 : !strcmp(api_coll_scenario, "devptr")   ? t->devptr
                                                                          : NULL;
  CHECK_MSG(run != NULL, "unknown scenario %s", api_coll_scenario);
  if (run) run(comm, rank);
  CHECK_EQ_INT(ncclCommDestroy(comm), ncclSuccess);
  CHECK_DONE();
}

/* Usage: PROG SCENARIO NRANKS. Runs the scenario on NRANKS forked ranks (min_ranks..16). */
static inline int api_coll_main(int argc, char** argv, int min_ranks,
                                const struct api_coll_scenarios* table) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s SCENARIO NRANKS\n", argv[0]);
    return 2;
  }
  api_coll_scenario = argv[1];
  api_coll_table = table;
  nranks = atoi(argv[2]);
  if (nranks < min_ranks || nranks > 16) return 2;
  return fork_ranks(nranks, 1, 0, api_coll_rank);
}

#endif
