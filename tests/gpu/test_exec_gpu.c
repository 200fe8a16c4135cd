/* The GPU backend end to end, ranks as threads of one process on one GPU: every plan given
 * (the shipped folder and extra files: allreduce, allgather, reducescatter, alltoall, broadcast)
 * is lowered per rank and run as the plan is written (in place or out of place; a broadcast
 * plan, which serves both, for its root in each mode and renamed for another root in place):
 *   - eagerly, for every dtype and op it serves, at one small size (its range opened, as the
 *     host matrix test does), two executions each, every output byte checked on the host;
 *   - eagerly at the edges of its own size range (float32 sum / int8);
 *   - captured in a CUDA graph (poison output, restore input, collective, compare on the
 *     device) and replayed many times back to back, every replay checked on the device.
 * The reference is the host backend's: small integer inputs, so every summation order is exact,
 * each contribution scaled once for avg and PreMulSum, integer avg divided at the end. The
 * reducing collectives (allreduce, reducescatter) run every dtype and op; allgather and alltoall
 * every dtype; broadcast, whose roots and modes multiply its runs, its base dtype only (it moves
 * bytes, as the others' dtype rows already check).
 * Exits 77 when there is no GPU. Usage: test_exec_gpu PLAN_DIR [PLAN_FILE...] */
#include <cuda_runtime_api.h>
#include <dirent.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exec/elem.h"
#include "transport/cu.h"
#include "exec/gpu/gpu_kernels.h"
#include "exec/gpu/gpu_run.h"
#include "exec/gpu/gpu_world.h"
#include "exec/lower.h"
#include "exec/split.h"
#include "exec/ops/dtype.h"
#include "gpu/test_exec_gpu.h"
#include "verify_ref.h"
#include "plan/parse.h"
#include "plan/rotate.h"
#include "transport/world.h"

#define MAXR 8
#define SLOT 8192
#define MATRIX_BYTES 28672u
#define RANGE_CAP (2ull << 20)
#define EAGER_ITERS 2
#define REPLAYS 50
#define MAX_SHAPES 128
#define MSG 2048

/* SHUNT_GPU_TEST_QUICK=1 (under compute-sanitizer, which runs kernels far slower): of the
 * dtype/op matrix only the base dtype's sum and, for allreduce, int8 avg and float16
 * premulsum (the runs that add the scaling kernels), and a few graph replays. */
static bool quick;
static unsigned replays_per_graph = REPLAYS;

/* ---- Ranks as threads: barrier and allgather for the world's creation ---- */

struct team {
  uint32_t n;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  unsigned arrived, gen;
  bool any_bad, all_ok; /* team_agree: this generation's votes, the last generation's result */
  char slots[MAXR][SLOT];
};
static struct team team = {0, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, false, true, {{0}}};

static int team_barrier(void* ctx) {
  (void)ctx;
  pthread_mutex_lock(&team.mu);
  unsigned g = team.gen;
  if (++team.arrived == team.n) {
    team.arrived = 0;
    team.gen++;
    pthread_cond_broadcast(&team.cv);
  } else {
    while (g == team.gen) pthread_cond_wait(&team.cv, &team.mu);
  }
  pthread_mutex_unlock(&team.mu);
  return 0;
}

/* A barrier that also tells every rank whether all of them are fine, so that ranks decide
 * together whether to launch: a rank that launched alone would only wait for its peers until the
 * timeout. The result cannot be overwritten before every waiter has read it, since the next
 * generation needs every rank to arrive. */
static bool team_agree(bool ok) {
  pthread_mutex_lock(&team.mu);
  unsigned g = team.gen;
  if (!ok) team.any_bad = true;
  if (++team.arrived == team.n) {
    team.all_ok = !team.any_bad;
    team.any_bad = false;
    team.arrived = 0;
    team.gen++;
    pthread_cond_broadcast(&team.cv);
  } else {
    while (g == team.gen) pthread_cond_wait(&team.cv, &team.mu);
  }
  bool r = team.all_ok;
  pthread_mutex_unlock(&team.mu);
  return r;
}

struct shape {
  uint64_t total, in, out;
  enum shunt_dtype dt;
  enum shunt_redop op;
  bool graph;
};

struct job {
  const struct shunt_plan* plan;
  uint32_t nranks, threads;
  bool inplace;     /* the calls' mode: the plan's own, or each of a broadcast's */
  const char* what; /* a broadcast's root and mode ("root R in place, "), else "" */
  struct shape shapes[MAX_SHAPES];
  unsigned nshapes;
  uint64_t max_in, max_out, scratch;
  uint64_t tail_bytes; /* device staging of the split shapes' tails */
  /* The reference output, each rank computing a slice (reducescatter: every rank's output, as
   * long as the input); alltoall and broadcast ranks compute their own, in rank_main. */
  char* exp;
  atomic_uint failures;
  pthread_mutex_t msg_mu;
  char msg[MSG];
  unsigned runs, replays;
};

struct rank_ctx {
  uint32_t rank;
  struct job* job;
};

static int team_allgather(void* ctx, void* buf, size_t bytes) {
  uint32_t r = ((struct rank_ctx*)ctx)->rank;
  if (bytes > SLOT) return -1;
  memcpy(team.slots[r], (char*)buf + (size_t)r * bytes, bytes);
  team_barrier(ctx);
  for (uint32_t k = 0; k < team.n; k++) memcpy((char*)buf + (size_t)k * bytes, team.slots[k], bytes);
  return team_barrier(ctx);
}

static void fail(struct job* J, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(struct job* J, const char* fmt, ...) {
  pthread_mutex_lock(&J->msg_mu);
  unsigned n = atomic_fetch_add(&J->failures, 1);
  va_list ap;
  va_start(ap, fmt);
  if (n == 0) {
    vsnprintf(J->msg, sizeof(J->msg), fmt, ap);
  } else if (n < 8) {
    /* The first failure is often a consequence (a world another rank broke): show the rest. */
    fprintf(stderr, "  also: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
  }
  va_end(ap);
  pthread_mutex_unlock(&J->msg_mu);
}

/* ---- Values and the reference ---- */

/* Inputs and the reference are shunt-plan verify's (tools/shunt-plan/verify_ref.h): small
 * integers, so every summation order is exact, each contribution scaled once for avg and
 * PreMulSum, integer avg divided at the end. */
/* This rank's share of the reference for one execution, and where its own output's reference
 * lies once every rank has written its share: in J->exp (allreduce, allgather, reducescatter),
 * or in `mine`, which the rank fills alone (alltoall: block j is block `rank` of rank j's
 * input; broadcast: the root's input). tmp holds s->out bytes. */
static const char* expected_slice(struct job* J, const struct shape* s, uint32_t rank, unsigned seed,
                                  const char* my_in, char* tmp, char* mine) {
  enum shunt_coll coll = J->plan->coll;
  enum shunt_dtype dt = s->dt;
  if (coll == SHUNT_COLL_ALLREDUCE) {
    uint32_t es = shunt_dtype_size(dt);
    uint64_t nel = s->out / es, lo = nel * rank / J->nranks * es, hi = nel * (rank + 1) / J->nranks * es;
    verify_expected_allreduce(J->exp + lo, tmp, lo, hi - lo, J->nranks, seed, dt, s->op);
    return J->exp;
  }
  if (coll == SHUNT_COLL_REDUCESCATTER) {
    /* The rank's output: the reduction of every rank's slice `rank`, at that slice. */
    uint64_t lo = (uint64_t)rank * s->out;
    verify_expected_allreduce(J->exp + lo, tmp, lo, s->out, J->nranks, seed, dt, s->op);
    return J->exp + lo;
  }
  if (coll == SHUNT_COLL_ALLTOALL) {
    uint64_t blk = s->in / J->nranks;
    for (uint32_t j = 0; j < J->nranks; j++)
      verify_fill_input(mine + (uint64_t)j * blk, (uint64_t)rank * blk, blk, j, J->nranks, seed, dt, s->op,
                        false);
    return mine;
  }
  if (coll == SHUNT_COLL_BROADCAST) {
    verify_fill_input(mine, 0, s->out, J->plan->root, J->nranks, seed, dt, s->op, false);
    return mine;
  }
  memcpy(J->exp + (uint64_t)rank * s->in, my_in, s->in);
  return J->exp;
}

/* ---- One rank ---- */

#define CK(x)                                                                                  \
  do {                                                                                         \
    cudaError_t e_ = (x);                                                                      \
    if (e_ != cudaSuccess) {                                                                   \
      fail(J, "rank %u: %s:%d: %s: %s", rank, __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      ok = false;                                                                              \
    }                                                                                          \
  } while (0)

static void check_world(struct job* J, struct shunt_gpu_world* w, const struct shunt_program* p,
                        uint32_t rank, const struct shape* s, const char* when, bool* ok) {
  char err[1024];
  if (shunt_gpu_world_check(w, p, err, sizeof(err)) != SHUNT_OK) {
    fail(J, "%s, %s%" PRIu64 " bytes, %s %s, %s: rank %u: %s", J->plan->name, J->what, s->total,
         verify_dt_names[s->dt], verify_op_names[s->op], when, rank, err);
    *ok = false;
  }
}

/* A size the chunk rule does not take, run as the library runs it (exec/split.h, the backend's
 * run_call): the head on the user's buffers (an allgather head keeps the output's rank stride,
 * a reducescatter head the input's, an alltoall head both), then the tail padded with zeros
 * through d_tail (in place, one tail buffer inside the other, as the call's are), its results
 * copied back. Every step is a stream operation. */
static int launch_split(struct shunt_gpu_world* w, const struct shunt_split* sp, const struct shape* s,
                        const struct shunt_plan* plan, uint32_t rank, bool inplace,
                        struct shunt_gpu_prog* head, struct shunt_gpu_prog* tail, const char* user_in,
                        char* user_out, char* d_tail, const char* scalar, cudaStream_t st, char* err,
                        size_t len) {
  uint64_t q = sp->quantum;
  if (sp->head) {
    struct shunt_gpu_run r = {w, head, user_in, user_out, scalar, 0, false, NULL, NULL, 0, 0, false};
    if (shunt_gpu_launch(&r, st, err, len) != 0) return -1;
  }
  if (!sp->rest) return 0;
  uint32_t nin = sp->in_slices, nout = sp->out_slices;
  uint64_t rin = s->in / nin, rout = s->out / nout;
  char* tin = d_tail + shunt_split_tail_in(plan, sp, rank, inplace);
  char* tout = d_tail + shunt_split_tail_out(plan, sp, rank, inplace);
  if (cudaMemsetAsync(d_tail, 0, sp->tail_bytes, st) != cudaSuccess) {
    snprintf(err, len, "tail staging failed");
    return -1;
  }
  for (uint32_t k = 0; k < nin; k++)
    if (cudaMemcpyAsync(tin + (uint64_t)k * q, user_in + (uint64_t)k * rin + sp->head, sp->rest,
                        cudaMemcpyDeviceToDevice, st) != cudaSuccess) {
      snprintf(err, len, "tail staging failed");
      return -1;
    }
  struct shunt_gpu_run r = {w, tail, tin, tout, scalar, 0, false, NULL, NULL, 0, 0, false};
  if (shunt_gpu_launch(&r, st, err, len) != 0) return -1;
  for (uint32_t k = 0; k < nout; k++)
    if (cudaMemcpyAsync(user_out + (uint64_t)k * rout + sp->head, tout + (uint64_t)k * q, sp->rest,
                        cudaMemcpyDeviceToDevice, st) != cudaSuccess) {
      snprintf(err, len, "tail copy-out failed");
      return -1;
    }
  return 0;
}

static void* rank_main(void* arg) {
  struct rank_ctx* rc = arg;
  struct job* J = rc->job;
  const struct shunt_plan* plan = J->plan;
  uint32_t rank = rc->rank;
  bool rs = plan->coll == SHUNT_COLL_REDUCESCATTER;
  bool a2a = plan->coll == SHUNT_COLL_ALLTOALL;
  bool bcast = plan->coll == SHUNT_COLL_BROADCAST;
  bool reduce = plan->coll == SHUNT_COLL_ALLREDUCE || rs;
  bool ok = true;
  cudaStream_t st = NULL;
  CK(cudaSetDevice(0));
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));

  struct shunt_world_exchange bs = {.oob = {rc, team_allgather, team_barrier}};
  struct shunt_gpu_world_config cfg = {J->scratch, J->max_in, J->max_out, 20000, 0};
  struct shunt_gpu_world* w = NULL;
  char err[1024];
  if (shunt_gpu_world_create(rank, J->nranks, &cfg, &bs, &w, err, sizeof(err)) != 0) {
    fail(J, "%s: rank %u: world: %s", plan->name, rank, err);
    if (st) cudaStreamDestroy(st);
    return NULL; /* creation is all or nothing: every rank gets here */
  }
  char *d_in = NULL, *d_out = NULL, *d_exp = NULL, *d_pristine = NULL;
  unsigned long long* d_bad = NULL;
  CK(cudaMalloc((void**)&d_in, J->max_in ? J->max_in : 16));
  CK(cudaMalloc((void**)&d_out, J->max_out ? J->max_out : 16));
  /* Two of each: the graph part alternates two captured graphs with different inputs. */
  CK(cudaMalloc((void**)&d_exp, 2 * (J->max_out ? J->max_out : 16)));
  CK(cudaMalloc((void**)&d_pristine, 2 * (J->max_in ? J->max_in : 16)));
  CK(cudaMalloc((void**)&d_bad, sizeof(*d_bad)));
  char* d_tail = NULL;
  CK(cudaMalloc((void**)&d_tail, J->tail_bytes ? J->tail_bytes : 16));
  char* h_in = malloc(J->max_in + 16);
  char* h_out = malloc(J->max_out + 16);
  char* tmp = malloc(J->max_out + 64);
  char* mine = malloc(J->max_out + 64); /* this rank's own reference (alltoall, broadcast) */
  if (!h_in || !h_out || !tmp || !mine) {
    fail(J, "rank %u: out of memory", rank);
    ok = false;
  }

  /* Every rank goes through the same barriers whatever fails, so nobody waits forever. */
  for (unsigned k = 0; k < J->nshapes; k++) {
    const struct shape* s = &J->shapes[k];
    struct shunt_call_shape cs = {
        s->in, s->out, s->dt, s->op, SHUNT_PKT_LL16, 0, false, false};
    /* Every shape runs as the library runs a call (exec/split.h): a size the chunk rule takes
     * is one head run; another is a head on the user's buffers and a padded tail. */
    struct shunt_split sp;
    struct shunt_program *ph = NULL, *pt = NULL;
    struct shunt_gpu_prog *gh = NULL, *gt = NULL;
    bool run = ok;
    if (run && !shunt_split_call(plan, &cs, &sp, err, sizeof(err))) run = false;
    if (run && sp.head) ph = shunt_lower(plan, rank, &sp.head_shape, err, sizeof(err));
    if (run && sp.rest) pt = shunt_lower(plan, rank, &sp.tail_shape, err, sizeof(err));
    if (run && ((sp.head && !ph) || (sp.rest && !pt))) run = false;
    if (ok && !run)
      fail(J, "%s: rank %u: cannot lower %" PRIu64 " bytes: %s", plan->name, rank, s->total, err);
    bool lowered = run;
    if (run && ph && shunt_gpu_prog_create(w, ph, J->threads, &gh, err, sizeof(err)) != 0) run = false;
    if (run && pt && shunt_gpu_prog_create(w, pt, J->threads, &gt, err, sizeof(err)) != 0) run = false;
    if (lowered && !run) fail(J, "%s: rank %u: upload: %s", plan->name, rank, err);
    /* Allocation and freeing may synchronize the whole device: nobody launches before every
     * rank has uploaded its programs, and nobody frees while a peer's kernel may wait for them. */
    run = team_agree(run && ok);
    const struct shunt_program* prog = ph ? ph : pt; /* names ops in failure reports */
    char scalar[8];
    verify_premul_scalar(s->dt, scalar);
    /* In place, NCCL's rule: the input inside the output (allgather: at the rank's slice), or
     * reducescatter's output inside its input (at the rank's slice). */
    char* user_in = rs           ? d_in
                    : J->inplace ? (reduce || a2a || bcast ? d_out : d_out + (uint64_t)rank * s->in)
                                 : d_in;
    char* user_out = rs && J->inplace ? d_in + (uint64_t)rank * s->out : d_out;
    struct shunt_gpu_run r = {w,     gh,   user_in, user_out, scalar, 0,
                              false, NULL, NULL,    0,        0,      false}; /* the head alone, for graphs */

    const char* want = NULL; /* this rank's reference, once every rank has written its share */
    for (unsigned it = 0; it < EAGER_ITERS; it++) {
      unsigned seed = k * 131 + it;
      if (run) {
        verify_fill_input(h_in, 0, s->in, rank, J->nranks, seed, s->dt, s->op, reduce);
        CK(cudaMemsetAsync(user_out, 0xa5, s->out, st));
        CK(cudaMemcpyAsync(user_in, h_in, s->in, cudaMemcpyHostToDevice, st));
        if (launch_split(w, &sp, s, plan, rank, J->inplace, gh, gt, user_in, user_out, d_tail, scalar, st,
                         err, sizeof(err)) != 0) {
          fail(J, "%s: %srank %u: launch: %s", plan->name, J->what, rank, err);
          run = false;
        }
        /* The reference is computed while the kernel runs. */
        want = expected_slice(J, s, rank, seed, h_in, tmp, mine);
        CK(cudaStreamSynchronize(st));
        check_world(J, w, prog, rank, s, "eager", &run);
        if (rank == 0) J->runs++;
      }
      team_barrier(rc);
      if (run) {
        CK(cudaMemcpyAsync(h_out, user_out, s->out, cudaMemcpyDeviceToHost, st));
        CK(cudaStreamSynchronize(st));
        if (memcmp(h_out, want, s->out) != 0) {
          uint64_t b = 0;
          while (h_out[b] == want[b]) b++;
          fail(J,
               "%s: mismatch: %s%" PRIu64 " bytes (head %" PRIu64 " + tail %" PRIu64
               " per rank), %s %s, iteration "
               "%u: rank %u byte offset %" PRIu64 ": expected 0x%02x, got 0x%02x",
               plan->name, J->what, s->total, sp.head, sp.rest, verify_dt_names[s->dt],
               reduce ? verify_op_names[s->op] : "-", it, rank, b, (unsigned)(unsigned char)want[b],
               (unsigned)(unsigned char)h_out[b]);
          run = false;
        }
      }
      run = team_agree(run && ok);
    }

    if (s->graph && !sp.rest) { /* graph shapes are sizes the chunk rule takes: one head run */
      /* Two graphs, A and B, with different inputs (and so different expected outputs),
       * replayed alternately: a replay that read packets, counters or scratch of the replay
       * before it (a flag or half baked into the graph, docs/decisions.md D5) produces the other graph's
       * result, which identical inputs on every replay could not reveal. */
      cudaGraph_t graph[2] = {NULL, NULL};
      cudaGraphExec_t exec[2] = {NULL, NULL};
      uint64_t in_cap = J->max_in ? J->max_in : 16, out_cap = J->max_out ? J->max_out : 16;
      for (unsigned v = 0; v < 2; v++) {
        unsigned seed = 7777 + 2 * k + v;
        if (run) {
          verify_fill_input(h_in, 0, s->in, rank, J->nranks, seed, s->dt, s->op, reduce);
          /* On the rank's stream, then synchronized: nothing below races with these copies. */
          CK(cudaMemcpyAsync(d_pristine + v * in_cap, h_in, s->in, cudaMemcpyHostToDevice, st));
          CK(cudaStreamSynchronize(st));
          want = expected_slice(J, s, rank, seed, h_in, tmp, mine);
        }
        team_barrier(rc); /* the whole reference is written */
        if (run) {
          CK(cudaMemcpyAsync(d_exp + v * out_cap, want, s->out, cudaMemcpyHostToDevice, st));
          CK(cudaStreamSynchronize(st));
        }
        team_barrier(rc); /* every rank has its copy before the reference is overwritten */
      }
      if (run) {
        CK(cudaMemsetAsync(d_bad, 0, sizeof(*d_bad), st));
        CK(cudaStreamSynchronize(st));
        for (unsigned v = 0; v < 2 && run && ok; v++) {
          /* Thread-local capture: the other ranks' threads keep making CUDA calls meanwhile. */
          CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
          CK(cudaMemsetAsync(user_out, 0xa5, s->out, st));
          CK(cudaMemcpyAsync(user_in, d_pristine + v * in_cap, s->in, cudaMemcpyDeviceToDevice, st));
          if (shunt_gpu_launch(&r, st, err, sizeof(err)) != 0) {
            fail(J, "%s: %srank %u: launch in capture: %s", plan->name, J->what, rank, err);
            run = false;
          }
          CK((cudaError_t)shunt_test_compare(user_out, d_exp + v * out_cap, s->out, d_bad, st));
          CK(cudaStreamEndCapture(st, &graph[v]));
          if (ok && run) CK(cudaGraphInstantiate(&exec[v], graph[v], 0));
        }
        run = run && ok;
      }
      run = team_agree(run && ok);
      if (run) {
        for (unsigned i = 0; i < replays_per_graph; i++) CK(cudaGraphLaunch(exec[i & 1], st));
        CK(cudaStreamSynchronize(st));
        check_world(J, w, prog, rank, s, "graph replay", &run);
        unsigned long long bad = 0;
        CK(cudaMemcpyAsync(&bad, d_bad, sizeof(bad), cudaMemcpyDeviceToHost, st));
        CK(cudaStreamSynchronize(st));
        if (bad)
          fail(J, "%s: %sgraph replays, %" PRIu64 " bytes, %s %s: rank %u: %llu bytes differ over %u replays",
               plan->name, J->what, s->total, verify_dt_names[s->dt], reduce ? verify_op_names[s->op] : "-",
               rank, bad, replays_per_graph);
        if (rank == 0) J->replays += replays_per_graph;
      }
      team_barrier(rc);
      for (unsigned v = 0; v < 2; v++) {
        if (exec[v]) cudaGraphExecDestroy(exec[v]);
        if (graph[v]) cudaGraphDestroy(graph[v]);
      }
    }
    /* Every rank's kernels of this shape are done before its program goes. */
    team_barrier(rc);
    shunt_gpu_prog_destroy(gh);
    shunt_gpu_prog_destroy(gt);
    shunt_program_free(ph);
    shunt_program_free(pt);
    team_barrier(rc);
    if (atomic_load(&J->failures)) ok = false; /* a broken world refuses later launches anyway */
  }
  cudaStreamSynchronize(st);
  team_barrier(rc);
  shunt_gpu_world_destroy(w);
  cudaFree(d_in);
  cudaFree(d_out);
  cudaFree(d_exp);
  cudaFree(d_pristine);
  cudaFree(d_bad);
  cudaFree(d_tail);
  cudaStreamDestroy(st);
  free(h_in);
  free(h_out);
  free(tmp);
  free(mine);
  return NULL;
}

/* ---- Shapes ---- */

static void in_out_bytes(const struct shunt_plan* p, uint64_t total, uint64_t* in, uint64_t* out) {
  if (p->coll == SHUNT_COLL_ALLGATHER) {
    *out = total;
    *in = total / p->ngpus;
  } else if (p->coll == SHUNT_COLL_REDUCESCATTER) {
    *in = total;
    *out = total / p->ngpus;
  } else {
    *in = *out = total;
  }
}

static bool servable(const struct shunt_plan* p, uint64_t total, enum shunt_dtype dt, enum shunt_redop op) {
  uint64_t in, out;
  char why[256];
  in_out_bytes(p, total, &in, &out);
  return shunt_lower_check(p, -1, in, out, dt, op, why, sizeof(why));
}

/* The step between servable sizes (as shunt-plan verify computes it): reducescatter and
 * alltoall sizes are whole rank slices too. */
static uint64_t granule(const struct shunt_plan* p) {
  uint64_t a = p->buffer_alignment ? p->buffer_alignment : 16;
  uint64_t ic = p->gpus[0].input_chunks ? p->gpus[0].input_chunks : 1;
  uint64_t step = a * ic * (p->coll == SHUNT_COLL_ALLGATHER ? p->ngpus : 1);
  uint64_t g = step, oc = p->gpus[0].output_chunks;
  if ((p->coll == SHUNT_COLL_REDUCESCATTER || p->coll == SHUNT_COLL_ALLTOALL) && (g / a) % p->ngpus)
    g *= p->ngpus;
  while (oc && (g / a) % oc) g += step;
  return g;
}

static void add_shape(struct job* J, uint64_t total, enum shunt_dtype dt, enum shunt_redop op, bool graph) {
  if (J->nshapes >= MAX_SHAPES) return;
  struct shape* s = &J->shapes[J->nshapes++];
  s->total = total;
  in_out_bytes(J->plan, total, &s->in, &s->out);
  s->dt = dt;
  s->op = op;
  s->graph = graph;
}

static void add_split_shape(struct job* J, uint64_t total, enum shunt_dtype dt, enum shunt_redop op) {
  struct shunt_call_shape cs = {0, 0, dt, op, SHUNT_PKT_LL16, 0, false, false};
  in_out_bytes(J->plan, total, &cs.in_bytes, &cs.out_bytes);
  struct shunt_split sp;
  char why[256];
  if (!shunt_split_check(J->plan, &cs, &sp, why, sizeof(why)) || !sp.rest) return;
  add_shape(J, total, dt, op, false);
}

static void make_shapes(struct job* J, struct shunt_plan* plan) {
  bool reduce = plan->coll == SHUNT_COLL_ALLREDUCE || plan->coll == SHUNT_COLL_REDUCESCATTER;
  bool bcast = plan->coll == SHUNT_COLL_BROADCAST;
  enum shunt_dtype base_dt = reduce ? SHUNT_DT_FLOAT32 : SHUNT_DT_INT8;
  uint64_t orig_min = plan->min_message_size, orig_max = plan->max_message_size;
  /* The matrix at one small size, whatever the plan's range (this process's copy is opened). */
  plan->min_message_size = 0;
  plan->max_message_size = UINT64_MAX;
  for (enum shunt_dtype dt = SHUNT_DT_INT8; dt < SHUNT_DT_COUNT; dt++)
    for (enum shunt_redop op = SHUNT_REDOP_SUM; op <= (reduce ? SHUNT_REDOP_PREMULSUM : SHUNT_REDOP_SUM); op++) {
      if (reduce && !shunt_elem_supported(dt, op)) continue;
      if ((quick || bcast) && !(dt == base_dt && op == SHUNT_REDOP_SUM) &&
          !(reduce && ((dt == SHUNT_DT_INT8 && op == SHUNT_REDOP_AVG) ||
                       (dt == SHUNT_DT_FLOAT16 && op == SHUNT_REDOP_PREMULSUM))))
        continue;
      if (!servable(plan, MATRIX_BYTES, dt, op)) {
        printf("  %s: %u bytes %s %s: not served\n", plan->name, MATRIX_BYTES, verify_dt_names[dt],
               reduce ? verify_op_names[op] : "");
        continue;
      }
      add_shape(J, MATRIX_BYTES, dt, op, dt == base_dt && op == SHUNT_REDOP_SUM);
    }
  /* Its own range: the first servable size, the next, and the top (capped unless the range
   * starts above the cap). */
  uint64_t g = granule(plan);
  uint64_t lo = orig_min < g ? g : (orig_min + g - 1) / g * g;
  for (unsigned t = 0; t < 64 && !servable(plan, lo, base_dt, SHUNT_REDOP_SUM); t++) lo += g;
  uint64_t cap = lo > RANGE_CAP ? lo : RANGE_CAP;
  uint64_t hi = (orig_max < cap ? orig_max : cap) / g * g;
  if (lo <= orig_max && servable(plan, lo, base_dt, SHUNT_REDOP_SUM))
    add_shape(J, lo, base_dt, SHUNT_REDOP_SUM, true);
  if (lo + g <= hi && servable(plan, lo + g, base_dt, SHUNT_REDOP_SUM))
    add_shape(J, lo + g, base_dt, SHUNT_REDOP_SUM, false);
  if (hi > lo + g && servable(plan, hi, base_dt, SHUNT_REDOP_SUM))
    add_shape(J, hi, base_dt, SHUNT_REDOP_SUM, false);
  /* Sizes the chunk rule does not take (exec/split.h): one element per rank past the first
   * size (a head and a tail), one element per rank (a tail alone), and, for the reducing
   * collectives, the odd size with int8 avg (the division runs in each part). */
  bool sliced = plan->coll == SHUNT_COLL_ALLGATHER || plan->coll == SHUNT_COLL_REDUCESCATTER ||
                plan->coll == SHUNT_COLL_ALLTOALL;
  uint64_t es = shunt_dtype_size(base_dt), per = sliced ? plan->ngpus : 1;
  add_split_shape(J, lo + es * per, base_dt, SHUNT_REDOP_SUM);
  add_split_shape(J, es * per, base_dt, SHUNT_REDOP_SUM);
  if (reduce) add_split_shape(J, lo + per, SHUNT_DT_INT8, SHUNT_REDOP_AVG);
}

/* ---- One plan ---- */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static unsigned plans_passed; /* plans that ran and passed: 0 at the end is a failure */

/* Blocks of the executor kernel device 0 holds at once at `t` threads (the current context is
 * device 0's primary one, as the runtime made it). */
static int coresident(uint32_t t, uint32_t smem, uint32_t* cap) {
  char e[256];
  const struct shunt_cu* cu = shunt_cu(e, sizeof(e));
  struct shunt_gpu_kernels k;
  if (!cu || shunt_gpu_kernels_get(cu, 0, &k, e, sizeof(e)) != 0) return -1;
  return shunt_gpu_coresident_blocks(cu, &k, 0, t, smem, cap);
}

/* The world's sizes and the tail staging that J's shapes need on its plan, and a block size at
 * which every rank's blocks are resident (0: none); the most blocks a rank runs. */
static uint32_t size_job(struct job* J) {
  const struct shunt_plan* plan = J->plan;
  J->scratch = J->max_in = J->max_out = J->tail_bytes = 0;
  for (unsigned k = 0; k < J->nshapes; k++) {
    const struct shape* s = &J->shapes[k];
    /* The world holds both parts of every shape (exec/split.h); the user's buffers the shape. */
    struct shunt_call_shape cs = {
        s->in, s->out, s->dt, s->op, SHUNT_PKT_LL16, 0, false, false};
    struct shunt_split sp;
    char why[256];
    uint64_t need = shunt_lower_scratch_need(plan, s->in, s->out), in_need = s->in, out_need = s->out;
    uint64_t n_scratch = 0, n_in = 0, n_out = 0;
    if (shunt_split_call(plan, &cs, &sp, why, sizeof(why))) {
      n_scratch = sp.scratch, n_in = sp.in_need, n_out = sp.out_need;
      if (sp.tail_bytes > J->tail_bytes) J->tail_bytes = sp.tail_bytes;
    }
    if (n_scratch > need) need = n_scratch;
    if (n_in > in_need) in_need = n_in;
    if (n_out > out_need) out_need = n_out;
    if (need > J->scratch) J->scratch = need;
    if (in_need > J->max_in) J->max_in = in_need;
    if (out_need > J->max_out) J->max_out = out_need;
  }
  /* Blocks of every rank share the GPU: pick a block size at which they are all resident, with
   * room left for the scaling kernels that precede a rank's executor kernel. */
  uint32_t nblocks = 0;
  for (uint32_t g = 0; g < plan->ngpus; g++)
    if (plan->gpus[g].nthreadblocks > nblocks) nblocks = plan->gpus[g].nthreadblocks;
  J->threads = 0;
  for (uint32_t t = plan->num_threads_per_block ? plan->num_threads_per_block : 1024; t >= 32; t /= 2) {
    uint32_t cap = 0;
    if (coresident(t, SHUNT_GPU_PROG_SMEM_MAX, &cap) == 0 &&
        (uint64_t)J->nranks * nblocks * 4 <= (uint64_t)cap * 3) {
      J->threads = t;
      break;
    }
  }
  return nblocks;
}

/* J's plan in J's mode, its ranks as threads: 0 passed, 1 failed (reported). */
static int run_job(struct job* J) {
  const struct shunt_plan* plan = J->plan;
  atomic_store(&J->failures, 0);
  J->msg[0] = 0;
  J->runs = J->replays = 0;
  uint32_t nblocks = size_job(J);
  if (!J->threads) {
    printf("FAIL %s: %s%u ranks x %u blocks cannot be resident on this GPU at any block size\n", plan->name,
           J->what, J->nranks, nblocks);
    return 1;
  }
  /* Reducescatter's reference holds every rank's output: as long as the input. */
  J->exp = malloc((J->max_in > J->max_out ? J->max_in : J->max_out) + 16);
  if (!J->exp) {
    printf("FAIL %s: out of memory\n", plan->name);
    return 1;
  }
  team.n = J->nranks;
  pthread_t th[MAXR];
  struct rank_ctx ctx[MAXR];
  double t0 = now_s();
  for (uint32_t r = 0; r < J->nranks; r++) {
    ctx[r] = (struct rank_ctx){r, J};
    pthread_create(&th[r], NULL, rank_main, &ctx[r]);
  }
  for (uint32_t r = 0; r < J->nranks; r++) pthread_join(th[r], NULL);
  int rc = 0;
  if (atomic_load(&J->failures)) {
    printf("FAIL %s: %s (%u failure(s))\n", plan->name, J->msg, atomic_load(&J->failures));
    rc = 1;
  } else if (J->runs == 0) {
    printf("FAIL %s: %sno execution ran\n", plan->name, J->what);
    rc = 1;
  } else {
    plans_passed++;
    printf("PASS %s (%s%u ranks, %u threads/block, %u shapes, %u eager runs, %u graph replays, %s, %.2f s)\n",
           plan->name, J->what, J->nranks, J->threads, J->nshapes, J->runs, J->replays,
           J->inplace ? "in place" : "out of place", now_s() - t0);
  }
  free(J->exp);
  J->exp = NULL;
  fflush(stdout);
  return rc;
}

/* A broadcast plan as the library serves it (plan/rotate.h): its own root out of place and in
 * place, and renamed for the next root its placement allows, in place. Every root and mode is
 * shunt-plan verify's (kernel-cpu, in CI); a renamed plan moves what the original moves, so the
 * GPU needs one to see the renaming; 0 or 1. */
static int run_broadcast(struct job* J, const struct shunt_plan* plan) {
  int rc = 0;
  char what[48];
  unsigned served = 0;
  for (uint32_t k = 0; k < plan->ngpus && served < 2; k++) {
    uint32_t root = (plan->root + k) % plan->ngpus;
    uint32_t shift = shunt_plan_root_shift(plan, root);
    if (!shunt_plan_rotatable(plan, shift)) continue; /* no plan serves that root */
    struct shunt_plan* rp = shunt_plan_rotate(plan, shift);
    if (!rp) {
      printf("FAIL %s: root %u: out of memory\n", plan->name, root);
      return 1;
    }
    J->plan = rp;
    for (int ip = served ? 1 : 0; ip < 2; ip++) {
      snprintf(what, sizeof(what), "root %u %s, ", root, ip ? "in place" : "out of place");
      J->what = what;
      J->inplace = ip != 0;
      rc |= run_job(J);
    }
    J->plan = plan;
    J->what = "";
    shunt_plan_free(rp);
    served++;
  }
  return rc;
}

static int run_plan(const char* path) {
  struct shunt_plan_errors errs = {0};
  struct shunt_plan* plan = shunt_plan_load_file(path, &errs);
  shunt_plan_errors_free(&errs);
  if (!plan) {
    printf("FAIL %s: does not load\n", path);
    return 1;
  }
  enum shunt_coll c = plan->coll;
  if ((c != SHUNT_COLL_ALLREDUCE && c != SHUNT_COLL_ALLGATHER && c != SHUNT_COLL_REDUCESCATTER &&
       c != SHUNT_COLL_ALLTOALL && c != SHUNT_COLL_BROADCAST) ||
      plan->ngpus > MAXR || plan->ngpus == 0) {
    printf("skip %s: %s on %u ranks\n", path, plan->collective, plan->ngpus);
    shunt_plan_free(plan);
    return 0;
  }
  struct job* J = calloc(1, sizeof(*J));
  if (!J) {
    shunt_plan_free(plan);
    return 1;
  }
  J->plan = plan;
  J->nranks = plan->ngpus;
  J->inplace = plan->inplace;
  J->what = "";
  atomic_init(&J->failures, 0);
  pthread_mutex_init(&J->msg_mu, NULL);
  /* Before any renaming: the renamed plans keep the range it opens. */
  make_shapes(J, plan);
  int rc = 0;
  if (!J->nshapes) {
    /* Not a pass: nothing of this plan would have been checked. */
    printf("FAIL %s: no size, dtype or op of it is served\n", plan->name);
    rc = 1;
  } else if (c == SHUNT_COLL_BROADCAST) {
    rc = run_broadcast(J, plan);
  } else {
    rc = run_job(J);
  }
  fflush(stdout);
  pthread_mutex_destroy(&J->msg_mu);
  free(J);
  shunt_plan_free(plan);
  return rc;
}

static int by_name(const void* a, const void* b) {
  return strcmp(*(char* const*)a, *(char* const*)b);
}

int main(int argc, char** argv) {
  /* Sixteen streams (a rank's and its proxy's per rank) must not share hardware queues: a
   * kernel waiting for a peer would hold up the peer's work queued behind it. Set before the
   * first CUDA call; an explicit setting wins. */
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
  const char* q = getenv("SHUNT_GPU_TEST_QUICK");
  quick = q && *q && strcmp(q, "0") != 0;
  if (quick) replays_per_graph = 4;
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    printf("no GPU: skipped\n");
    return 77;
  }
  if (argc < 2) {
    fprintf(stderr, "usage: test_exec_gpu PLAN_DIR [PLAN_FILE...]\n");
    return 2;
  }
  struct cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
    printf("device: %s (sm_%d%d, %d SMs)\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount);
  char* files[256];
  unsigned nfiles = 0;
  DIR* d = opendir(argv[1]);
  if (!d) {
    fprintf(stderr, "%s: cannot open\n", argv[1]);
    return 1;
  }
  for (struct dirent* e; (e = readdir(d)) && nfiles < 256;) {
    size_t n = strlen(e->d_name);
    if (n > 5 && !strcmp(e->d_name + n - 5, ".json") && e->d_name[0] != '.') {
      files[nfiles] = malloc(strlen(argv[1]) + n + 2);
      sprintf(files[nfiles++], "%s/%s", argv[1], e->d_name);
    }
  }
  closedir(d);
  qsort(files, nfiles, sizeof(files[0]), by_name);
  int failed = 0;
  for (unsigned i = 0; i < nfiles; i++) {
    failed |= run_plan(files[i]);
    free(files[i]);
  }
  for (int i = 2; i < argc; i++) failed |= run_plan(argv[i]);
  if (!failed && plans_passed == 0) {
    printf("no plan was run\n");
    failed = 1;
  }
  printf("%s\n", failed ? "FAILED" : "all plans passed");
  return failed;
}
