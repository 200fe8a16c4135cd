/* The GPU executor's speed targets, each measured beside its reference in one run, ranks as
 * threads sharing GPU 0 (scripts/gpu-check.sh runs it; it also runs over the CUDA driver
 * stand-in, where only the mechanics mean anything):
 *
 *   enqueue    host time to enqueue one warm ncclAllReduce (1 KiB float) on a 1-rank
 *              communicator: shunt (this library) beside the real NCCL (SHUNT_NCCL_LIB, loaded
 *              apart), 20000 calls each; and shunt's executor on a 2-rank communicator, where NCCL
 *              cannot run (two ranks on one GPU)
 *   bandwidth  8 ranks, 256 MiB Simple allreduce and allgather: the bytes the collective moves
 *              for all ranks (bus bytes, as nccl-tests counts them: allreduce 2(n-1)/n x S per rank,
 *              allgather (n-1)/n x S per rank, summed over the 8 ranks sharing the GPU) per
 *              second, beside cuMemcpyDtoD of 256 MiB (S bytes per copy) per second
 *   graph      8 ranks, 1 KiB LL allreduce captured 200 times in a CUDA graph per rank, the
 *              graphs replayed together: time per call, beside a graph of 200 empty kernels per
 *              rank replayed the same way
 *
 * Usage: gpu_ratios [enqueue|bandwidth|graph|all]. Exit 77 when there is no CUDA device.
 * GPU_RATIOS_ITERS and GPU_RATIOS_MIB shrink the runs where only the mechanics matter. */
#include <dlfcn.h>
#include <nccl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_driver.h"
#include "shunt/shunt.h"

static struct tool_cuda D;
static void* ctx;

/* An empty kernel, as PTX the driver compiles at load time (no nvcc needed to build this). */
static const char empty_ptx[] =
    ".version 7.0\n.target sm_70\n.address_size 64\n.visible .entry shunt_bench_empty()\n{\n\tret;\n}\n";

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int load_driver(void) {
  char missing[64];
  int n = tool_cuda_open(&D, missing, sizeof(missing));
  if (n < 0 && missing[0]) fprintf(stderr, "gpu_ratios: the driver has no %s\n", missing);
  if (n < 1 || D.DevicePrimaryCtxRetain(&ctx, 0) != 0) return -1;
  return 0;
}

/* ---- ranks as threads ------------------------------------------------------------------------ */

enum what { BW_ALLREDUCE, BW_ALLGATHER, GRAPH_LL, GRAPH_EMPTY, ENQUEUE2 };

struct job {
  int nranks;
  enum what what;
  size_t bytes;
  int iters;
  ncclUniqueId id;
  pthread_barrier_t bar;
  double t0, t1; /* rank 0's window, between barriers */
  int failed;
};

struct arg {
  struct job* j;
  int rank;
};

static void* rank_main(void* p) {
  struct arg* a = p;
  struct job* j = a->j;
  D.CtxSetCurrent(ctx);
  ncclComm_t comm = NULL;
  void* st = NULL;
  unsigned long long send = 0, recv = 0;
  size_t per = j->what == BW_ALLGATHER ? j->bytes / (size_t)j->nranks : j->bytes;
  int ok = j->what == GRAPH_EMPTY || ncclCommInitRank(&comm, j->nranks, j->id, a->rank) == ncclSuccess;
  /* On the rank's stream: a synchronous set would wait for every stream of the context, among
   * them a peer's kernel that already waits for this rank's first call. */
  ok = ok && D.StreamCreate(&st, 1) == 0 && D.MemAlloc(&send, j->bytes) == 0 &&
       D.MemAlloc(&recv, j->bytes) == 0 && D.MemsetD8Async(send, 1, j->bytes, st) == 0;
  void* mod = NULL;
  void* empty = NULL;
  if (ok && j->what == GRAPH_EMPTY)
    ok = D.ModuleLoadData(&mod, empty_ptx) == 0 && D.ModuleGetFunction(&empty, mod, "shunt_bench_empty") == 0;
  void* gin = (void*)(uintptr_t)send;
  void* gout = (void*)(uintptr_t)recv;
#define CALL()                                                                                            \
  (j->what == BW_ALLGATHER ? ncclAllGather(gin, gout, per / 4, ncclFloat, comm, st)                       \
   : j->what == GRAPH_EMPTY ? (D.LaunchKernel(empty, 1, 1, 1, 32, 1, 1, 0, st, NULL, NULL) == 0 ? ncclSuccess \
                                                                                               : ncclSystemError) \
                            : ncclAllReduce(gin, gout, per / 4, ncclFloat, ncclSum, comm, st))
  /* warm: programs uploaded, first-use costs paid */
  for (int i = 0; i < 3 && ok; i++) ok = CALL() == ncclSuccess;
  ok = ok && D.StreamSynchronize(st) == 0;
  if (ok && comm) {
    /* Only shunt's executor is measured here: a call NCCL served is a failure. */
    const char* plan = NULL;
    if (shuntLastPlan(comm, &plan) != 0 || !plan) {
      if (a->rank == 0) fprintf(stderr, "gpu_ratios: %d ranks: the calls went to NCCL, not to a plan\n", j->nranks);
      ok = 0;
    }
  }
  void* exec = NULL;
  if (ok && (j->what == GRAPH_LL || j->what == GRAPH_EMPTY)) {
    void* g = NULL;
    ok = D.StreamBeginCapture(st, 1) == 0;
    for (int i = 0; i < j->iters && ok; i++) ok = CALL() == ncclSuccess;
    ok = D.StreamEndCapture(st, &g) == 0 && ok && D.GraphInstantiate(&exec, g, 0) == 0;
    if (g) D.GraphDestroy(g);
    if (ok) ok = D.GraphLaunch(exec, st) == 0 && D.StreamSynchronize(st) == 0; /* warm replay */
  }
  if (!ok) __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
  pthread_barrier_wait(&j->bar);
  if (a->rank == 0) j->t0 = now_s();
  if (!j->failed) {
    if (exec)
      ok = D.GraphLaunch(exec, st) == 0;
    else if (j->what == ENQUEUE2) {
      double e0 = now_s();
      for (int i = 0; i < j->iters && ok; i++) ok = CALL() == ncclSuccess;
      if (a->rank == 0) j->t1 = now_s() - e0; /* enqueue only */
    } else
      for (int i = 0; i < j->iters && ok; i++) ok = CALL() == ncclSuccess;
    ok = D.StreamSynchronize(st) == 0 && ok;
  }
  pthread_barrier_wait(&j->bar);
  if (a->rank == 0 && j->what != ENQUEUE2) j->t1 = now_s() - j->t0;
  if (!ok) __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
#undef CALL
  if (exec) D.GraphExecDestroy(exec);
  if (comm) ncclCommDestroy(comm);
  if (send) D.MemFree(send);
  if (recv) D.MemFree(recv);
  if (st) D.StreamDestroy(st);
  return NULL;
}

/* Seconds for j->iters calls of every rank (rank 0's window); < 0 on failure. */
static double run_ranks(int n, enum what w, size_t bytes, int iters) {
  struct job j = {.nranks = n, .what = w, .bytes = bytes, .iters = iters};
  if (w != GRAPH_EMPTY && ncclGetUniqueId(&j.id) != ncclSuccess) return -1;
  pthread_barrier_init(&j.bar, NULL, (unsigned)n);
  pthread_t th[16];
  struct arg args[16];
  for (int r = 0; r < n; r++) {
    args[r] = (struct arg){&j, r};
    pthread_create(&th[r], NULL, rank_main, &args[r]);
  }
  for (int r = 0; r < n; r++) pthread_join(th[r], NULL);
  pthread_barrier_destroy(&j.bar);
  return j.failed ? -1 : j.t1;
}

/* ---- 1-rank enqueue, shunt beside the real NCCL ----------------------------------------------- */

typedef ncclResult_t (*init_fn)(ncclComm_t*, int, ncclUniqueId, int);
typedef ncclResult_t (*id_fn)(ncclUniqueId*);
typedef ncclResult_t (*ar_fn)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
typedef ncclResult_t (*destroy_fn)(ncclComm_t);

/* Microseconds to enqueue one call, averaged over `iters` after a warm-up; < 0 on failure. */
static double enqueue_one_rank(id_fn get_id, init_fn init, ar_fn ar, destroy_fn destroy, int iters) {
  D.CtxSetCurrent(ctx);
  ncclUniqueId id;
  ncclComm_t comm = NULL;
  void* st = NULL;
  unsigned long long b = 0;
  if (get_id(&id) != ncclSuccess || init(&comm, 1, id, 0) != ncclSuccess || D.StreamCreate(&st, 1) != 0 ||
      D.MemAlloc(&b, 1024) != 0)
    return -1;
  void* p = (void*)(uintptr_t)b;
  int ok = 1;
  for (int i = 0; i < 100 && ok; i++) ok = ar(p, p, 256, ncclFloat, ncclSum, comm, st) == ncclSuccess;
  ok = ok && D.StreamSynchronize(st) == 0;
  double t0 = now_s();
  for (int i = 0; i < iters && ok; i++) ok = ar(p, p, 256, ncclFloat, ncclSum, comm, st) == ncclSuccess;
  double us = (now_s() - t0) * 1e6 / iters;
  ok = D.StreamSynchronize(st) == 0 && ok;
  destroy(comm);
  D.MemFree(b);
  D.StreamDestroy(st);
  return ok ? us : -1;
}

/* GPU_RATIOS_ITERS: fewer calls, where only the mechanics are checked (the stand-in). */
static int iters_or(int def) {
  const char* v = getenv("GPU_RATIOS_ITERS");
  return v && atoi(v) > 0 ? atoi(v) : def;
}

static int enqueue(void) {
  const int iters = iters_or(20000);
  double mine = enqueue_one_rank(ncclGetUniqueId, ncclCommInitRank, ncclAllReduce, ncclCommDestroy, iters);
  const char* path = getenv("SHUNT_NCCL_LIB");
  /* Apart from shunt: its own calls bind to itself. (AddressSanitizer refuses RTLD_DEEPBIND;
   * there only the mechanics are checked.) */
#if defined(__SANITIZE_ADDRESS__)
  void* h = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
#else
  void* h = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND) : NULL;
#endif
  double real = -1;
  if (h) {
    id_fn gi = (id_fn)dlsym(h, "ncclGetUniqueId");
    init_fn in = (init_fn)dlsym(h, "ncclCommInitRank");
    ar_fn ar = (ar_fn)dlsym(h, "ncclAllReduce");
    destroy_fn de = (destroy_fn)dlsym(h, "ncclCommDestroy");
    if (gi && in && ar && de) real = enqueue_one_rank(gi, in, ar, de, iters);
  }
  printf("enqueue, 1 rank, 1 KiB float allreduce: shunt %.2f us, NCCL %.2f us per call: ratio %.2f (target <= 1)\n",
         mine, real, real > 0 && mine > 0 ? mine / real : -1.0);
  double t = run_ranks(2, ENQUEUE2, 1024, iters / 10);
  printf("enqueue, 2 ranks as threads on GPU 0, 1 KiB on shunt's executor: %.2f us per call (NCCL cannot run this)\n",
         t > 0 ? t * 1e6 / (iters / 10) : -1.0);
  return mine > 0 && t > 0 ? 0 : 1;
}

static int bandwidth(void) {
  /* GPU_RATIOS_MIB: another size, to try the mechanics where 256 MiB per rank is too much. */
  const char* mib = getenv("GPU_RATIOS_MIB");
  const size_t S = (size_t)(mib && atoi(mib) > 0 ? atoi(mib) : 256) << 20;
  const int n = 8, iters = 5;
  D.CtxSetCurrent(ctx);
  unsigned long long a = 0, b = 0;
  void* st = NULL;
  double mem = -1;
  if (D.MemAlloc(&a, S) == 0 && D.MemAlloc(&b, S) == 0 && D.StreamCreate(&st, 1) == 0) {
    D.MemcpyDtoDAsync(b, a, S, st);
    D.StreamSynchronize(st);
    double t0 = now_s();
    for (int i = 0; i < iters; i++) D.MemcpyDtoDAsync(b, a, S, st);
    D.StreamSynchronize(st);
    mem = (double)S * iters / (now_s() - t0);
  }
  if (a) D.MemFree(a);
  if (b) D.MemFree(b);
  if (st) D.StreamDestroy(st);
  printf("cuMemcpyDtoD %zu MiB: %.1f GB/s (bytes copied)\n", S >> 20, mem / 1e9);
  int rc = mem > 0 ? 0 : 1;
  for (int k = 0; k < 2; k++) {
    enum what w = k ? BW_ALLGATHER : BW_ALLREDUCE;
    double t = run_ranks(n, w, S, iters);
    double factor = k ? (double)(n - 1) / n : 2.0 * (n - 1) / n;
    double rate = t > 0 ? factor * (double)S * n * iters / t : -1;
    printf("%s 8 ranks %zu MiB: %.1f GB/s of bus bytes over all ranks: %.0f%% of cuMemcpyDtoD (target >= 85%%)\n",
           k ? "allgather" : "allreduce", S >> 20, rate / 1e9, mem > 0 && rate > 0 ? 100 * rate / mem : -1.0);
    rc |= t > 0 ? 0 : 1;
  }
  return rc;
}

static int graph(void) {
  const int n = 8, iters = iters_or(200);
  double ll = run_ranks(n, GRAPH_LL, 1024, iters);
  double empty = run_ranks(n, GRAPH_EMPTY, 1024, iters);
  printf("graph, 8 ranks: 1 KiB LL allreduce %.2f us per call, empty kernel %.2f us: ratio %.2f (target <= 2)\n",
         ll > 0 ? ll * 1e6 / iters : -1.0, empty > 0 ? empty * 1e6 / iters : -1.0,
         ll > 0 && empty > 0 ? ll / empty : -1.0);
  return ll > 0 && empty > 0 ? 0 : 1;
}

int main(int argc, char** argv) {
  const char* what = argc > 1 ? argv[1] : "all";
  if (load_driver() != 0) {
    fprintf(stderr, "gpu_ratios: no CUDA device\n");
    return 77;
  }
  int rc = 0;
  if (!strcmp(what, "enqueue") || !strcmp(what, "all")) rc |= enqueue();
  if (!strcmp(what, "graph") || !strcmp(what, "all")) rc |= graph();
  if (!strcmp(what, "bandwidth") || !strcmp(what, "all")) rc |= bandwidth();
  return rc;
}
