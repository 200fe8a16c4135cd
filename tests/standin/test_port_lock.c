/* Port plans and abort against the driver's context lock and shared hardware queues, over the
 * CUDA driver stand-in (tests/fakecuda, whose rules are CUDA's: tests/fakecuda/README.md).
 *
 * Usage: test_port_lock SCENARIO NRANKS   (ranks as threads of one process, rank r on device r;
 * run with CUDA_DEVICE_MAX_CONNECTIONS=1, so every stream of a device shares one queue)
 *   interfere  every rank runs rounds of port-plan allreduces (the tuning leaves only port
 *              plans) while another thread loads modules (each kernel's first fetch a lazy
 *              load, which holds device 0's context lock until the device's queued work has
 *              run) and allocates and frees device memory in a loop: every round completes,
 *              and the results are exact
 *   abort      rank 0's kernel waits for rank 1, which never calls; rank 0 aborts while
 *              another thread holds device 0's context lock in a drain: the abort lands, the
 *              stream drains within 10 s
 * A hang fails the test: a watchdog ends it after 120 s. */
#include <nccl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/check.h"
#include "fakecuda/fake_cuda_api.h"
#include "shunt/shunt.h"

#define ROUNDS 6
#define CALLS 8 /* calls enqueued per round before the rank waits */
#define COUNT 4096

int cuModuleLoadData(fc_handle* mod, const void* image);
int cuModuleGetFunction(fc_handle* f, fc_handle mod, const char* name);
int cuLaunchKernel(fc_handle f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned smem, fc_handle stream, void** params, void** extra);

static const char* scenario;
static int nranks;
static pthread_barrier_t bar;
static int ranks_done, set_up, enqueued; /* atomics: flags between the threads */

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "test_port_lock: hung for 120 s (a kernel waits on a blocked proxy or abort)\n";
  if (write(2, msg, sizeof(msg) - 1) < 0) _exit(2);
  _exit(1);
}

static fc_handle context_of(int dev) {
  fc_handle ctx = NULL;
  CHECK_EQ_INT(cuInit(0), 0);
  CHECK_EQ_INT(cuDevicePrimaryCtxRetain(&ctx, dev), 0);
  CHECK_EQ_INT(cuCtxSetCurrent(ctx), 0);
  return ctx;
}

/* Another thread of the process on device 0, as a framework's: module loads whose kernels load
 * at their first fetch (lazy loading), a launch of one, allocations and frees. */
static void* interferer(void* arg) {
  (void)arg;
  context_of(0);
  while (!__atomic_load_n(&set_up, __ATOMIC_ACQUIRE)) usleep(1000);
  fc_handle st = NULL;
  CHECK_EQ_INT(cuStreamCreate(&st, 0), 0);
  /* A framework's module as PTX text: the driver loads only an image that holds the kernel. */
  static const char image[] =
      ".version 8.0\n.target sm_90\n.visible .entry shunt_bench_empty()\n{\n\tret;\n}\n";
  long loops = 0;
  while (!__atomic_load_n(&ranks_done, __ATOMIC_ACQUIRE)) {
    fc_handle mod = NULL, fn = NULL;
    CHECK_EQ_INT(cuModuleLoadData(&mod, image), 0);
    CHECK_EQ_INT(cuModuleGetFunction(&fn, mod, "shunt_bench_empty"), 0);
    CHECK_EQ_INT(cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, st, NULL, NULL), 0);
    CHECK_EQ_INT(cuStreamSynchronize(st), 0);
    unsigned long long d = 0;
    CHECK_EQ_INT(cuMemAlloc_v2(&d, 1 << 20), 0);
    CHECK_EQ_INT(cuMemFree_v2(d), 0);
    loops++;
    usleep(200);
  }
  CHECK_EQ_INT(cuStreamDestroy_v2(st), 0);
  CHECK_MSG(loops > 0, "the interfering thread never ran");
  return NULL;
}

struct rank_arg {
  int rank;
  ncclUniqueId id;
};

static void* rank_main(void* p) {
  struct rank_arg* a = p;
  int rank = a->rank;
  context_of(rank);
  ncclComm_t comm = NULL;
  CHECK_EQ_INT(ncclCommInitRank(&comm, nranks, a->id, rank), ncclSuccess);
  int on = -2;
  if (comm) CHECK_EQ_INT(shuntGpuExecutor(comm, &on), 0);
  CHECK_MSG(on == 1, "rank %d: the GPU executor is %d", rank, on);
  fc_handle st = NULL;
  CHECK_EQ_INT(cuStreamCreate(&st, 1), 0);
  unsigned long long buf = 0;
  CHECK_EQ_INT(cuMemAlloc_v2(&buf, COUNT * sizeof(float)), 0);
  float* host = malloc(COUNT * sizeof(float));
  for (int i = 0; i < COUNT; i++) host[i] = (float)((rank + 1) * (i % 13));
  CHECK_EQ_INT(cuMemcpyHtoD_v2(buf, host, COUNT * sizeof(float)), 0);
  pthread_barrier_wait(&bar); /* every rank set up: the interfering thread starts */
  if (rank == 0) __atomic_store_n(&set_up, 1, __ATOMIC_RELEASE);
  if (!strcmp(scenario, "interfere")) {
    /* In place: after c calls, element i is (rank+1)(i%13) summed over ranks, times nranks^(c-1). */
    for (int round = 0; round < ROUNDS && on == 1; round++) {
      for (int c = 0; c < CALLS; c++)
        CHECK_EQ_INT(
            ncclAllReduce((void*)(uintptr_t)buf, (void*)(uintptr_t)buf, COUNT, ncclFloat, ncclSum, comm, st),
            ncclSuccess);
      const char* plan = NULL;
      shuntLastPlan(comm, &plan);
      CHECK_MSG(plan && strstr(plan, "_port_"), "rank %d: %s served, not a port plan", rank,
                plan ? plan : "nccl");
      CHECK_EQ_INT(cuStreamSynchronize(st), 0);
      /* No synchronous copy while a peer's next kernel may be queued: a rank waits for all. */
      pthread_barrier_wait(&bar);
      CHECK_EQ_INT(cuMemcpyDtoH_v2(host, buf, COUNT * sizeof(float)), 0);
      double scale = 1;
      for (int k = 1; k < CALLS; k++) scale *= nranks;
      int bad = 0;
      for (int i = 0; i < COUNT && !bad; i++) {
        double want = (double)nranks * (nranks + 1) / 2 * (i % 13) * scale;
        bad = (double)host[i] != want;
        CHECK_MSG(!bad, "rank %d round %d: element %d is %g, not %g", rank, round, i, (double)host[i], want);
      }
      for (int i = 0; i < COUNT; i++) host[i] = (float)((rank + 1) * (i % 13));
      CHECK_EQ_INT(cuMemcpyHtoD_v2(buf, host, COUNT * sizeof(float)), 0);
      pthread_barrier_wait(&bar);
    }
  } else if (rank == 0 && on == 1) {
    CHECK_EQ_INT(
        ncclAllReduce((void*)(uintptr_t)buf, (void*)(uintptr_t)buf, COUNT, ncclFloat, ncclSum, comm, st),
        ncclSuccess);
    __atomic_store_n(&enqueued, 1, __ATOMIC_RELEASE);
    usleep(300000); /* the kernel now waits for rank 1, which never calls */
    double a0 = now_s();
    CHECK_EQ_INT(ncclCommAbort(comm), ncclSuccess);
    comm = NULL;
    CHECK_EQ_INT(cuStreamSynchronize(st), 0);
    CHECK_MSG(now_s() - a0 < 10.0, "abort and drain took %.2f s", now_s() - a0);
  }
  pthread_barrier_wait(&bar);
  if (comm)
    CHECK_EQ_INT(!strcmp(scenario, "abort") ? ncclCommAbort(comm) : ncclCommDestroy(comm), ncclSuccess);
  CHECK_EQ_INT(cuMemFree_v2(buf), 0);
  CHECK_EQ_INT(cuStreamDestroy_v2(st), 0);
  free(host);
  return NULL;
}

/* Holds device 0's context lock, as a synchronizing call does, until the device's queued work
 * (rank 0's waiting kernel) has run: only an abort that needs no CUDA call ends it. */
static void* drainer(void* arg) {
  (void)arg;
  context_of(0);
  while (!__atomic_load_n(&enqueued, __ATOMIC_ACQUIRE)) usleep(1000);
  usleep(50000);
  static float word;
  unsigned long long d = 0;
  CHECK_EQ_INT(cuMemAlloc_v2(&d, sizeof(word)), 0);
  CHECK_EQ_INT(cuMemcpyHtoD_v2(d, &word, sizeof(word)), 0);
  CHECK_EQ_INT(cuMemFree_v2(d), 0);
  return NULL;
}

int main(int argc, char** argv) {
  if (argc != 3 || (strcmp(argv[1], "interfere") && strcmp(argv[1], "abort"))) {
    fprintf(stderr, "usage: test_port_lock interfere|abort NRANKS\n");
    return 2;
  }
  scenario = argv[1];
  nranks = atoi(argv[2]);
  if (nranks < 2 || nranks > 8) return 2;
  signal(SIGALRM, on_alarm);
  alarm(120);
  ncclUniqueId id;
  CHECK_EQ_INT(ncclGetUniqueId(&id), ncclSuccess);
  pthread_barrier_init(&bar, NULL, (unsigned)nranks);
  pthread_t th[8], other;
  struct rank_arg args[8];
  for (int r = 0; r < nranks; r++) {
    args[r] = (struct rank_arg){r, id};
    pthread_create(&th[r], NULL, rank_main, &args[r]);
  }
  /* It starts its work once the ranks are set up (interfere) or rank 0's call waits (abort). */
  pthread_create(&other, NULL, !strcmp(scenario, "interfere") ? interferer : drainer, NULL);
  for (int r = 0; r < nranks; r++) pthread_join(th[r], NULL);
  __atomic_store_n(&ranks_done, 1, __ATOMIC_RELEASE);
  pthread_join(other, NULL);
  CHECK_DONE();
}
