/* The GPU backend's self-check (exec/backend.h: shunt_gpu_selfcheck): every candidate plan run
 * on shunt's own device buffers at three sizes, compared exactly, the ranks voting after each
 * run so that all stop at the first failure and agree on it. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exec/backend.h"
#include "transport/cu.h"
#include "exec/gpu/gpu_backend.h"
#include "exec/gpu/gpu_kernels.h"
#include "exec/gpu/gpu_selfcheck_values.h"
#include "exec/gpu/gpu_world.h"
#include "util/status.h"
#include "plan/planset.h"

#define DP(p) ((CUdeviceptr)(uintptr_t)(p))
#define LARGE_BYTES (1u << 20)

/* What a rank says after a run. A rank whose kernel started only after its peers had given up
 * (BUSY: its device was busy) explains the waits that led to it, so a run whose every failure is
 * such a wait proves nothing (agree() below). */
enum { PASSED = 0, UNFIT = 1, FAILED = 2, BUSY = 3 };
/* Tries of a run the device was too busy for, and the pause before the next: another
 * application's kernels end in their own time, and a check that waited for them forever would
 * hold up the communicator's creation. */
#define BUSY_TRIES 3
#define BUSY_PAUSE_MS 100
struct vote {
  uint32_t state; /* PASSED, UNFIT (this GPU cannot run the plan at all), FAILED, BUSY */
  /* A failure the kernel recorded as a wait (its own timeout, or given up once another rank's
   * ran out): what it waited on, enum shunt_gpu_wait_kind + 1 (0: not a wait: a mismatch, a
   * launch or setup error), and the rank it waited for where the record names one. */
  uint32_t wait, peer;
  uint32_t pad_;
  char what[304];
};

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* what = prefix + msg, cut to fit. */
static void say(char* what, size_t wlen, const char* prefix, const char* msg) {
  size_t n = 0;
  for (const char* p = prefix; *p && n + 1 < wlen; p++) what[n++] = *p;
  for (const char* p = msg; *p && n + 1 < wlen; p++) what[n++] = *p;
  if (wlen) what[n] = 0;
}

struct bufs {
  const struct shunt_cu* cu;
  CUstream stream;
  char* in;                  /* device */
  char* out;                 /* device */
  unsigned long long* first; /* device: the check kernel's first mismatch */
  float* host;
  uint64_t in_cap, out_cap, host_cap;
};

/* A call's input and output bytes for `per` bytes of the per-rank unit (exec/split.h: a
 * rank's input, or reducescatter's output), and its size as the plan's range counts it. */
static void shape_of(const struct shunt_plan* plan, uint32_t nranks, uint64_t per, uint64_t* in,
                     uint64_t* out) {
  *in = per * shunt_coll_in_units(plan->coll, nranks); /* alltoall: per is one block */
  *out = per * shunt_coll_out_units(plan->coll, nranks);
}
static uint64_t total_of(const struct shunt_plan* plan, uint32_t nranks, uint64_t per) {
  uint64_t in, out;
  shape_of(plan, nranks, per, &in, &out);
  return in > out ? in : out;
}

/* Per-rank unit bytes of the three sizes for `plan` (0 where a size cannot be made). */
static void sizes_for(const struct shunt_plan* plan, uint32_t nranks, uint64_t out[3]) {
  struct shunt_call_shape one = {0, 0, SHUNT_DT_FLOAT32, SHUNT_REDOP_SUM, 0, 0, false, false};
  shape_of(plan, nranks, 4, &one.in_bytes, &one.out_bytes);
  struct shunt_split s;
  char why[128];
  memset(out, 0, 3 * sizeof(uint64_t));
  if (!shunt_split_call(plan, &one, &s, why, sizeof(why)) || s.quantum < 4) return;
  uint64_t q = s.quantum;
  out[0] = q;
  out[1] = q + 4;
  /* About LARGE_BYTES in all: a rank's unit is a slice of it where the call is cut in slices. */
  bool sliced = shunt_coll_layout(plan->coll) != SHUNT_LAYOUT_FLAT;
  uint64_t large = sliced ? LARGE_BYTES / nranks : LARGE_BYTES;
  out[2] = large > q ? large / q * q : 0;
}

/* What the check kernel compares rank's output with (gpu_selfcheck_values.h), by the
 * collective's reference (util/coll_traits.h). */
static uint32_t check_kind(const struct shunt_plan* plan, uint32_t rank) {
  switch (shunt_coll_traits(plan->coll)->ref) {
    case SHUNT_REF_GATHERED:
      return SHUNT_SELFCHECK_ALLGATHER;
    case SHUNT_REF_REDUCED_MINE:
      return SHUNT_SELFCHECK_KIND(SHUNT_SELFCHECK_REDUCESCATTER, rank);
    case SHUNT_REF_ROOT_INPUT:
      return SHUNT_SELFCHECK_KIND(SHUNT_SELFCHECK_BROADCAST, plan->root);
    case SHUNT_REF_TRANSPOSED:
      return SHUNT_SELFCHECK_KIND(SHUNT_SELFCHECK_ALLTOALL, rank);
    default:
      return SHUNT_SELFCHECK_ALLREDUCE;
  }
}

/* One run of `plan` with `per` bytes of the per-rank unit: PASSED, UNFIT, FAILED or BUSY, with
 * `what` and, for a failed wait, v->wait and v->peer. */
static int run_one(struct shunt_backend* b, struct bufs* B, const struct shunt_plan* plan, uint64_t per,
                   uint64_t timeout_ms, struct vote* v, char* what, size_t wlen) {
  const struct shunt_cu* cu = B->cu;
  uint32_t rank = b->rank, n = b->nranks;
  uint64_t in_bytes, out_bytes;
  shape_of(plan, n, per, &in_bytes, &out_bytes);
  uint64_t cnt = in_bytes / 4, ocnt = out_bytes / 4;
  uint32_t kind = check_kind(plan, rank);
  struct shunt_call_shape shape = {in_bytes, out_bytes, SHUNT_DT_FLOAT32, SHUNT_REDOP_SUM, 0, 0, false, false};
  struct shunt_split split;
  if (!shunt_split_call(plan, &shape, &split, what, wlen)) return FAILED;
  /* The plan's code at these sizes, whatever size range it is tuned to serve. */
  split.head_shape.part = true;
  /* In place as the plan is written, NCCL's rule: the view inside its holder (allgather's input at
   * the rank's slice of the output, reducescatter's output at the rank's slice of the input); the
   * other ranks of a rooted collective bind as the API binds them (util/coll_traits.h). */
  char *in, *out;
  shunt_coll_place(plan->coll, rank, per, plan->inplace, B->in, B->out, &in, &out);
  const void* send = in;
  void* recv = out;
  bool inplace = plan->inplace;
  shunt_coll_root_bind(plan->coll, rank, plan->root, &send, &recv, &inplace);
  in = (char*)(uintptr_t)send;
  out = recv;
  split.inplace = inplace;
  struct shunt_backend_call c = {
      .plan = plan, .split = &split, .stream = B->stream, .timeout_ms = timeout_ms};
  char err[1024];
  if (shunt_backend_prepare(b, plan, &split, err, sizeof(err)) != SHUNT_OK) {
    say(what, wlen, "setup: ", err);
    return FAILED;
  }
  if (B->in_cap < in_bytes || B->out_cap < out_bytes || B->host_cap < in_bytes) {
    snprintf(what, wlen, "internal: buffers too small");
    return FAILED;
  }
  for (uint64_t i = 0; i < cnt; i++) B->host[i] = shunt_selfcheck_value(rank, i);
  /* out NULL: this rank has no output (a reduce's other ranks), nothing to compare. */
  CUresult e = out ? cu->MemsetD8Async(DP(out), 0xff, out_bytes, B->stream) : CUDA_SUCCESS;
  if (e == CUDA_SUCCESS) e = cu->MemcpyHtoDAsync(DP(in), B->host, in_bytes, B->stream);
  if (e != CUDA_SUCCESS) {
    snprintf(what, wlen, "launch error: filling the input: %s", shunt_cu_error(e));
    return FAILED;
  }
  c.in = in;
  c.out = out;
  int r = shunt_backend_run(b, &c, err, sizeof(err));
  if (r == SHUNT_E_UNFIT) {
    say(what, wlen, "", err);
    return UNFIT;
  }
  if (r != SHUNT_OK) {
    say(what, wlen, "launch error: ", err);
    return FAILED;
  }
  /* Compared on the device: one kernel finds the first element that differs bitwise from what
   * the inputs imply, and only its index comes back. */
  const struct shunt_gpu_kernels* fn = shunt_gpu_world_fns(shunt_gpu_backend_world(b));
  enum shunt_coll_layout layout = shunt_coll_layout(plan->coll);
  uint64_t per_el = layout == SHUNT_LAYOUT_GATHER ? cnt : layout == SHUNT_LAYOUT_BLOCKS ? ocnt / n : ocnt;
  uint32_t nr = n;
  void* args[] = {&out, &ocnt, &per_el, &nr, &kind, &B->first};
  uint64_t grid = (ocnt + 255) / 256;
  e = cu->MemsetD8Async(DP(B->first), 0xff, sizeof(*B->first), B->stream);
  if (e == CUDA_SUCCESS && out)
    e = cu->LaunchKernel(fn->check,
                         (unsigned)(grid > 1024 ? 1024
                                    : grid      ? grid
                                                : 1),
                         1, 1, 256, 1, 1, 0, B->stream, args, NULL);
  unsigned long long first = ~0ull;
  if (e == CUDA_SUCCESS) e = cu->MemcpyDtoHAsync(B->host, DP(B->first), sizeof(first), B->stream);
  if (e == CUDA_SUCCESS) e = cu->StreamSynchronize(B->stream);
  if (e == CUDA_SUCCESS) memcpy(&first, B->host, sizeof(first));
  if (shunt_backend_check(b, err, sizeof(err)) != SHUNT_OK) {
    struct shunt_gpu_error rec;
    if (shunt_gpu_world_failure(shunt_gpu_backend_world(b), &rec) == SHUNT_GPU_ERR_ABORTED &&
        rec.what == SHUNT_GPU_WAIT_NONE) {
      snprintf(what, wlen,
               "the device was busy: rank %u's blocks could not all be resident until its peers had given up "
               "waiting (SHUNT_GPU_CHECK_TIMEOUT)",
               rank);
      return BUSY;
    }
    if (rec.code) {
      v->wait = rec.what + 1;
      v->peer = rec.peer;
    }
    say(what, wlen, "timeout: ", err);
    return FAILED;
  }
  if (e != CUDA_SUCCESS) {
    say(what, wlen, "launch error: ", shunt_cu_error(e));
    return FAILED;
  }
  if (first != ~0ull) {
    float got = 0;
    if (cu->MemcpyDtoHAsync(B->host, DP(out + first * 4), 4, B->stream) == CUDA_SUCCESS &&
        cu->StreamSynchronize(B->stream) == CUDA_SUCCESS)
      got = B->host[0];
    snprintf(what, wlen, "mismatch: element %llu of %" PRIu64 " is %g, expected %g", first, ocnt, (double)got,
             (double)shunt_selfcheck_expected(n, per_el, kind, first));
    return FAILED;
  }
  return PASSED;
}

static int alloc_bufs(struct bufs* B, uint64_t in_cap, uint64_t out_cap, char* what, size_t wlen) {
  const struct shunt_cu* cu = B->cu;
  CUdeviceptr a = 0, o = 0, f = 0;
  CUresult e = cu->StreamCreate(&B->stream, CU_STREAM_NON_BLOCKING);
  if (e == CUDA_SUCCESS) e = cu->MemAlloc(&a, in_cap);
  if (e == CUDA_SUCCESS) e = cu->MemAlloc(&o, out_cap);
  if (e == CUDA_SUCCESS) e = cu->MemAlloc(&f, sizeof(*B->first));
  B->first = (unsigned long long*)(uintptr_t)f;
  B->in = (char*)(uintptr_t)a;
  B->out = (char*)(uintptr_t)o;
  B->in_cap = a ? in_cap : 0;
  B->out_cap = o ? out_cap : 0;
  /* The host side holds an input to upload and a result's element to read back. */
  uint64_t host_cap = in_cap > out_cap ? in_cap : out_cap;
  if (e == CUDA_SUCCESS) e = cu->MemHostAlloc((void**)&B->host, host_cap, CU_MEMHOSTALLOC_PORTABLE);
  B->host_cap = B->host ? host_cap : 0;
  if (e == CUDA_SUCCESS) return 0;
  snprintf(what, wlen, "setup: device memory for the check: %s", shunt_cu_error(e));
  return e == CUDA_ERROR_OUT_OF_MEMORY ? SHUNT_E_NOMEM : SHUNT_E_CUDA;
}

static void free_bufs(struct bufs* B) {
  const struct shunt_cu* cu = B->cu;
  if (!cu) return;
  if (B->stream) cu->StreamSynchronize(B->stream);
  if (B->in) cu->MemFree(DP(B->in));
  if (B->out) cu->MemFree(DP(B->out));
  if (B->first) cu->MemFree(DP(B->first));
  if (B->host) cu->MemFreeHost(B->host);
  if (B->stream) cu->StreamDestroy(B->stream);
}

/* Whether the failed wait of v can be the doing of the late ranks (state BUSY in all, some rank
 * being late): a wait on a channel's counter whose peer is late, a wait whose record names no
 * rank (a packet, whose writer it does not say; its own blocks' barrier or semaphore, held by a
 * block that may wait on a peer). Not a wait (a mismatch, a launch or setup error) or a wait on
 * the proxy (FIFO room, completion: no peer's kernel in the way): never. */
static bool traced(const struct vote* v, const struct vote* all, uint32_t nranks) {
  if (v->state != FAILED || v->wait == 0) return false;
  switch (v->wait - 1) {
    case SHUNT_GPU_WAIT_SIGNAL:
      return v->peer < nranks && all[v->peer].state == BUSY;
    case SHUNT_GPU_WAIT_PACKET:
    case SHUNT_GPU_WAIT_BARRIER:
    case SHUNT_GPU_WAIT_SEMAPHORE:
      return true;
    default:
      return false;
  }
}

/* Every rank's vote: the worst state of any rank (FAILED over UNFIT over PASSED), and the first
 * rank in that state. Ranks whose kernels started late (BUSY) make the run BUSY only when every
 * failure leads to them: each failed rank waited on a late rank, or on a rank that itself waited
 * on one (traced above); any other failure is the plan's or shunt's, and FAILED. */
static int agree(struct shunt_backend* b, int state, const struct vote* mine, struct vote* all,
                 uint32_t* bad) {
  all[b->rank] = *mine;
  all[b->rank].state = (uint32_t)state;
  if (b->ex.oob.allgather(b->ex.oob.ctx, all, sizeof(all[0])) != 0) {
    *bad = b->rank;
    all[b->rank].state = FAILED;
    snprintf(all[b->rank].what, sizeof(all[0].what), "the ranks could not exchange their results");
    return FAILED;
  }
  int worst = PASSED;
  for (uint32_t r = 0; r < b->nranks; r++)
    if ((int)all[r].state > worst) {
      worst = (int)all[r].state;
      *bad = r;
    }
  if (worst != BUSY) return worst;
  /* A failure traced to a late rank counts as late itself, until nothing more is traced. */
  for (bool grew = true; grew;) {
    grew = false;
    for (uint32_t r = 0; r < b->nranks; r++)
      if (traced(&all[r], all, b->nranks)) all[r].state = BUSY, grew = true;
  }
  for (uint32_t r = 0; r < b->nranks && worst == BUSY; r++)
    if (all[r].state == FAILED) {
      worst = FAILED;
      *bad = r;
    }
  return worst;
}

int shunt_gpu_selfcheck(struct shunt_backend* b, const struct shunt_plan* const* plans, uint32_t nplans,
                        uint64_t timeout_ms, bool* unfit, struct shunt_gpu_verdict_info* out) {
  double t0 = now_ms();
  memset(out, 0, sizeof(*out));
  struct vote* all = calloc(b->nranks, sizeof(*all));
  if (!all) return SHUNT_E_NOMEM; /* cannot vote: the caller treats it as a local failure everywhere */
  char what[304] = "";
  struct bufs B = {0};
  char errbuf[256];
  B.cu = shunt_cu(errbuf, sizeof(errbuf));
  CUcontext ctx = NULL;
  struct shunt_cu_guard cg = shunt_cu_enter(NULL, NULL, 0);
  int local = PASSED;
  for (uint32_t p = 0; p < nplans; p++) unfit[p] = false;
  if (!B.cu) {
    snprintf(what, sizeof(what), "setup: %s", errbuf);
    local = FAILED;
  } else if (B.cu->DevicePrimaryCtxRetain(&ctx, b->device) != CUDA_SUCCESS) {
    snprintf(what, sizeof(what), "setup: no context for device %d", b->device);
    local = FAILED;
  } else {
    /* Relaxed: another thread may capture a graph meanwhile. */
    cg = shunt_cu_enter(B.cu, ctx, 1);
  }
  /* The largest buffers any run needs. */
  uint64_t in_cap = 16, out_cap = 16;
  for (uint32_t p = 0; p < nplans; p++) {
    uint64_t sz[3];
    sizes_for(plans[p], b->nranks, sz);
    for (int k = 0; k < 3; k++) {
      uint64_t i, o;
      shape_of(plans[p], b->nranks, sz[k], &i, &o);
      if (i > in_cap) in_cap = i;
      if (o > out_cap) out_cap = o;
    }
  }
  if (local == PASSED && alloc_bufs(&B, in_cap, out_cap, what, sizeof(what)) != 0) local = FAILED;
  uint32_t bad = 0;
  struct vote mine;
  memset(&mine, 0, sizeof(mine));
  snprintf(mine.what, sizeof(mine.what), "%s", what);
  int failed = agree(b, local, &mine, all, &bad) != PASSED;
  if (failed) {
    snprintf(out->plan, sizeof(out->plan), "(none)");
  }
  for (uint32_t p = 0; p < nplans && !failed; p++) {
    uint64_t sz[3];
    sizes_for(plans[p], b->nranks, sz);
    for (int k = 0; k < 3 && !failed && !unfit[p]; k++) {
      if (!sz[k]) continue;
      int st = PASSED;
      for (uint32_t t = 1;; t++) {
        memset(&mine, 0, sizeof(mine));
        local = run_one(b, &B, plans[p], sz[k], timeout_ms, &mine, mine.what, sizeof(mine.what));
        out->runs++;
        st = agree(b, local, &mine, all, &bad);
        out->tries = t;
        if (st != BUSY || t >= BUSY_TRIES) break;
        /* Every rank saw the same vote, so every rank tries again, on a new world (the aborted
         * one is broken), once every rank's frees are done (as after the last run, below). */
        b->ops->free_world(b, true);
        b->ex.oob.barrier(b->ex.oob.ctx);
        struct timespec pause = {0, BUSY_PAUSE_MS * 1000000L};
        nanosleep(&pause, NULL);
      }
      if (st == UNFIT) {
        /* Not a fault: this GPU cannot run the plan for this many ranks; its calls go elsewhere. */
        unfit[p] = true;
        out->unfit++;
      } else if (st == FAILED || st == BUSY) {
        failed = 1;
        out->busy = st == BUSY;
        snprintf(out->plan, sizeof(out->plan), "%s", plans[p]->name);
        out->bytes = total_of(plans[p], b->nranks, sz[k]);
      }
    }
  }
  free_bufs(&B);
  /* No rank launches again before every rank's frees are done: a free holds the context lock
   * until the device's queued work has run, and a peer's next kernel would wait for this rank. */
  b->ex.oob.barrier(b->ex.oob.ctx);
  if (failed) {
    out->rank = bad;
    snprintf(out->what, sizeof(out->what), "%s", all[bad].what);
    /* Every rank reached this vote: the world goes collectively. */
    b->ops->free_world(b, true);
  }
  shunt_cu_leave(&cg);
  if (ctx) B.cu->DevicePrimaryCtxRelease(b->device); /* after the world made in it, if it failed */
  free(all);
  out->ok = !failed;
  out->ms = now_ms() - t0;
  return failed ? -1 : 0;
}
