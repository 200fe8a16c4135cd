/* The GPU backend behind exec/backend.h: a GPU world (gpu_world.h) made or grown when a call
 * needs it, programs uploaded once per shape and kept with the world, a call's head and tail
 * (exec/split.h) enqueued on the caller's stream in one ordered section. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/backend.h"
#include "transport/cu.h"
#include "exec/gpu/gpu_backend.h"
#include "exec/gpu/gpu_reg.h"
#include "exec/gpu/gpu_run.h"
#include "exec/gpu/gpu_world.h"
#include "exec/host/host_run.h"
#include "util/log.h"

#define UPLOADS 64
#define DP(p) ((CUdeviceptr)(uintptr_t)(p))

/* A program uploaded to the world: the backend holds a reference to the lowered program for as
 * long as its upload exists, so the pointer names one program only. */
struct upload {
  const struct shunt_program* prog;
  struct shunt_gpu_prog* gp;
  uint64_t used;
};

struct gpu_backend {
  struct shunt_backend base;
  _Atomic(struct shunt_gpu_world*) world; /* read by abort from another thread */
  struct shunt_gpu_world_config cfg;
  char* tail; /* device staging of tail runs */
  uint64_t tail_cap;
  pthread_mutex_t mu; /* the uploads */
  struct upload up[UPLOADS];
  uint64_t clock;
  _Atomic(const struct shunt_program*) last; /* the program last launched, for check's message */
  struct shunt_gpu_regs* regs;               /* registered user buffers (zero-copy) */
  /* Worlds (and tail staging) outgrown by a larger call: a captured graph may still replay on
   * them, so they live as long as the backend. */
  struct retired {
    struct shunt_gpu_world* world;
    char* tail;
    struct retired* next;
  } * retired;
  const struct shunt_cu* cu; /* set with the first world, kept for the registrations */
  CUcontext ctx;
};

struct shunt_backend* shunt_gpu_backend_alloc(void) {
  struct gpu_backend* g = calloc(1, sizeof(*g));
  if (!g) return NULL;
  if (!(g->regs = shunt_gpu_regs_new())) {
    free(g);
    return NULL;
  }
  pthread_mutex_init(&g->mu, NULL);
  return &g->base;
}

static void drop_uploads(struct gpu_backend* g) {
  pthread_mutex_lock(&g->mu);
  for (int i = 0; i < UPLOADS; i++)
    if (g->up[i].gp) {
      shunt_gpu_prog_destroy(g->up[i].gp);
      shunt_lower_cache_release(g->base.programs, g->up[i].prog);
      memset(&g->up[i], 0, sizeof(g->up[i]));
    }
  pthread_mutex_unlock(&g->mu);
}

static void free_tail(struct gpu_backend* g, struct shunt_gpu_world* w) {
  if (g->tail && w) {
    const struct shunt_cu* cu = shunt_gpu_world_cu(w);
    /* Relaxed: another thread's capture neither fails this nor is invalidated by it. */
    struct shunt_cu_guard cg = shunt_cu_enter(cu, shunt_gpu_world_ctx(w), 1);
    cu->MemFree(DP(g->tail));
    shunt_cu_leave(&cg);
  }
  g->tail = NULL;
  g->tail_cap = 0;
}

static void end_world(struct shunt_gpu_world* w, bool collective) {
  if (collective)
    shunt_gpu_world_destroy(w);
  else
    shunt_gpu_world_release(w);
}

static void free_world(struct shunt_backend* b, bool collective) {
  struct gpu_backend* g = (struct gpu_backend*)b;
  struct shunt_gpu_world* w = atomic_load(&g->world);
  if (w) {
    /* This rank's launches complete before anything of theirs goes; when that cannot be known,
     * the tail staging stays (the world keeps its own memory likewise). */
    bool settled = shunt_gpu_world_quiesce(w) == SHUNT_GPU_OK;
    drop_uploads(g);
    if (!settled) g->tail = NULL;
    free_tail(g, w);
    atomic_store(&g->world, NULL);
    end_world(w, collective);
  }
  /* Every rank retired the same worlds in the same order. */
  while (g->retired) {
    struct retired* r = g->retired;
    g->retired = r->next;
    g->tail = shunt_gpu_world_quiesce(r->world) == SHUNT_GPU_OK ? r->tail : NULL;
    free_tail(g, r->world);
    end_world(r->world, collective);
    free(r);
  }
}

/* The current world steps aside for a larger one: its programs' memory goes with it (into its
 * deferred frees), and it is kept, with its tail staging, for graphs captured on it. */
static void retire_world(struct gpu_backend* g) {
  struct shunt_gpu_world* w = atomic_load(&g->world);
  struct retired* r = malloc(sizeof(*r));
  drop_uploads(g);
  /* Out of memory for the record: the old world is left alive unrecorded (a leak) rather than
   * this rank freeing it alone, which would take a collective step its peers do not take. */
  if (r) {
    r->world = w;
    r->tail = g->tail;
    r->next = g->retired;
    g->retired = r;
  }
  g->tail = NULL;
  g->tail_cap = 0;
  atomic_store(&g->world, NULL);
}

static int prepare(struct shunt_backend* b, const struct shunt_plan* plan, const struct shunt_split* s,
                   char* err, size_t len) {
  struct gpu_backend* g = (struct gpu_backend*)b;
  uint64_t scratch, in_need, out_need;
  shunt_split_needs(plan, s, &scratch, &in_need, &out_need);
  uint64_t tail_need = s->rest ? shunt_split_tail_bytes(plan, s) : 0;
  struct shunt_gpu_world* w = atomic_load(&g->world);
  if (w && g->cfg.scratch_bytes >= scratch && g->cfg.input_bytes >= in_need &&
      g->cfg.output_bytes >= out_need && g->tail_cap >= tail_need)
    return SHUNT_EXEC_OK;
  struct shunt_gpu_world_config cfg = {shunt_backend_round(scratch), shunt_backend_round(in_need),
                                       shunt_backend_round(out_need), 0, b->device};
  uint64_t tail_cap = tail_need ? shunt_backend_round(tail_need) : 0;
  if (w) {
    if (g->cfg.scratch_bytes > cfg.scratch_bytes) cfg.scratch_bytes = g->cfg.scratch_bytes;
    if (g->cfg.input_bytes > cfg.input_bytes) cfg.input_bytes = g->cfg.input_bytes;
    if (g->cfg.output_bytes > cfg.output_bytes) cfg.output_bytes = g->cfg.output_bytes;
    if (g->tail_cap > tail_cap) tail_cap = g->tail_cap;
    /* Every rank grows at the same call; the old world stays for graphs captured on it. */
    retire_world(g);
  }
  struct shunt_gpu_world* made = NULL;
  char why[512];
  int rc = shunt_gpu_world_create(b->rank, b->nranks, &cfg, &b->ex, &made, why, sizeof(why));
  if (rc != SHUNT_GPU_OK) {
    if (err && len) snprintf(err, len, "the GPU backend could not set up: %s", why);
    return rc == SHUNT_GPU_NOMEM ? SHUNT_EXEC_NOMEM : SHUNT_EXEC_INVALID;
  }
  g->cfg = cfg;
  if (tail_cap) {
    const struct shunt_cu* cu = shunt_gpu_world_cu(made);
    /* Relaxed: another thread's capture neither fails this nor is invalidated by it. */
    struct shunt_cu_guard cg = shunt_cu_enter(cu, shunt_gpu_world_ctx(made), 1);
    CUdeviceptr d = 0;
    CUresult e = cu->MemAlloc(&d, tail_cap);
    shunt_cu_leave(&cg);
    if (e != CUDA_SUCCESS) {
      /* Every rank tears its new world down with the others. */
      if (err && len)
        snprintf(err, len, "device memory for a %llu-byte tail: %s", (unsigned long long)tail_cap,
                 shunt_cu_error(e));
      shunt_gpu_world_destroy(made);
      return SHUNT_EXEC_NOMEM;
    }
    g->tail = (char*)(uintptr_t)d;
    g->tail_cap = tail_cap;
  }
  g->cu = shunt_gpu_world_cu(made);
  g->ctx = shunt_gpu_world_ctx(made);
  atomic_store(&g->world, made);
  return SHUNT_EXEC_OK;
}

/* The upload of the program for `shape`, made on first use. */
static struct shunt_gpu_prog* upload_for(struct gpu_backend* g, struct shunt_gpu_world* w,
                                         const struct shunt_plan* plan, const struct shunt_call_shape* shape,
                                         int* code, char* err, size_t len) {
  *code = SHUNT_GPU_INVALID;
  const struct shunt_program* p =
      shunt_lower_cache_get(g->base.programs, plan, g->base.rank, shape, err, len);
  if (!p) return NULL;
  pthread_mutex_lock(&g->mu);
  struct upload* hit = NULL;
  struct upload* victim = &g->up[0];
  for (int i = 0; i < UPLOADS && !hit; i++) {
    if (g->up[i].prog == p) hit = &g->up[i];
    if (!g->up[i].gp || (victim->gp && g->up[i].used < victim->used)) victim = &g->up[i];
  }
  struct shunt_gpu_prog* gp = NULL;
  if (hit) {
    hit->used = ++g->clock;
    gp = hit->gp;
    shunt_lower_cache_release(g->base.programs, p); /* the upload holds its own reference */
  } else {
    if (victim->gp) {
      /* Its device memory is freed with the world, not now (a kernel may still read it). */
      shunt_gpu_prog_destroy(victim->gp);
      shunt_lower_cache_release(g->base.programs, victim->prog);
      memset(victim, 0, sizeof(*victim));
    }
    if ((*code = shunt_gpu_prog_create(w, p, 0, &gp, err, len)) != SHUNT_GPU_OK) {
      shunt_lower_cache_release(g->base.programs, p);
      gp = NULL;
    } else {
      victim->prog = p;
      victim->gp = gp;
      victim->used = ++g->clock;
    }
  }
  pthread_mutex_unlock(&g->mu);
  return gp;
}

/* Zero-copy for one part: the registrations holding its buffers (NULL: staged). */
struct zc {
  const struct shunt_gpu_reg* in;
  const struct shunt_gpu_reg* out;
};

static int launch_part(struct gpu_backend* g, struct shunt_gpu_world* w, const struct shunt_backend_call* c,
                       const struct shunt_call_shape* shape, const void* in, void* out, const struct zc* z,
                       char* err, size_t len) {
  int code = 0;
  struct shunt_gpu_prog* gp = upload_for(g, w, c->plan, shape, &code, err, len);
  if (!gp)
    return code == SHUNT_GPU_UNFIT   ? SHUNT_EXEC_UNFIT
           : code == SHUNT_GPU_NOMEM ? SHUNT_EXEC_NOMEM
                                     : SHUNT_EXEC_INVALID;
  struct shunt_gpu_run r = {w, gp, in, out, c->scalar, c->timeout_ms * 1000000ull, true, NULL, NULL, 0, 0};
  if (z && z->out) {
    r.zc_out = z->out->table;
    r.zc_out_off = (uint64_t)((const char*)out - z->out->base);
  }
  if (z && z->in) {
    r.zc_in = z->in->table;
    r.zc_in_off = (uint64_t)((const char*)in - z->in->base);
  }
  atomic_store(&g->last, gp->host);
  int rc = shunt_gpu_launch(&r, (CUstream)c->stream, err, len);
  return rc == SHUNT_GPU_OK ? SHUNT_EXEC_OK : rc == SHUNT_GPU_NOMEM ? SHUNT_EXEC_NOMEM : SHUNT_EXEC_INVALID;
}

/* The head on the user's buffers, then the tail padded with zeros in the device staging, all
 * in one ordered section of the world's launches (the staging is shared by every call). */
static int run_call(struct gpu_backend* g, struct shunt_gpu_world* w, const struct shunt_backend_call* c,
                    const struct zc* z, char* err, size_t len) {
  const struct shunt_cu* cu = shunt_gpu_world_cu(w);
  const struct shunt_split* s = &c->split;
  CUstream st = (CUstream)c->stream;
  if (s->head) {
    int rc = launch_part(g, w, c, &s->head_shape, c->in, c->out, z, err, len);
    if (rc != SHUNT_EXEC_OK || !s->rest) return rc;
  }
  if (!s->rest) return SHUNT_EXEC_OK;
  const struct shunt_plan* plan = c->plan;
  uint64_t R = c->shape.in_bytes, q = s->quantum;
  bool inplace = (const char*)c->in >= (const char*)c->out &&
                 (const char*)c->in < (const char*)c->out + c->shape.out_bytes;
  uint64_t tail_bytes = shunt_split_tail_bytes(plan, s);
  if (tail_bytes > g->tail_cap) {
    if (err && len)
      snprintf(err, len, "the tail staging holds %llu bytes, the call needs %llu",
               (unsigned long long)g->tail_cap, (unsigned long long)tail_bytes);
    return SHUNT_EXEC_INVALID;
  }
  char* tin = g->tail + shunt_split_tail_in(plan, s, g->base.rank, inplace);
  CUresult e = cu->MemsetD8Async(DP(g->tail), 0, tail_bytes, st);
  if (e == CUDA_SUCCESS) e = cu->MemcpyAsync(DP(tin), DP((const char*)c->in + s->head), s->rest, st);
  if (e != CUDA_SUCCESS) {
    if (err && len) snprintf(err, len, "staging the tail: %s", shunt_cu_error(e));
    return SHUNT_EXEC_INVALID;
  }
  int rc = launch_part(g, w, c, &s->tail_shape, tin, g->tail, NULL, err, len);
  if (rc != SHUNT_EXEC_OK) return rc;
  for (uint32_t k = 0; k < shunt_split_slices(plan) && e == CUDA_SUCCESS; k++)
    e = cu->MemcpyAsync(DP((char*)c->out + (uint64_t)k * R + s->head), DP(g->tail + (uint64_t)k * q), s->rest,
                        st);
  if (e != CUDA_SUCCESS) {
    if (err && len) snprintf(err, len, "copying the tail out: %s", shunt_cu_error(e));
    return SHUNT_EXEC_INVALID;
  }
  return SHUNT_EXEC_OK;
}

/* A registration usable zero-copy for [p, p + bytes): exchanged with every rank at its first
 * use (collective: when one rank's buffers are registered, every rank's are, NCCL's rule). */
static const struct shunt_gpu_reg* usable(struct gpu_backend* g, const void* p, uint64_t bytes) {
  struct shunt_gpu_reg* r = shunt_gpu_reg_find(g->regs, p, bytes);
  if (!r) return NULL;
  /* Freed and allocated again without deregistering: the peers' mappings are of memory that is
   * gone. Staged, as every rank that did the same will find (NCCL asks for deregistration
   * before free; this keeps a program that forgot from reading stale memory). */
  if (!shunt_gpu_reg_current(g->cu ? g->cu : shunt_cu(NULL, 0), r)) {
    if (r->state != -2)
      SHUNT_WARN(
          "rank %u: registered buffer %p was freed and allocated again without ncclCommDeregister; calls "
          "on it are staged",
          g->base.rank, (void*)r->base);
    r->state = -2;
    return NULL;
  }
  if (r->state == 0) {
    char why[512];
    struct shunt_gpu_world* w = atomic_load(&g->world);
    if (shunt_gpu_reg_exchange(g->regs, g->cu, g->ctx, w ? shunt_gpu_world_stream(w) : NULL, r, g->base.rank,
                               g->base.nranks, &g->base.ex, why, sizeof(why)) != 0)
      SHUNT_WARN("rank %u: a registered buffer cannot be reached zero-copy (%s); calls on it are staged",
                 g->base.rank, why);
  }
  return r->state == 1 ? r : NULL;
}

/* Which buffers of the call's head peers reach in place: the output when it is registered, and
 * the input too when the call is not in place (in place, the input is a view into the output). */
static void zero_copy(struct gpu_backend* g, const struct shunt_backend_call* c, struct zc* z) {
  bool inplace = (const char*)c->in >= (const char*)c->out &&
                 (const char*)c->in < (const char*)c->out + c->shape.out_bytes;
  z->out = usable(g, c->out, c->shape.out_bytes);
  if (z->out && !inplace) {
    z->in = usable(g, c->in, c->shape.in_bytes);
    if (!z->in) z->out = NULL; /* NCCL's rule: both registered, or neither used */
  }
}

static int run(struct shunt_backend* b, const struct shunt_backend_call* c, char* err, size_t len) {
  struct gpu_backend* g = (struct gpu_backend*)b;
  struct shunt_gpu_world* w = atomic_load(&g->world);
  if (!w) {
    if (err && len) snprintf(err, len, "no world");
    return SHUNT_EXEC_INVALID;
  }
  if (shunt_gpu_world_broken(w)) {
    char why[1024];
    shunt_gpu_world_check(w, atomic_load(&g->last), why, sizeof(why));
    if (err && len) snprintf(err, len, "an earlier run on this communicator failed: %s", why);
    return SHUNT_EXEC_TIMEOUT;
  }
  uint32_t ra, rb;
  if (!shunt_gpu_world_fits(w, c->plan->ranks_per_node, &ra, &rb)) {
    if (err && len)
      snprintf(err, len, "plan %s joins ranks %u and %u through memory, but they are on different hosts",
               c->plan->name, ra, rb);
    return SHUNT_EXEC_INVALID;
  }
  /* The world's kernels are loaded in the device's primary context (the runtime's): a stream
   * of another context cannot run them. A default-stream handle names the world context's own. */
  CUcontext sctx = NULL;
  const struct shunt_cu* wcu = shunt_gpu_world_cu(w);
  if ((uintptr_t)c->stream > 2 &&
      (wcu->StreamGetCtx((CUstream)c->stream, &sctx) != CUDA_SUCCESS || sctx != shunt_gpu_world_ctx(w))) {
    if (err && len)
      snprintf(
          err, len,
          "stream %p is not a stream of device %d's primary context (the CUDA runtime's), where shunt's GPU "
          "kernels run: use a stream of that context",
          c->stream, shunt_gpu_world_device(w));
    return SHUNT_EXEC_INVALID;
  }
  /* Registered buffers are reached in place through CUDA IPC, which a rank of another host
   * has not: a world across hosts stages them. */
  struct zc z = {NULL, NULL};
  if (c->split.head && !shunt_gpu_world_spans(w)) zero_copy(g, c, &z);
  struct shunt_cu_guard cg = shunt_cu_enter(shunt_gpu_world_cu(w), shunt_gpu_world_ctx(w), 0);
  int rc = SHUNT_EXEC_INVALID;
  if (shunt_gpu_world_order_begin(w, (CUstream)c->stream, err, len) == 0) {
    rc = run_call(g, w, c, &z, err, len);
    /* Recorded even after a failure midway: what was enqueued is ordered before the next. */
    char why[256];
    if (shunt_gpu_world_order_end(w, (CUstream)c->stream, true, why, sizeof(why)) != 0 &&
        rc == SHUNT_EXEC_OK) {
      if (err && len) snprintf(err, len, "%s", why);
      rc = SHUNT_EXEC_INVALID;
    }
  }
  shunt_cu_leave(&cg);
  return rc;
}

static int check(struct shunt_backend* b, char* err, size_t len) {
  struct gpu_backend* g = (struct gpu_backend*)b;
  if (err && len) err[0] = 0;
  struct shunt_gpu_world* w = atomic_load(&g->world);
  if (!w) return SHUNT_EXEC_OK;
  return shunt_gpu_world_check(w, atomic_load(&g->last), err, len) == SHUNT_GPU_OK ? SHUNT_EXEC_OK
                                                                                   : SHUNT_EXEC_TIMEOUT;
}

static void abort_(struct shunt_backend* b) {
  struct shunt_gpu_world* w = atomic_load(&((struct gpu_backend*)b)->world);
  if (w) shunt_gpu_world_abort(w);
}

static void end(struct shunt_backend* b) {
  struct gpu_backend* g = (struct gpu_backend*)b;
  shunt_gpu_regs_free(g->regs, g->cu, g->ctx);
  g->regs = NULL;
  pthread_mutex_destroy(&g->mu);
}

const struct shunt_backend_ops shunt_gpu_backend_ops = {"gpu", prepare, run, check, abort_, free_world, end};

void* shunt_backend_register(struct shunt_backend* b, void* buf, size_t bytes, char* err, size_t len) {
  if (!b || b->kind != SHUNT_BACKEND_GPU) {
    if (err && len) snprintf(err, len, "not a GPU backend");
    return NULL;
  }
  struct shunt_gpu_reg* r = shunt_gpu_reg_add(((struct gpu_backend*)b)->regs, shunt_cu(NULL, 0), buf, bytes);
  if (!r && err && len) snprintf(err, len, "out of memory");
  return r;
}

void shunt_backend_deregister(struct shunt_backend* b, void* handle) {
  if (!b || b->kind != SHUNT_BACKEND_GPU || !handle) return;
  struct gpu_backend* g = (struct gpu_backend*)b;
  struct shunt_gpu_world* w = atomic_load(&g->world);
  /* No kernel of this rank may still read through it; when that cannot be known, it stays
   * mapped until the communicator ends. */
  if (w && shunt_gpu_world_quiesce(w) != SHUNT_GPU_OK) {
    SHUNT_WARN("rank %u: a deregistered buffer stays mapped until the communicator is destroyed", b->rank);
    return;
  }
  shunt_gpu_reg_remove(g->regs, g->cu, g->ctx, handle);
}

struct shunt_gpu_world* shunt_gpu_backend_world(struct shunt_backend* b) {
  return atomic_load(&((struct gpu_backend*)b)->world);
}

int shunt_gpu_current_device(void) {
  const struct shunt_cu* cu = shunt_cu(NULL, 0);
  CUdevice d = -1;
  if (!cu || cu->CtxGetDevice(&d) != CUDA_SUCCESS) return -1;
  return d;
}

bool shunt_gpu_stream_capturing(void* stream) {
  const struct shunt_cu* cu = shunt_cu(NULL, 0);
  int st = CU_STREAM_CAPTURE_STATUS_NONE;
  return cu && cu->StreamIsCapturing((CUstream)stream, &st) == CUDA_SUCCESS &&
         st != CU_STREAM_CAPTURE_STATUS_NONE;
}
