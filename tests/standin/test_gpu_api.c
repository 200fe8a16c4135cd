/* The NCCL API end to end on device buffers, over the CUDA driver stand-in (tests/fakecuda):
 * shunt's GPU backend as libshunt runs it, its kernels run by their CPU build.
 *
 * Usage: test_gpu_api SCENARIO NRANKS
 *   coll       ranks as processes (CUDA IPC): the self-check passes at creation, then allreduce
 *              and reducescatter of every dtype and op (avg and PreMulSum included) and allgather
 *              of every dtype, in place and out of place, at sizes the chunk rule takes and sizes
 *              it does not: exact, and served by plans; reducescatter also on the Simple plans,
 *              whose ranks reach each other's staged input; alltoall of every dtype, in place
 *              and out of place; broadcast from every root, the root
 *              in place, out of place and with partly overlapping buffers, on the LL and Simple
 *              plans; a buffer freed and allocated again serves again
 *   threads    ranks as threads of one process sharing device 0, each on its own stream
 *              (allreduce, allgather, reducescatter in and out of place); at 8
 *              ranks the Simple plans cannot all be resident on the stand-in's device: found
 *              unfit by the self-check, their sizes go to NCCL while the others stay on plans
 *   graph      an allreduce and an allgather captured into one CUDA graph, replayed 100 times
 *              with new inputs each time, a larger eager call growing the world halfway: every
 *              replay exact; then a capture whose call grows the world inside it, replayed
 *   corrupt    the stand-in flips a byte of rank 1's first self-check result: one WARN, every
 *              rank sends device calls to NCCL (exact), nothing hangs
 *   skip       rank 0's first self-check kernel never runs (its signals never come): the
 *              others' bounded waits end, same verdict, within seconds
 *   off        SHUNT_GPU=off (from the environment): device calls go to NCCL
 *   zerocopy   buffers from ncclMemAlloc registered with ncclCommRegister: a plan that reaches
 *              peers' buffers runs on them in place (its staging copies are gone: the stand-in
 *              counts the bytes copied), exactly, in and out of place, for allreduce, allgather
 *              and reducescatter (in place, the input that holds its output); deregistered, the same
 *              buffers are staged again, exactly; windows (ncclCommWindowRegister) likewise;
 *              ncclMemFree gives them back
 *   abort      rank 1 never makes its call; rank 0's kernel waits for it until rank 0 aborts:
 *              the stream drains and ncclCommAbort returns (well within 10 s)
 *   tunefail   in-job tuning (SHUNT_TUNING=auto, a fresh cache) of 1 KiB allreduces, where the
 *              test NCCL behind shunt is fastest but reports an error on rank 1 alone
 *              (FAKE_NCCL_FAIL_RANK=1): NCCL is dropped on both ranks at the same call, so every
 *              call after the tuning runs on a plan on both, exactly, and succeeds
 *   initall    one thread, ncclCommInitAll over NRANKS ranks on as many devices (the stand-in
 *              given FAKECUDA_DEVICES of them: peer access between devices of one process), each
 *              communicator's self-check run, then allreduce and allgather of every communicator
 *              inside one group, as nccl-tests drives several GPUs from one thread
 * The parent makes the id, forks the ranks (or starts the threads) and collects verdicts. */
#include <nccl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/check.h"
#include "common/fork_ranks.h"
#include "fakecuda/fake_cuda_api.h"
#include "shunt/shunt.h"
#include "verify_ref.h"

static const char* scenario;
static int nranks;

static const char* last_plan(ncclComm_t comm) {
  const char* name = NULL;
  if (shuntLastPlan(comm, &name) != 0) return "?";
  return name ? name : "nccl";
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static const ncclDataType_t nccl_dt[SHUNT_DT_COUNT] = {
    ncclInt8,    ncclUint8,   ncclInt32,   ncclUint32,   ncclInt64,      ncclUint64,
    ncclFloat16, ncclFloat32, ncclFloat64, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2};

static unsigned long long dalloc(size_t bytes) {
  unsigned long long d = 0;
  CHECK_EQ_INT(cuMemAlloc_v2(&d, bytes), 0);
  return d;
}

/* Verify's op index `op` as an NCCL op for dt: the builtin, or (5) a PreMulSum made on comm with
 * verify's scalar, which the caller destroys. */
static ncclRedOp_t nccl_op(ncclComm_t comm, enum shunt_dtype dt, int op) {
  ncclRedOp_t rop = (ncclRedOp_t)op;
  if (op == 5) {
    unsigned char scalar[8];
    verify_premul_scalar(dt, scalar);
    CHECK_EQ_INT(ncclRedOpCreatePreMulSum(&rop, scalar, nccl_dt[dt], ncclScalarHostImmediate, comm),
                 ncclSuccess);
  }
  return rop;
}

/* Rank `rank` of comm: an allreduce of `count` elements of dt with verify's op index `op`. */
static void allreduce_case(ncclComm_t comm, int rank, fc_handle st, size_t count, enum shunt_dtype dt, int op,
                           int inplace, int want_plan) {
  uint64_t es = shunt_dtype_size(dt), bytes = count * es;
  char* host = malloc(bytes);
  char* exp = malloc(bytes);
  char* tmp = malloc(bytes);
  verify_fill_input(host, 0, bytes, (uint32_t)rank, (uint32_t)nranks, 7, dt, op, true);
  unsigned long long in = dalloc(bytes), out = inplace ? in : dalloc(bytes);
  CHECK_EQ_INT(cuMemcpyHtoD_v2(in, host, bytes), 0);
  ncclRedOp_t rop = nccl_op(comm, dt, op);
  CHECK_EQ_INT(ncclAllReduce((void*)(uintptr_t)in, (void*)(uintptr_t)out, count, nccl_dt[dt], rop, comm, st),
               ncclSuccess);
  CHECK_EQ_INT(cuStreamSynchronize(st), 0);
  CHECK_EQ_INT(cuMemcpyDtoH_v2(host, out, bytes), 0);
  verify_expected_allreduce(exp, tmp, 0, bytes, (uint32_t)nranks, 7, dt, op);
  size_t bad = 0;
  for (uint64_t i = 0; i < bytes; i++) bad += host[i] != exp[i];
  const char* served = last_plan(comm);
  CHECK_MSG(bad == 0, "rank %d allreduce %zu x %s %s %s: %zu bytes wrong (served by %s)", rank, count,
            verify_dt_names[dt], verify_op_names[op], inplace ? "in place" : "out of place", bad, served);
  if (want_plan)
    CHECK_MSG(strcmp(served, "nccl") != 0, "allreduce %zu x %s went to NCCL", count, verify_dt_names[dt]);
  if (op == 5) ncclRedOpDestroy(rop, comm);
  cuMemFree_v2(in);
  if (!inplace) cuMemFree_v2(out);
  free(host);
  free(exp);
  free(tmp);
}

static void allgather_case(ncclComm_t comm, int rank, fc_handle st, size_t count, enum shunt_dtype dt,
                           int inplace, int want_plan) {
  uint64_t es = shunt_dtype_size(dt), per = count * es, total = per * (uint64_t)nranks;
  char* host = malloc(total);
  unsigned long long out = dalloc(total), in = inplace ? out + per * (uint64_t)rank : dalloc(per);
  for (int r = 0; r < nranks; r++)
    verify_fill_input(host + per * (uint64_t)r, 0, per, (uint32_t)r, (uint32_t)nranks, 3, dt, 0, false);
  CHECK_EQ_INT(cuMemcpyHtoD_v2(in, host + per * (uint64_t)rank, per), 0);
  char* exp = malloc(total);
  memcpy(exp, host, total);
  memset(host, 0, total);
  CHECK_EQ_INT(ncclAllGather((void*)(uintptr_t)in, (void*)(uintptr_t)out, count, nccl_dt[dt], comm, st),
               ncclSuccess);
  CHECK_EQ_INT(cuStreamSynchronize(st), 0);
  CHECK_EQ_INT(cuMemcpyDtoH_v2(host, out, total), 0);
  size_t bad = 0;
  for (uint64_t i = 0; i < total; i++) bad += host[i] != exp[i];
  const char* served = last_plan(comm);
  CHECK_MSG(bad == 0, "rank %d allgather %zu x %s %s: %zu bytes wrong (served by %s)", rank, count,
            verify_dt_names[dt], inplace ? "in place" : "out of place", bad, served);
  if (want_plan)
    CHECK_MSG(strcmp(served, "nccl") != 0, "allgather %zu x %s went to NCCL", count, verify_dt_names[dt]);
  cuMemFree_v2(out);
  if (!inplace) cuMemFree_v2(in);
  free(host);
  free(exp);
}

/* A reducescatter of `count` elements per rank of dt with verify's op index `op`; in place, the
 * output is the rank's slice of the input (NCCL's rule). want_plan: 1 a reducescatter plan. */
static void reducescatter_case(ncclComm_t comm, int rank, fc_handle st, size_t count, enum shunt_dtype dt,
                               int op, int inplace, int want_plan) {
  uint64_t es = shunt_dtype_size(dt), per = count * es, total = per * (uint64_t)nranks;
  char* host = malloc(total);
  char* exp = malloc(per);
  char* tmp = malloc(per);
  verify_fill_input(host, 0, total, (uint32_t)rank, (uint32_t)nranks, 5, dt, op, true);
  unsigned long long in = dalloc(total), out = inplace ? in + per * (uint64_t)rank : dalloc(per);
  CHECK_EQ_INT(cuMemcpyHtoD_v2(in, host, total), 0);
  if (!inplace) {
    memset(tmp, 0xa5, per); /* a sentinel: every byte must be written */
    CHECK_EQ_INT(cuMemcpyHtoD_v2(out, tmp, per), 0);
  }
  ncclRedOp_t rop = nccl_op(comm, dt, op);
  CHECK_EQ_INT(
      ncclReduceScatter((void*)(uintptr_t)in, (void*)(uintptr_t)out, count, nccl_dt[dt], rop, comm, st),
      ncclSuccess);
  CHECK_EQ_INT(cuStreamSynchronize(st), 0);
  CHECK_EQ_INT(cuMemcpyDtoH_v2(host, out, per), 0);
  verify_expected_allreduce(exp, tmp, per * (uint64_t)rank, per, (uint32_t)nranks, 5, dt, op);
  size_t bad = 0;
  for (uint64_t i = 0; i < per; i++) bad += host[i] != exp[i];
  const char* served = last_plan(comm);
  CHECK_MSG(bad == 0, "rank %d reducescatter %zu x %s %s %s: %zu bytes wrong (served by %s)", rank, count,
            verify_dt_names[dt], verify_op_names[op], inplace ? "in place" : "out of place", bad, served);
  if (want_plan)
    CHECK_MSG(strncmp(served, "reducescatter_", 14) == 0, "reducescatter %zu x %s served by %s", count,
              verify_dt_names[dt], served);
  if (op == 5) ncclRedOpDestroy(rop, comm);
  cuMemFree_v2(in);
  if (!inplace) cuMemFree_v2(out);
  free(host);
  free(exp);
  free(tmp);
}

/* A broadcast of `count` elements of dt from `root`: the root in place or not (then, with
 * `overlap`, its output starting 4 bytes into its input: the buffers partly overlap), the
 * other ranks' sendbuff NULL (NCCL reads it on the root only). Every rank's output must be the
 * root's input, on a broadcast plan. */
static void broadcast_case(ncclComm_t comm, int rank, fc_handle st, size_t count, enum shunt_dtype dt,
                           int root, int inplace, int overlap) {
  uint64_t bytes = count * shunt_dtype_size(dt);
  char* host = malloc(bytes);
  char* exp = malloc(bytes);
  verify_fill_input(exp, 0, bytes, (uint32_t)root, (uint32_t)nranks, 11, dt, 0, false);
  unsigned long long buf = dalloc(bytes + 8), in = buf, out = buf;
  if (rank == root && !inplace) {
    out = overlap ? buf + 4 : dalloc(bytes);
    CHECK_EQ_INT(cuMemcpyHtoD_v2(in, exp, bytes), 0);
  } else {
    /* On the root the input; elsewhere what the output held before: anything. */
    verify_fill_input(host, 0, bytes, (uint32_t)rank, (uint32_t)nranks, 11, dt, 0, false);
    CHECK_EQ_INT(cuMemcpyHtoD_v2(out, rank == root ? exp : host, bytes), 0);
  }
  const void* send = rank == root ? (const void*)(uintptr_t)in : NULL;
  CHECK_EQ_INT(ncclBroadcast(send, (void*)(uintptr_t)out, count, nccl_dt[dt], root, comm, st), ncclSuccess);
  CHECK_EQ_INT(cuStreamSynchronize(st), 0);
  CHECK_EQ_INT(cuMemcpyDtoH_v2(host, out, bytes), 0);
  size_t bad = 0;
  for (uint64_t i = 0; i < bytes; i++) bad += host[i] != exp[i];
  const char* served = last_plan(comm);
  CHECK_MSG(bad == 0, "rank %d broadcast %zu x %s from %d%s: %zu bytes wrong (served by %s)", rank, count,
            verify_dt_names[dt], root,
            inplace   ? " in place"
            : overlap ? " overlapping"
                      : "",
            bad, served);
  CHECK_MSG(strncmp(served, "broadcast_", 10) == 0, "broadcast %zu x %s served by %s", count,
            verify_dt_names[dt], served);
  if (out != buf && out != buf + 4) cuMemFree_v2(out);
  cuMemFree_v2(buf);
  free(host);
  free(exp);
}

/* A reduce of `count` elements of dt with verify's op index `op` to `root`: the root in place,
 * out of place or (overlap) with its output 16 bytes into its input; the other ranks pass a NULL
 * recvbuff (they have no output). The root's output must be exact, on a reduce plan. */
static void reduce_case(ncclComm_t comm, int rank, fc_handle st, size_t count, enum shunt_dtype dt, int op,
                        int root, int inplace, int overlap) {
  uint64_t bytes = count * shunt_dtype_size(dt);
  char* host = malloc(bytes);
  char* exp = malloc(bytes);
  char* tmp = malloc(bytes);
  verify_fill_input(host, 0, bytes, (uint32_t)rank, (uint32_t)nranks, 17, dt, op, true);
  unsigned long long buf = dalloc(bytes + 16), in = buf + (rank == root && overlap ? 16 : 0), out = 0;
  if (rank == root) out = inplace ? in : overlap ? buf : dalloc(bytes);
  CHECK_EQ_INT(cuMemcpyHtoD_v2(in, host, bytes), 0);
  ncclRedOp_t rop = nccl_op(comm, dt, op);
  CHECK_EQ_INT(
      ncclReduce((void*)(uintptr_t)in, (void*)(uintptr_t)out, count, nccl_dt[dt], rop, root, comm, st),
      ncclSuccess);
  CHECK_EQ_INT(cuStreamSynchronize(st), 0);
  const char* served = last_plan(comm);
  CHECK_MSG(strncmp(served, "reduce_", 7) == 0, "reduce %zu x %s served by %s", count, verify_dt_names[dt],
            served);
  if (rank == root) {
    CHECK_EQ_INT(cuMemcpyDtoH_v2(host, out, bytes), 0);
    verify_expected_allreduce(exp, tmp, 0, bytes, (uint32_t)nranks, 17, dt, op);
    size_t bad = 0;
    for (uint64_t i = 0; i < bytes; i++) bad += host[i] != exp[i];
    CHECK_MSG(bad == 0, "rank %d reduce %zu x %s %s to %d%s: %zu bytes wrong (served by %s)", rank, count,
              verify_dt_names[dt], verify_op_names[op], root,
              inplace   ? " in place"
              : overlap ? " overlapping"
                        : "",
              bad, served);
  }
  if (op == 5) ncclRedOpDestroy(rop, comm);
  if (out && out != in && out != buf) cuMemFree_v2(out);
  cuMemFree_v2(buf);
  free(host);
  free(exp);
  free(tmp);
}

/* An alltoall of `count` elements of dt to and from each rank, in place (sendbuff == recvbuff)
 * or not: block j of every rank's output is block `rank` of rank j's input, on an alltoall plan. */
static void alltoall_case(ncclComm_t comm, int rank, fc_handle st, size_t count, enum shunt_dtype dt,
                          int inplace) {
  uint64_t blk = count * shunt_dtype_size(dt), total = blk * (uint64_t)nranks;
  char* host = malloc(total);
  char* exp = malloc(total);
  verify_fill_input(host, 0, total, (uint32_t)rank, (uint32_t)nranks, 13, dt, 0, false);
  for (int j = 0; j < nranks; j++)
    verify_fill_input(exp + blk * (uint64_t)j, blk * (uint64_t)rank, blk, (uint32_t)j, (uint32_t)nranks, 13,
                      dt, 0, false);
  unsigned long long in = dalloc(total), out = inplace ? in : dalloc(total);
  CHECK_EQ_INT(cuMemcpyHtoD_v2(in, host, total), 0);
  CHECK_EQ_INT(ncclAlltoAll((void*)(uintptr_t)in, (void*)(uintptr_t)out, count, nccl_dt[dt], comm, st),
               ncclSuccess);
  CHECK_EQ_INT(cuStreamSynchronize(st), 0);
  CHECK_EQ_INT(cuMemcpyDtoH_v2(host, out, total), 0);
  size_t bad = 0;
  for (uint64_t i = 0; i < total; i++) bad += host[i] != exp[i];
  const char* served = last_plan(comm);
  CHECK_MSG(bad == 0, "rank %d alltoall %zu x %s %s: %zu bytes wrong (served by %s)", rank, count,
            verify_dt_names[dt], inplace ? "in place" : "out of place", bad, served);
  CHECK_MSG(strncmp(served, "alltoall_", 9) == 0, "alltoall %zu x %s served by %s", count,
            verify_dt_names[dt], served);
  cuMemFree_v2(in);
  if (!inplace) cuMemFree_v2(out);
  free(host);
  free(exp);
}

/* Every dtype and op, in place and out of place, a size the chunk rule takes (4096 elements)
 * and one it does not (a remainder runs as the padded tail). */
static void every_case(ncclComm_t comm, int rank, fc_handle st, int want_plan) {
  static const size_t counts[] = {4096, 1000 + 3};
  for (int dt = 0; dt < SHUNT_DT_COUNT; dt++)
    for (int k = 0; k < 2; k++) {
      for (int op = 0; op < VERIFY_NOPS; op++) {
        allreduce_case(comm, rank, st, counts[k], shunt_dtype_from_code((uint32_t)dt), op, (op + k) % 2, want_plan);
        reducescatter_case(comm, rank, st, counts[k] / 4 + k, shunt_dtype_from_code((uint32_t)dt), op, (op + k + 1) % 2,
                           want_plan);
      }
      allgather_case(comm, rank, st, counts[k] / 4 + k, shunt_dtype_from_code((uint32_t)dt), k, want_plan);
      allgather_case(comm, rank, st, counts[k] / 4 + k, shunt_dtype_from_code((uint32_t)dt), !k, want_plan);
    }
  /* Reducescatter on the Simple plans (above 1 MiB in all), whose ranks reach each other's
   * staged input: in place and out of place, a remainder among them, sum, avg and PreMulSum. */
  size_t big = ((size_t)1 << 20) / (size_t)nranks / 4 + 7;
  for (int inplace = 0; inplace < 2; inplace++) {
    reducescatter_case(comm, rank, st, big, SHUNT_DT_FLOAT32, 0, inplace, want_plan);
    reducescatter_case(comm, rank, st, big + 1, SHUNT_DT_INT32, 4, inplace, want_plan);
    reducescatter_case(comm, rank, st, big * 2, SHUNT_DT_BFLOAT16, 5, !inplace, want_plan);
  }
  if (!want_plan) return;
  /* Alltoall: every dtype in turn, in place and out of place, blocks on the LL and the Simple
   * plans, remainders among them (both sides' blocks cut into head and padded tail). */
  static const size_t acounts[] = {1000 + 3, ((size_t)1 << 20) / 2 + 9};
  for (int dt = 0; dt < SHUNT_DT_COUNT; dt++)
    alltoall_case(comm, rank, st, acounts[dt % 2] / shunt_dtype_size(shunt_dtype_from_code((uint32_t)dt)),
                  shunt_dtype_from_code((uint32_t)dt), (dt / 2) % 2);
  /* Broadcast from every root, each root in place, out of place and with partly overlapping
   * buffers, every dtype in turn; sizes on the LL and the Simple plans, remainders among them. */
  static const size_t bcounts[] = {1000 + 3, ((size_t)1 << 20) + 5};
  for (int root = 0; root < nranks; root++)
    for (int k = 0; k < 2; k++)
      for (int mode = 0; mode < 3; mode++) {
        enum shunt_dtype dt = shunt_dtype_from_code((uint32_t)((root * 6 + k * 3 + mode) % SHUNT_DT_COUNT));
        uint64_t es = shunt_dtype_size(dt);
        broadcast_case(comm, rank, st, bcounts[k] / es, dt, root, mode == 0, mode == 2);
      }
  /* Reduce to every root, back to back with the collectives above: every dtype and op in turn
   * on the packet plan (a remainder: a padded tail), the root in place, out of place or
   * overlapping; then the Simple plan, a remainder among its sizes. */
  for (int dt = 0; dt < SHUNT_DT_COUNT; dt++)
    for (int op = 0; op < VERIFY_NOPS; op++) {
      int root = (dt + op) % nranks, mode = (dt * VERIFY_NOPS + op) % 3;
      reduce_case(comm, rank, st, 1000 + 3, shunt_dtype_from_code((uint32_t)dt), op, root, mode == 0,
                  mode == 2);
    }
  for (int root = 0; root < nranks; root++)
    reduce_case(comm, rank, st, ((size_t)1 << 20) / 4 + 5, SHUNT_DT_FLOAT32, root % VERIFY_NOPS, root,
                root % 2, 0);
}

static fc_handle setup_device(void) {
  fc_handle ctx = NULL;
  CHECK_EQ_INT(cuInit(0), 0);
  CHECK_EQ_INT(cuDevicePrimaryCtxRetain(&ctx, 0), 0);
  CHECK_EQ_INT(cuCtxSetCurrent(ctx), 0);
  return ctx;
}

static void run_graph(ncclComm_t comm, int rank, fc_handle st) {
  size_t count = 2048, per = 256;
  unsigned long long a = dalloc(count * sizeof(float)), g = dalloc(per * (size_t)nranks * sizeof(int32_t));
  unsigned long long gin = g + per * sizeof(int32_t) * (size_t)rank;
  fc_handle graph = NULL, exec = NULL;
  /* Warm: the programs are uploaded outside the capture. */
  CHECK_EQ_INT(ncclAllReduce((void*)(uintptr_t)a, (void*)(uintptr_t)a, count, ncclFloat, ncclSum, comm, st),
               ncclSuccess);
  CHECK_EQ_INT(ncclAllGather((void*)(uintptr_t)gin, (void*)(uintptr_t)g, per, ncclInt32, comm, st),
               ncclSuccess);
  CHECK_EQ_INT(cuStreamSynchronize(st), 0);
  CHECK_EQ_INT(cuStreamBeginCapture_v2(st, 0), 0);
  CHECK_EQ_INT(ncclAllReduce((void*)(uintptr_t)a, (void*)(uintptr_t)a, count, ncclFloat, ncclSum, comm, st),
               ncclSuccess);
  CHECK_EQ_INT(ncclAllGather((void*)(uintptr_t)gin, (void*)(uintptr_t)g, per, ncclInt32, comm, st),
               ncclSuccess);
  CHECK_EQ_INT(cuStreamEndCapture(st, &graph), 0);
  CHECK_MSG(strcmp(last_plan(comm), "nccl") != 0, "the captured calls went to NCCL");
  CHECK_EQ_INT(cuGraphInstantiateWithFlags(&exec, graph, 0), 0);
  float* fa = malloc(count * sizeof(float));
  int32_t* ga = malloc(per * (size_t)nranks * sizeof(int32_t));
  size_t bad = 0;
  for (int it = 0; it < 100 && exec; it++) {
    /* Halfway, an eager call larger than any before grows the world: the graph, captured on the
     * old one, must go on replaying exactly. */
    if (it == 50) allreduce_case(comm, rank, st, (size_t)3 << 20, SHUNT_DT_FLOAT32, 0, 0, 1);
    for (size_t i = 0; i < count; i++) fa[i] = (float)((rank + 1) * (it % 7 + 1) + (int)(i % 5));
    for (size_t i = 0; i < per; i++) ga[i] = rank * 1000 + it * 10 + (int32_t)(i % 9);
    CHECK_EQ_INT(cuMemcpyHtoD_v2(a, fa, count * sizeof(float)), 0);
    CHECK_EQ_INT(cuMemcpyHtoD_v2(gin, ga, per * sizeof(int32_t)), 0);
    CHECK_EQ_INT(cuGraphLaunch(exec, st), 0);
    CHECK_EQ_INT(cuStreamSynchronize(st), 0);
    CHECK_EQ_INT(cuMemcpyDtoH_v2(fa, a, count * sizeof(float)), 0);
    CHECK_EQ_INT(cuMemcpyDtoH_v2(ga, g, per * (size_t)nranks * sizeof(int32_t)), 0);
    for (size_t i = 0; i < count; i++) {
      float want = 0;
      for (int r = 0; r < nranks; r++) want += (float)((r + 1) * (it % 7 + 1) + (int)(i % 5));
      bad += fa[i] != want;
    }
    for (int r = 0; r < nranks; r++)
      for (size_t i = 0; i < per; i++)
        bad += ga[(size_t)r * per + i] != r * 1000 + it * 10 + (int32_t)(i % 9);
    if (bad) {
      CHECK_MSG(bad == 0, "rank %d: replay %d: %zu elements wrong", rank, it, bad);
      break;
    }
  }
  if (exec) cuGraphExecDestroy(exec);
  if (graph) cuGraphDestroy(graph);
  /* A captured call larger than any before: the world grows inside the capture (in global
   * mode, where an allocation from this thread would invalidate it), then replays exactly. */
  size_t big = (size_t)6 << 20;
  unsigned long long b = dalloc(big * sizeof(float));
  float* hb = malloc(big * sizeof(float));
  graph = exec = NULL;
  CHECK_EQ_INT(cuStreamBeginCapture_v2(st, 0), 0);
  CHECK_EQ_INT(ncclAllReduce((void*)(uintptr_t)b, (void*)(uintptr_t)b, big, ncclFloat, ncclSum, comm, st),
               ncclSuccess);
  CHECK_EQ_INT(cuStreamEndCapture(st, &graph), 0);
  CHECK_MSG(graph != NULL && cuGraphInstantiateWithFlags(&exec, graph, 0) == 0,
            "rank %d: the growing capture failed", rank);
  for (int it = 0; it < 2 && exec; it++) {
    for (size_t i = 0; i < big; i++) hb[i] = (float)((rank + 2) * (it + 1) + (int)(i % 3));
    CHECK_EQ_INT(cuMemcpyHtoD_v2(b, hb, big * sizeof(float)), 0);
    CHECK_EQ_INT(cuGraphLaunch(exec, st), 0);
    CHECK_EQ_INT(cuStreamSynchronize(st), 0);
    CHECK_EQ_INT(cuMemcpyDtoH_v2(hb, b, big * sizeof(float)), 0);
    size_t wrong = 0;
    for (size_t i = 0; i < big; i++) {
      float want = 0;
      for (int r = 0; r < nranks; r++) want += (float)((r + 2) * (it + 1) + (int)(i % 3));
      wrong += hb[i] != want;
    }
    CHECK_MSG(wrong == 0, "rank %d: grown-in-capture replay %d: %zu wrong", rank, it, wrong);
  }
  if (exec) cuGraphExecDestroy(exec);
  if (graph) cuGraphDestroy(graph);
  free(hb);
  cuMemFree_v2(b);
  free(fa);
  free(ga);
  cuMemFree_v2(a);
  cuMemFree_v2(g);
}

/* One float allreduce, allgather or reducescatter (coll ZC_AR, ZC_AG, ZC_RS) on ncclMemAlloc'd
 * buffers, in place when send == recv (NCCL's rule: allgather's input at the rank's slice of
 * the output, reducescatter's output at the rank's slice of the input); the bytes the stand-in
 * copied for it. count: the allreduce's elements, the per-rank count of the others. */
enum { ZC_AR, ZC_AG, ZC_RS };
static const char* const zc_names[] = {"allreduce", "allgather", "reducescatter"};
static long long zc_call(ncclComm_t comm, int rank, fc_handle st, void* send, void* recv, size_t count,
                         int coll, int salt) {
  size_t in_n = coll == ZC_RS ? count * (size_t)nranks : count;
  size_t out_n = coll == ZC_AG ? count * (size_t)nranks : count;
  float* h = malloc((in_n > out_n ? in_n : out_n) * sizeof(float));
  /* Rank r's input element i: (r + 1) x (salt + 2) + i % 17. */
  for (size_t i = 0; i < in_n; i++) h[i] = (float)((rank + 1) * (salt + 2) + (int)(i % 17));
  void* in = send;
  void* out = recv;
  if (send == recv && coll == ZC_AG) in = (char*)recv + count * sizeof(float) * (size_t)rank;
  if (send == recv && coll == ZC_RS) out = (char*)send + count * sizeof(float) * (size_t)rank;
  CHECK_EQ_INT(cuMemcpyHtoD_v2((uintptr_t)in, h, in_n * sizeof(float)), 0);
  long long before = fakecuda_copied_bytes();
  if (coll == ZC_AG)
    CHECK_EQ_INT(ncclAllGather(in, out, count, ncclFloat, comm, st), ncclSuccess);
  else if (coll == ZC_RS)
    CHECK_EQ_INT(ncclReduceScatter(in, out, count, ncclFloat, ncclSum, comm, st), ncclSuccess);
  else
    CHECK_EQ_INT(ncclAllReduce(in, out, count, ncclFloat, ncclSum, comm, st), ncclSuccess);
  CHECK_EQ_INT(cuStreamSynchronize(st), 0);
  long long moved = fakecuda_copied_bytes() - before;
  CHECK_MSG(strcmp(last_plan(comm), "nccl") != 0, "rank %d: the call went to NCCL", rank);
  CHECK_EQ_INT(cuMemcpyDtoH_v2(h, (uintptr_t)out, out_n * sizeof(float)), 0);
  size_t bad = 0;
  for (size_t i = 0; i < out_n; i++) {
    float want = 0;
    if (coll == ZC_AG) {
      want = (float)(((int)(i / count) + 1) * (salt + 2) + (int)(i % count % 17));
    } else {
      size_t at = coll == ZC_RS ? count * (size_t)rank + i : i;
      for (int r = 0; r < nranks; r++) want += (float)((r + 1) * (salt + 2) + (int)(at % 17));
    }
    bad += h[i] != want;
  }
  CHECK_MSG(bad == 0, "rank %d: %s of %zu floats on registered memory: %zu wrong", rank, zc_names[coll],
            count, bad);
  free(h);
  return moved;
}

static void run_zerocopy(ncclComm_t comm, int rank, fc_handle st) {
  /* Sizes the Simple plans serve (they read peers' buffers; the scratch plans below them stage
   * nothing either way); the stand-in copies nothing else. */
  size_t count = (size_t)9 << 18, bytes = count * sizeof(float) * (size_t)nranks;
  void *send = NULL, *recv = NULL, *hs = NULL, *hr = NULL;
  CHECK_EQ_INT(ncclMemAlloc(&send, bytes), ncclSuccess);
  CHECK_EQ_INT(ncclMemAlloc(&recv, bytes), ncclSuccess);
  if (!send || !recv) return;
  for (int coll = ZC_AR; coll <= ZC_RS; coll++) {
    /* Reducescatter's input is ranks x its count: count / ranks keeps it inside the buffers,
     * and above the Simple plans' 1 MiB. */
    size_t n = coll == ZC_RS ? count / (size_t)nranks : count;
    long long staged = zc_call(comm, rank, st, send, recv, n, coll, 0);
    CHECK_EQ_INT(ncclCommRegister(comm, send, bytes, &hs), ncclSuccess);
    CHECK_EQ_INT(ncclCommRegister(comm, recv, bytes, &hr), ncclSuccess);
    long long zc = zc_call(comm, rank, st, send, recv, n, coll, 1);
    long long zc_inplace = zc_call(comm, rank, st, recv, recv, n, coll, 2);
    /* Inside the registrations, at the same offsets on every rank (NCCL's rule). */
    long long zc_off = zc_call(comm, rank, st, (char*)send + 4096, (char*)recv + 8192, n - 4096, coll, 4);
    CHECK_MSG(zc_off < staged / 2, "rank %d: %s at an offset, %lld bytes copied (staged whole: %lld)", rank,
              zc_names[coll], zc_off, staged);
    CHECK_MSG(staged >= (long long)(n * sizeof(float)) && zc + (long long)(n * sizeof(float)) <= staged,
              "rank %d: %s copied %lld bytes staged and %lld registered: no staging saved", rank,
              zc_names[coll], staged, zc);
    CHECK_MSG(zc_inplace + (long long)(n * sizeof(float)) <= staged,
              "rank %d: %s in place on registered memory copied %lld bytes (staged: %lld)", rank,
              zc_names[coll], zc_inplace, staged);
    CHECK_EQ_INT(ncclCommDeregister(comm, hs), ncclSuccess);
    CHECK_EQ_INT(ncclCommDeregister(comm, hr), ncclSuccess);
    long long again = zc_call(comm, rank, st, send, recv, n, coll, 3);
    /* The first staged call also uploaded its programs: the same staging, and nothing more. */
    CHECK_MSG(again >= (long long)(n * sizeof(float)) && again <= staged,
              "rank %d: deregistered, %lld bytes copied (first time: %lld)", rank, again, staged);
  }
  /* Freed and allocated again at the same address without deregistering: never served from
   * the stale mappings (staged, exactly). */
  CHECK_EQ_INT(ncclCommRegister(comm, send, bytes, &hs), ncclSuccess);
  CHECK_EQ_INT(ncclCommRegister(comm, recv, bytes, &hr), ncclSuccess);
  zc_call(comm, rank, st, send, recv, count, 0, 7); /* exchanged and mapped */
  CHECK_EQ_INT(fakecuda_replace(recv), 0);          /* freed, and allocated again at that address */
  long long stale = zc_call(comm, rank, st, send, recv, count, 0, 8);
  CHECK_MSG(stale >= (long long)(count * sizeof(float)),
            "rank %d: a stale registration was used (%lld bytes copied)", rank, stale);
  CHECK_EQ_INT(ncclCommDeregister(comm, hs), ncclSuccess);
  CHECK_EQ_INT(ncclCommDeregister(comm, hr), ncclSuccess);
  /* Windows (collective registration) reach the same zero-copy path. */
  ncclWindow_t ws = NULL, wr = NULL;
  long long staged = zc_call(comm, rank, st, send, recv, count, 0, 5);
  CHECK_EQ_INT(ncclCommWindowRegister(comm, send, bytes, &ws, 0), ncclSuccess);
  CHECK_EQ_INT(ncclCommWindowRegister(comm, recv, bytes, &wr, 0), ncclSuccess);
  long long zc = zc_call(comm, rank, st, send, recv, count, 0, 6);
  CHECK_MSG(zc + (long long)(count * sizeof(float)) <= staged,
            "rank %d: windows: %lld bytes copied (staged: %lld)", rank, zc, staged);
  CHECK_EQ_INT(ncclCommWindowDeregister(comm, ws), ncclSuccess);
  CHECK_EQ_INT(ncclCommWindowDeregister(comm, wr), ncclSuccess);
  CHECK_EQ_INT(ncclMemFree(send), ncclSuccess);
  CHECK_EQ_INT(ncclMemFree(recv), ncclSuccess);
}

/* Float sums through whatever serves them; want_plan: 1 a plan, 0 NCCL. */
static void float_sums(ncclComm_t comm, int rank, fc_handle st, int want_plan) {
  allreduce_case(comm, rank, st, 4096, SHUNT_DT_FLOAT32, 0, 0, want_plan);
  const char* served = last_plan(comm);
  if (!want_plan)
    CHECK_MSG(strcmp(served, "nccl") == 0, "rank %d: a plan (%s) served after the verdict", rank, served);
}

static double cpu_s(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

/* A communicator between calls costs no CPU: its proxy sleeps once every execution it was told
 * of has ended, and the next launch wakes it (a port plan here, so the call needs the proxy). */
static void run_idle(ncclComm_t comm, int rank, fc_handle st) {
  for (int round = 0; round < 3; round++) {
    allreduce_case(comm, rank, st, 4096, SHUNT_DT_FLOAT32, 0, round % 2, 1);
    const char* served = last_plan(comm);
    CHECK_MSG(strstr(served, "_port_") != NULL, "rank %d: %s served, not a port plan", rank, served);
    CHECK_EQ_INT(cuStreamSynchronize(st), 0);
    usleep(50000); /* past the proxy's spinning after its last trigger */
    double c0 = cpu_s(), t0 = now_s();
    usleep(400000);
    double busy = (cpu_s() - c0) / (now_s() - t0);
    CHECK_MSG(busy < 0.05, "rank %d: %.0f %% of a CPU used by an idle communicator", rank, busy * 100);
  }
}

/* 1 KiB allreduces until tuning is over: rank 1's NCCL calls fail (its user calls then too);
 * then every call is a plan's, exact, on both ranks. */
static void run_tunefail(ncclComm_t comm, int rank, fc_handle st) {
  const size_t count = 256;
  unsigned long long d = dalloc(count * sizeof(float));
  float h[256];
  int failed = 0;
  for (int i = 0; i < 40; i++) {
    for (size_t k = 0; k < count; k++) h[k] = (float)(rank + 1 + (int)(k % 5));
    CHECK_EQ_INT(cuMemcpyHtoD_v2(d, h, sizeof(h)), 0);
    failed += ncclAllReduce((void*)(uintptr_t)d, (void*)(uintptr_t)d, count, ncclFloat, ncclSum, comm, st) !=
              ncclSuccess;
    CHECK_EQ_INT(cuStreamSynchronize(st), 0);
  }
  CHECK_MSG(rank == 1 ? failed > 0 : failed == 0, "rank %d: %d of 40 calls failed", rank, failed);
  for (int i = 0; i < 5; i++) {
    for (size_t k = 0; k < count; k++) h[k] = (float)(rank + 1 + (int)(k % 5));
    CHECK_EQ_INT(cuMemcpyHtoD_v2(d, h, sizeof(h)), 0);
    CHECK_EQ_INT(ncclAllReduce((void*)(uintptr_t)d, (void*)(uintptr_t)d, count, ncclFloat, ncclSum, comm, st),
                 ncclSuccess);
    CHECK_EQ_INT(cuStreamSynchronize(st), 0);
    const char* served = last_plan(comm);
    CHECK_MSG(strcmp(served, "nccl") != 0, "rank %d: NCCL still serves after failing on rank 1", rank);
    CHECK_EQ_INT(cuMemcpyDtoH_v2(h, d, sizeof(h)), 0);
    size_t bad = 0;
    for (size_t k = 0; k < count; k++) bad += h[k] != (float)(3 + 2 * (int)(k % 5));
    CHECK_MSG(bad == 0, "rank %d: %zu wrong after tuning", rank, bad);
  }
  cuMemFree_v2(d);
}

/* The driver refuses the next launch of the executor kernel on every rank: the call fails with
 * that CUDA error, named with the call that returned it, as the WARN and the last error say. */
static void run_refused(ncclComm_t comm, fc_handle st) {
  char spec[32];
  snprintf(spec, sizeof(spec), "refuse:%ld", fakecuda_exec_calls() + 1);
  fakecuda_fault(spec);
  unsigned long long a = dalloc(4096 * sizeof(float));
  ncclResult_t rc =
      ncclAllReduce((void*)(uintptr_t)a, (void*)(uintptr_t)a, 4096, ncclFloat, ncclSum, comm, st);
  CHECK_EQ_INT(rc, ncclInternalError);
  const char* last = ncclGetLastError(comm);
  const char* tail = last ? strstr(last, " failed: ") : NULL;
  CHECK_MSG(
      tail && !strcmp(tail,
                      " failed: cuLaunchKernel(exec): CUDA_ERROR_LAUNCH_FAILED (unspecified launch failure)"),
      "the last error names no refused launch: %s", last ? last : "(none)");
  ncclResult_t st_rc = ncclSuccess;
  CHECK_EQ_INT(ncclCommGetAsyncError(comm, &st_rc), ncclSuccess);
  CHECK_EQ_INT(st_rc, ncclInternalError);
  CHECK_EQ_INT(cuStreamSynchronize(st), 0);
}

static int run_rank(int rank, ncclUniqueId id) {
  setup_device();
  if (!strcmp(scenario, "corrupt") && rank == 1) fakecuda_fault("corrupt:1");
  if (!strcmp(scenario, "skip") && rank == 0) fakecuda_fault("skip:1");
  ncclComm_t comm = NULL;
  double t0 = now_s();
  CHECK_EQ_INT(ncclCommInitRank(&comm, nranks, id, rank), ncclSuccess);
  double init_s = now_s() - t0;
  if (!comm) CHECK_DONE();
  int on = -2;
  CHECK_EQ_INT(shuntGpuExecutor(comm, &on), 0);
  int fails = !strcmp(scenario, "corrupt") || !strcmp(scenario, "skip") || !strcmp(scenario, "off");
  CHECK_MSG(on == (fails ? 0 : 1), "rank %d: the GPU executor is %d for scenario %s", rank, on, scenario);
  fc_handle st = NULL;
  CHECK_EQ_INT(cuStreamCreate(&st, 1), 0);
  if (!strcmp(scenario, "coll")) {
    every_case(comm, rank, st, 1);
    /* A freed buffer's address given out again serves again. */
    for (int i = 0; i < 3; i++) allreduce_case(comm, rank, st, 3000, SHUNT_DT_INT32, 0, i % 2, 1);
  } else if (!strcmp(scenario, "graph")) {
    run_graph(comm, rank, st);
  } else if (!strcmp(scenario, "idle")) {
    run_idle(comm, rank, st);
  } else if (!strcmp(scenario, "zerocopy")) {
    run_zerocopy(comm, rank, st);
  } else if (!strcmp(scenario, "tunefail")) {
    run_tunefail(comm, rank, st);
  } else if (!strcmp(scenario, "corrupt") || !strcmp(scenario, "skip") || !strcmp(scenario, "off")) {
    float_sums(comm, rank, st, 0);
    CHECK_MSG(init_s < 20, "rank %d: creation with the failing self-check took %.1f s", rank, init_s);
  } else if (!strcmp(scenario, "refuse")) {
    run_refused(comm, st);
  } else if (!strcmp(scenario, "abort")) {
    float_sums(comm, rank, st, 1);
    if (rank == 0) {
      unsigned long long a = dalloc(4096 * sizeof(float));
      CHECK_EQ_INT(
          ncclAllReduce((void*)(uintptr_t)a, (void*)(uintptr_t)a, 4096, ncclFloat, ncclSum, comm, st),
          ncclSuccess);
      usleep(300000); /* the kernel is now waiting for rank 1, which never comes */
      double a0 = now_s();
      CHECK_EQ_INT(ncclCommAbort(comm), ncclSuccess);
      CHECK_EQ_INT(cuStreamSynchronize(st), 0);
      /* Generous: 64 device threads per rank share two cores here; a hang would be minutes. */
      CHECK_MSG(now_s() - a0 < 10.0, "abort and drain took %.2f s", now_s() - a0);
      comm = NULL;
    } else {
      usleep(2000000); /* stays alive, never calls */
    }
  }
  if (comm) CHECK_EQ_INT(ncclCommDestroy(comm), ncclSuccess);
  cuStreamDestroy_v2(st);
  CHECK_DONE();
}

/* Ranks as threads of one process, sharing device 0. */
struct thread_arg {
  int rank;
  ncclUniqueId id;
  int failures;
};

static void* thread_main(void* p) {
  struct thread_arg* a = p;
  setup_device();
  ncclComm_t comm = NULL;
  int on = -2;
  if (ncclCommInitRank(&comm, nranks, a->id, a->rank) != ncclSuccess || !comm ||
      shuntGpuExecutor(comm, &on) != 0 || on != 1) {
    fprintf(stderr, "rank %d: no communicator on the GPU executor (%d)\n", a->rank, on);
    a->failures = 1;
    return NULL;
  }
  fc_handle st = NULL;
  cuStreamCreate(&st, 1);
  int before = __atomic_load_n(&check_failures, __ATOMIC_RELAXED);
  for (int k = 0; k < 2; k++) {
    allreduce_case(comm, a->rank, st, 4096 + (size_t)k * 5, SHUNT_DT_FLOAT32, 0, k, 1);
    allreduce_case(comm, a->rank, st, 1000, SHUNT_DT_BFLOAT16, 4, !k, 1);
    allgather_case(comm, a->rank, st, 1024 + (size_t)k, SHUNT_DT_INT32, k, 1);
    /* (at 8 ranks, one: each call costs eight ranks of CPU-run kernels on two cores) */
    if (nranks < 8 || k)
      reducescatter_case(comm, a->rank, st, 1000 + (size_t)k, SHUNT_DT_FLOAT32, k ? 4 : 0, k, 1);
  }
  if (nranks == 8) {
    /* The stand-in holds 128 blocks: 8 ranks of the 32-block Simple plans do not fit. The
     * self-check found them unfit, so their sizes go to NCCL, exactly, while LL sizes stay. */
    allreduce_case(comm, a->rank, st, (size_t)9 << 18, SHUNT_DT_FLOAT32, 0, 0, 0);
    CHECK_MSG(strcmp(last_plan(comm), "nccl") == 0, "an unfit plan (%s) served 9 MiB", last_plan(comm));
    allreduce_case(comm, a->rank, st, 4096, SHUNT_DT_FLOAT32, 0, 0, 1);
  }
  a->failures = __atomic_load_n(&check_failures, __ATOMIC_RELAXED) != before;
  ncclCommDestroy(comm);
  cuStreamDestroy_v2(st);
  return NULL;
}

static int run_threads(void) {
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) return 1;
  pthread_t th[16];
  struct thread_arg args[16];
  for (int r = 0; r < nranks; r++) {
    args[r] = (struct thread_arg){r, id, 0};
    pthread_create(&th[r], NULL, thread_main, &args[r]);
  }
  int failed = 0;
  for (int r = 0; r < nranks; r++) {
    pthread_join(th[r], NULL);
    failed |= args[r].failures;
  }
  return failed || check_failures;
}

/* One thread drives every rank: ncclCommInitAll, then each collective as one group. */
static int run_initall(void) {
  setup_device();
  ncclComm_t comms[16] = {0};
  CHECK_EQ_INT(ncclCommInitAll(comms, nranks, NULL), ncclSuccess);
  fc_handle st[16] = {0};
  unsigned long long a[16] = {0}, g[16] = {0};
  size_t count = 3000, per = 1000;
  for (int r = 0; r < nranks; r++) {
    int on = -2;
    CHECK_EQ_INT(shuntGpuExecutor(comms[r], &on), 0);
    CHECK_MSG(on == 1, "rank %d: the GPU executor is %d", r, on);
    fc_handle ctx = NULL; /* rank r's device is r (ncclCommInitAll without a list) */
    CHECK_EQ_INT(cuDevicePrimaryCtxRetain(&ctx, r), 0);
    CHECK_EQ_INT(cuCtxSetCurrent(ctx), 0);
    CHECK_EQ_INT(cuStreamCreate(&st[r], 1), 0);
    a[r] = dalloc(count * sizeof(float));
    g[r] = dalloc(per * (size_t)nranks * sizeof(int32_t));
    float* h = malloc(count * sizeof(float));
    int32_t* gi = malloc(per * sizeof(int32_t));
    for (size_t i = 0; i < count; i++) h[i] = (float)(r * 5 + (int)(i % 11));
    for (size_t i = 0; i < per; i++) gi[i] = r * 7919 + (int32_t)i;
    CHECK_EQ_INT(cuMemcpyHtoD_v2(a[r], h, count * sizeof(float)), 0);
    CHECK_EQ_INT(cuMemcpyHtoD_v2(g[r] + per * sizeof(int32_t) * (size_t)r, gi, per * sizeof(int32_t)), 0);
    free(h);
    free(gi);
  }
  CHECK_EQ_INT(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < nranks; r++) {
    CHECK_EQ_INT(ncclAllReduce((void*)(uintptr_t)a[r], (void*)(uintptr_t)a[r], count, ncclFloat, ncclSum,
                               comms[r], st[r]),
                 ncclSuccess);
    void* gin = (void*)(uintptr_t)(g[r] + per * sizeof(int32_t) * (size_t)r);
    CHECK_EQ_INT(ncclAllGather(gin, (void*)(uintptr_t)g[r], per, ncclInt32, comms[r], st[r]), ncclSuccess);
  }
  CHECK_EQ_INT(ncclGroupEnd(), ncclSuccess);
  size_t bad = 0;
  float* h = malloc(count * sizeof(float));
  int32_t* gall = malloc(per * (size_t)nranks * sizeof(int32_t));
  for (int r = 0; r < nranks; r++) {
    CHECK_EQ_INT(cuStreamSynchronize(st[r]), 0);
    CHECK_MSG(strcmp(last_plan(comms[r]), "nccl") != 0, "rank %d: the group went to NCCL", r);
    CHECK_EQ_INT(cuMemcpyDtoH_v2(h, a[r], count * sizeof(float)), 0);
    CHECK_EQ_INT(cuMemcpyDtoH_v2(gall, g[r], per * (size_t)nranks * sizeof(int32_t)), 0);
    for (size_t i = 0; i < count; i++) {
      float want = 0;
      for (int q = 0; q < nranks; q++) want += (float)(q * 5 + (int)(i % 11));
      bad += h[i] != want;
    }
    for (int q = 0; q < nranks; q++)
      for (size_t i = 0; i < per; i++) bad += gall[(size_t)q * per + i] != q * 7919 + (int32_t)i;
  }
  CHECK_MSG(bad == 0, "%zu elements wrong after the group", bad);
  free(h);
  free(gall);
  for (int r = 0; r < nranks; r++) {
    CHECK_EQ_INT(ncclCommDestroy(comms[r]), ncclSuccess);
    cuMemFree_v2(a[r]);
    cuMemFree_v2(g[r]);
    cuStreamDestroy_v2(st[r]);
  }
  CHECK_DONE();
}

static int rank_main(int rank, const ncclUniqueId* ids) {
  return run_rank(rank, ids[0]);
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: test_gpu_api SCENARIO NRANKS\n");
    return 2;
  }
  scenario = argv[1];
  nranks = atoi(argv[2]);
  if (nranks < 1 || nranks > 16) return 2;
  if (!strcmp(scenario, "threads")) return run_threads();
  if (!strcmp(scenario, "initall")) return run_initall();
  char cache[] = "/tmp/shunt-tunefail-XXXXXX";
  if (!strcmp(scenario, "tunefail")) {
    /* A cache of its own, empty: every run tunes (and so meets the failure) afresh. */
    if (!mkdtemp(cache)) return 2;
    setenv("SHUNT_TUNING_CACHE", cache, 1);
  }
  /* exit, not _exit: leak checks and coverage run in every rank */
  int rc = fork_ranks(nranks, 1, 1, rank_main);
  if (!strcmp(scenario, "tunefail")) {
    char cmd[64];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", cache);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", cache);
  }
  return rc;
}
