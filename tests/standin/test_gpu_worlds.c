/* What a communicator keeps as its calls grow: a larger call makes a larger world, and the
 * outgrown one (a proxy thread, streams, IPC mappings of every peer's region) must not stay
 * when no captured graph can use it.
 *
 * Usage: test_gpu_worlds SCENARIO NRANKS (ranks as processes, peers mapped through CUDA IPC)
 *   grow   each rank makes several communicators, and on each runs allreduces of growing sizes
 *          (each a new world); after each communicator's growth its threads (/proc/self/task;
 *          the stand-in's streams are threads too), streams (the stand-in's count) and device
 *          mappings (/proc/self/maps) stay at what its first world held
 *   graph  a call captured into a graph on the first world, then a larger call: the first
 *          world stays while the graph may replay (a replay is exact), and goes once the graph
 *          and its instantiation are destroyed (the next call finds the counts of one world)
 *   abort  a call captured into a graph, then ncclCommAbort on every rank, then the graph
 *          replayed on every rank: the replay returns (its kernel finds the abort word at its
 *          start and touches nothing else; the world's peers are unmapped and its memory would
 *          be freed otherwise, a crash here), the user's buffer keeps what it held; once the
 *          graph is destroyed, the next communicator's first call frees what was kept for it
 *          (the stand-in's mapped host memory back to what it was)
 * Every result is checked. */
#include <dirent.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/fork_ranks.h"
#include "fakecuda/fake_cuda_api.h"
#include "shunt/shunt.h"

#define NCOMMS 3

static int nranks;
static const char* scenario;

static long threads(void) {
  DIR* d = opendir("/proc/self/task");
  long n = 0;
  for (struct dirent* e; d && (e = readdir(d));) n += e->d_name[0] != '.';
  if (d) closedir(d);
  return n;
}

/* The stand-in's device memory is memfd pages: its own allocations and peers' mapped ones. */
static long mappings(void) {
  FILE* f = fopen("/proc/self/maps", "r");
  char line[512];
  long n = 0;
  while (f && fgets(line, sizeof(line), f)) n += strstr(line, "memfd:fakecuda") != NULL;
  if (f) fclose(f);
  return n;
}

static void fill(int rank, unsigned long long d, size_t count) {
  float* h = malloc(count * sizeof(float));
  for (size_t i = 0; i < count; i++) h[i] = (float)(rank + 1 + (int)(i % 7));
  CHECK_EQ_INT(cuMemcpyHtoD_v2(d, h, count * sizeof(float)), 0);
  free(h);
}

/* d holds the sum of every rank's fill. */
static void check_sum(int rank, unsigned long long d, size_t count) {
  float* h = malloc(count * sizeof(float));
  CHECK_EQ_INT(cuMemcpyDtoH_v2(h, d, count * sizeof(float)), 0);
  size_t bad = 0;
  for (size_t i = 0; i < count; i++) {
    float want = 0;
    for (int r = 0; r < nranks; r++) want += (float)(r + 1 + (int)(i % 7));
    bad += h[i] != want;
  }
  CHECK_MSG(bad == 0, "rank %d: allreduce of %zu floats: %zu wrong", rank, count, bad);
  free(h);
}

static void sum(ncclComm_t comm, int rank, fc_handle st, size_t count) {
  unsigned long long d = 0;
  CHECK_EQ_INT(cuMemAlloc_v2(&d, count * sizeof(float)), 0);
  fill(rank, d, count);
  CHECK_EQ_INT(ncclAllReduce((void*)(uintptr_t)d, (void*)(uintptr_t)d, count, ncclFloat, ncclSum, comm, st),
               ncclSuccess);
  CHECK_EQ_INT(cuStreamSynchronize(st), 0);
  check_sum(rank, d, count);
  const char* plan = NULL;
  CHECK_MSG(shuntLastPlan(comm, &plan) == 0 && plan, "rank %d: %zu floats went to NCCL", rank, count);
  cuMemFree_v2(d);
}

static void replay(fc_handle exec, fc_handle st, int rank, unsigned long long d, size_t count) {
  fill(rank, d, count);
  CHECK_EQ_INT(cuGraphLaunch(exec, st), 0);
  CHECK_EQ_INT(cuStreamSynchronize(st), 0);
  check_sum(rank, d, count);
}

static int run_graph(int rank, const ncclUniqueId* ids) {
  fc_handle st = NULL, graph = NULL, exec = NULL;
  CHECK_EQ_INT(cuStreamCreate(&st, 1), 0);
  ncclComm_t comm = NULL;
  CHECK_EQ_INT(ncclCommInitRank(&comm, nranks, ids[0], rank), ncclSuccess);
  if (!comm) CHECK_DONE();
  size_t count = 1024;
  sum(comm, rank, st, count);
  long t0 = threads(), s0 = fakecuda_stream_count(), m0 = mappings();
  unsigned long long d = 0;
  CHECK_EQ_INT(cuMemAlloc_v2(&d, count * sizeof(float)), 0);
  CHECK_EQ_INT(cuStreamBeginCapture_v2(st, 0), 0);
  CHECK_EQ_INT(ncclAllReduce((void*)(uintptr_t)d, (void*)(uintptr_t)d, count, ncclFloat, ncclSum, comm, st),
               ncclSuccess);
  CHECK_EQ_INT(cuStreamEndCapture(st, &graph), 0);
  CHECK_EQ_INT(cuGraphInstantiateWithFlags(&exec, graph, 0), 0);
  replay(exec, st, rank, d, count);
  sum(comm, rank, st, 1u << 20); /* a larger world; the graph's stays */
  replay(exec, st, rank, d, count);
  long t1 = threads();
  CHECK_MSG(t1 > t0, "rank %d: %ld threads with a graph on the outgrown world, %ld before", rank, t1, t0);
  CHECK_EQ_INT(cuGraphExecDestroy(exec), 0);
  CHECK_EQ_INT(cuGraphDestroy(graph), 0);
  sum(comm, rank, st, 1u << 20);
  long t2 = threads(), s2 = fakecuda_stream_count(), m2 = mappings();
  fprintf(stderr, "rank %d: threads %ld -> %ld -> %ld, streams %ld -> %ld, mappings %ld -> %ld\n", rank, t0,
          t1, t2, s0, s2, m0, m2);
  CHECK_MSG(t2 <= t0, "rank %d: %ld threads once the graph is gone, %ld with one world", rank, t2, t0);
  CHECK_MSG(s2 <= s0, "rank %d: %ld streams once the graph is gone, %ld with one world", rank, s2, s0);
  CHECK_MSG(m2 <= m0 + 1, "rank %d: %ld device mappings once the graph is gone, %ld with one world", rank, m2,
            m0);
  cuMemFree_v2(d);
  CHECK_EQ_INT(ncclCommDestroy(comm), ncclSuccess);
  cuStreamDestroy_v2(st);
  CHECK_DONE();
}

static int run_abort(int rank, const ncclUniqueId* ids) {
  fc_handle st = NULL, graph = NULL, exec = NULL;
  CHECK_EQ_INT(cuStreamCreate(&st, 1), 0);
  long long base = fakecuda_host_alloc_bytes();
  ncclComm_t comm = NULL;
  CHECK_EQ_INT(ncclCommInitRank(&comm, nranks, ids[0], rank), ncclSuccess);
  if (!comm) CHECK_DONE();
  size_t count = 1024;
  sum(comm, rank, st, count);
  unsigned long long d = 0, keep = 0;
  CHECK_EQ_INT(cuMemAlloc_v2(&d, count * sizeof(float)), 0);
  CHECK_EQ_INT(cuMemAlloc_v2(&keep, count * sizeof(float)), 0);
  CHECK_EQ_INT(cuStreamBeginCapture_v2(st, 0), 0);
  CHECK_EQ_INT(ncclAllReduce((void*)(uintptr_t)d, (void*)(uintptr_t)keep, count, ncclFloat, ncclSum, comm, st),
               ncclSuccess);
  CHECK_EQ_INT(cuStreamEndCapture(st, &graph), 0);
  CHECK_EQ_INT(cuGraphInstantiateWithFlags(&exec, graph, 0), 0);
  fill(rank, d, count);
  CHECK_EQ_INT(cuGraphLaunch(exec, st), 0);
  CHECK_EQ_INT(cuStreamSynchronize(st), 0);
  check_sum(rank, keep, count);
  CHECK_EQ_INT(ncclCommAbort(comm), ncclSuccess);
  /* The output holds a marker the replay must leave: its kernel does nothing. */
  float* h = malloc(count * sizeof(float));
  for (size_t i = 0; i < count; i++) h[i] = -1.0f;
  CHECK_EQ_INT(cuMemcpyHtoD_v2(keep, h, count * sizeof(float)), 0);
  long launches = fakecuda_exec_launches();
  for (int i = 0; i < 3; i++) {
    CHECK_EQ_INT(cuGraphLaunch(exec, st), 0);
    CHECK_EQ_INT(cuStreamSynchronize(st), 0);
  }
  CHECK_MSG(fakecuda_exec_launches() == launches + 3, "rank %d: %ld exec kernels ran for 3 replays", rank,
            fakecuda_exec_launches() - launches);
  CHECK_EQ_INT(cuMemcpyDtoH_v2(h, keep, count * sizeof(float)), 0);
  size_t moved = 0;
  for (size_t i = 0; i < count; i++) moved += h[i] != -1.0f;
  CHECK_MSG(moved == 0, "rank %d: a replay after the abort wrote %zu of %zu output values", rank, moved, count);
  free(h);
  long long held = fakecuda_host_alloc_bytes();
  CHECK_EQ_INT(cuGraphExecDestroy(exec), 0);
  CHECK_EQ_INT(cuGraphDestroy(graph), 0);
  ncclComm_t next = NULL;
  CHECK_EQ_INT(ncclCommInitRank(&next, nranks, ids[1], rank), ncclSuccess);
  if (!next) CHECK_DONE();
  sum(next, rank, st, count);
  CHECK_EQ_INT(ncclCommDestroy(next), ncclSuccess);
  long long end = fakecuda_host_alloc_bytes();
  fprintf(stderr, "rank %d: pinned host memory %lld before, %lld kept for the graph, %lld at the end\n", rank, base,
          held, end);
  CHECK_MSG(held > base, "rank %d: nothing kept for the graph after the abort", rank);
  CHECK_MSG(end <= base, "rank %d: %lld bytes of pinned host memory outlived the graph and both communicators", rank,
            end - base);
  cuMemFree_v2(d);
  cuMemFree_v2(keep);
  cuStreamDestroy_v2(st);
  CHECK_DONE();
}

static int rank_main(int rank, const ncclUniqueId* ids) {
  fc_handle ctx = NULL;
  CHECK_EQ_INT(cuInit(0), 0);
  CHECK_EQ_INT(cuDevicePrimaryCtxRetain(&ctx, 0), 0);
  CHECK_EQ_INT(cuCtxSetCurrent(ctx), 0);
  if (!strcmp(scenario, "graph")) return run_graph(rank, ids);
  if (!strcmp(scenario, "abort")) return run_abort(rank, ids);
  fc_handle st = NULL;
  CHECK_EQ_INT(cuStreamCreate(&st, 1), 0);
  ncclComm_t comms[NCOMMS] = {0};
  static const size_t counts[] = {1024, 16384, 262144, 1u << 20, 3u << 20};
  for (int k = 0; k < NCOMMS; k++) {
    CHECK_EQ_INT(ncclCommInitRank(&comms[k], nranks, ids[k], rank), ncclSuccess);
    if (!comms[k]) CHECK_DONE();
    sum(comms[k], rank, st, counts[0]);
    long t0 = threads(), s0 = fakecuda_stream_count(), m0 = mappings();
    for (size_t i = 1; i < sizeof(counts) / sizeof(counts[0]); i++) sum(comms[k], rank, st, counts[i]);
    long t1 = threads(), s1 = fakecuda_stream_count(), m1 = mappings();
    fprintf(stderr, "rank %d communicator %d: threads %ld -> %ld, streams %ld -> %ld, mappings %ld -> %ld\n",
            rank, k, t0, t1, s0, s1, m0, m1);
    CHECK_MSG(t1 <= t0, "rank %d communicator %d: %ld threads after growing, %ld before", rank, k, t1, t0);
    CHECK_MSG(s1 <= s0, "rank %d communicator %d: %ld streams after growing, %ld before", rank, k, s1, s0);
    CHECK_MSG(m1 <= m0, "rank %d communicator %d: %ld device mappings after growing, %ld before", rank, k, m1,
              m0);
  }
  for (int k = 0; k < NCOMMS; k++) CHECK_EQ_INT(ncclCommDestroy(comms[k]), ncclSuccess);
  cuStreamDestroy_v2(st);
  CHECK_DONE();
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: test_gpu_worlds SCENARIO NRANKS\n");
    return 2;
  }
  scenario = argv[1];
  nranks = atoi(argv[2]);
  if (nranks < 2 || nranks > 8) return 2;
  return fork_ranks(nranks, NCOMMS, 1, rank_main);
}
