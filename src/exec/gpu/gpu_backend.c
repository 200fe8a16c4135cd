/* The GPU backend behind exec/backend.h: a GPU world (gpu_world.h) made or grown when a call
 * needs it, programs uploaded once per shape and kept with the world, a call's head and tail
 * (exec/split.h) enqueued on the caller's stream in one ordered section. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/backend.h"
#include "exec/steps.h"
#include "transport/cu.h"
#include "exec/gpu/gpu_agree.h"
#include "exec/gpu/gpu_backend.h"
#include "exec/gpu/gpu_reg.h"
#include "exec/gpu/gpu_run.h"
#include "exec/gpu/gpu_world.h"
#include "util/status.h"
#include "util/env.h"
#include "util/log.h"

#define UPLOADS 64
#define DP(p) ((CUdeviceptr)(uintptr_t)(p))

/* What keeps a world alive for the graphs captured on it: the backend's reference while the
 * world is current or retired, and one per captured call, held by a CUDA user object that the
 * driver drops when the last graph (and instantiated graph) retaining it is destroyed, after
 * their launches completed. The driver calls the destructor from a thread of its own, where no
 * CUDA call and no collective step may be made: it only counts; the world itself is released
 * by the backend at its next call. */
struct keeper {
  _Atomic int refs;       /* the backend's, plus graphs */
  _Atomic int graphs;     /* user objects the driver still holds */
  _Atomic bool untracked; /* a capture could not be tied to its graph: kept until the end */
};

static struct keeper* keeper_new(void) {
  struct keeper* k = calloc(1, sizeof(*k));
  if (k) atomic_init(&k->refs, 1);
  return k;
}

static void keeper_put(struct keeper* k) {
  if (k && atomic_fetch_sub(&k->refs, 1) == 1) free(k);
}

/* The user object's destructor (a driver thread: no CUDA calls). */
static void graph_gone(void* p) {
  struct keeper* k = p;
  atomic_fetch_sub(&k->graphs, 1);
  keeper_put(k);
}

/* Whether a retired world may go now: no graph of this rank can replay on it. */
static bool keeper_free(struct keeper* k) {
  return k && !atomic_load(&k->untracked) && atomic_load(&k->graphs) == 0;
}

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
  /* The same-host board on which every call's zero-copy binding is agreed (NULL: a world across
   * hosts, or a board some rank could not map: every call staged on every rank). Made with the
   * first world, by every rank at the same call. */
  struct shunt_gpu_agree* board;
  bool board_tried;
  _Atomic bool aborted; /* set by abort from any thread: a wait on the board gives up */
  /* Worlds (and tail staging) outgrown by a larger call while a graph on some rank may replay
   * on them: each goes, on this rank alone, once no graph of this rank holds it (its keeper);
   * those whose graphs could not be tracked go with the backend. */
  struct retired {
    struct shunt_gpu_world* world;
    char* tail;
    struct keeper* keeper;
    struct retired* next;
  } * retired;
  struct keeper* keeper; /* the current world's (NULL: untracked, out of memory) */
  /* A call on the current world was captured into a graph on this rank (set before its launch,
   * read when the world is outgrown). */
  bool captured;
  const struct shunt_cu* cu; /* set with the first world, kept for the registrations */
  CUcontext ctx;
};

static void reap_orphans(void);

struct shunt_backend* shunt_gpu_backend_alloc(void) {
  struct gpu_backend* g = calloc(1, sizeof(*g));
  if (!g) return NULL;
  if (!(g->regs = shunt_gpu_regs_new())) {
    free(g);
    return NULL;
  }
  pthread_mutex_init(&g->mu, NULL);
  reap_orphans();
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

/* Worlds whose communicator ended while a graph of this process may still replay on them
 * (struct keeper): aborted, so that a replay returns at its start, with what the replay touches
 * (their remains, gpu_world.h, and tail staging) kept until the driver drops the graphs. Their
 * own backend is gone, so the next set-up or call of any communicator of the process frees
 * them: process-wide, under its lock. */
struct orphan {
  struct shunt_gpu_remains* rem;
  char* tail;
  const struct shunt_cu* cu;
  CUcontext ctx;
  struct keeper* keeper;
  struct orphan* next;
};
static pthread_mutex_t orphans_mu = PTHREAD_MUTEX_INITIALIZER;
static struct orphan* orphans;

static void reap_orphans(void) {
  pthread_mutex_lock(&orphans_mu);
  for (struct orphan** pp = &orphans; *pp;) {
    struct orphan* o = *pp;
    if (!keeper_free(o->keeper)) {
      pp = &o->next;
      continue;
    }
    *pp = o->next;
    if (o->tail) {
      struct shunt_cu_guard cg = shunt_cu_enter(o->cu, o->ctx, 1);
      o->cu->MemFree(DP(o->tail));
      shunt_cu_leave(&cg);
    }
    shunt_gpu_remains_free(o->rem);
    keeper_put(o->keeper);
    free(o);
  }
  pthread_mutex_unlock(&orphans_mu);
}

/* A world that a graph of this rank may replay on ends as an orphan (the keeper's reference
 * passes to it). Where its remains cannot be recorded they are never freed. */
static void end_held(struct shunt_gpu_world* w, char* tail, struct keeper* k, bool collective) {
  struct orphan* o = malloc(sizeof(*o));
  if (o) *o = (struct orphan){NULL, tail, shunt_gpu_world_cu(w), shunt_gpu_world_ctx(w), k, NULL};
  struct shunt_gpu_remains* rem = shunt_gpu_world_end_held(w, collective);
  if (!o || !rem) {
    /* Kept whole (a launch that could not be waited for), or no room: leaked, never freed
     * under a graph. */
    free(o);
    return;
  }
  o->rem = rem;
  pthread_mutex_lock(&orphans_mu);
  o->next = orphans;
  orphans = o;
  pthread_mutex_unlock(&orphans_mu);
}

/* The current world and everything kept with it go now (or, held by a graph, as an orphan). */
static void end_current(struct gpu_backend* g, bool collective) {
  struct shunt_gpu_world* w = atomic_load(&g->world);
  if (!w) return;
  /* This rank's launches complete before anything of theirs goes; when that cannot be known,
   * the tail staging stays (the world keeps its own memory likewise). */
  bool settled = shunt_gpu_world_quiesce(w) == SHUNT_OK;
  drop_uploads(g);
  if (!settled) g->tail = NULL;
  bool held = g->captured && !keeper_free(g->keeper);
  atomic_store(&g->world, NULL);
  g->captured = false;
  if (held) {
    end_held(w, g->tail, g->keeper, collective);
    g->tail = NULL;
    g->tail_cap = 0;
    g->keeper = NULL;
    return;
  }
  free_tail(g, w);
  keeper_put(g->keeper);
  g->keeper = NULL;
  end_world(w, collective);
}

/* A retired world goes, on this rank alone: ranks' graphs go at different times, so this can
 * never be collective. After this rank's eager launches and its graphs' launches (the driver
 * dropped the graphs' references only after those), no kernel of this rank uses it, and its
 * peers' kernels that waited on it have ended with it; peers' own copies are released by each
 * peer in turn (shunt_gpu_world_release only unmaps their regions here and frees this one's). */
static void release_retired(struct gpu_backend* g, struct retired* r) {
  /* When this rank's launches on it cannot be known complete, its tail staging stays. */
  bool settled = shunt_gpu_world_quiesce(r->world) == SHUNT_OK;
  char* tail = g->tail;
  uint64_t cap = g->tail_cap;
  g->tail = settled ? r->tail : NULL;
  free_tail(g, r->world);
  g->tail = tail;
  g->tail_cap = cap;
  shunt_gpu_world_release(r->world);
  keeper_put(r->keeper);
  free(r);
}

/* Releases the retired worlds no graph of this rank holds any more. */
static void reap(struct gpu_backend* g) {
  if (!g->retired) return;
  /* Relaxed: the call that reaps may itself be being captured. */
  struct shunt_cu_guard cg = shunt_cu_enter(g->cu, g->ctx, 1);
  for (struct retired** pp = &g->retired; *pp;) {
    struct retired* r = *pp;
    if (keeper_free(r->keeper)) {
      *pp = r->next;
      release_retired(g, r);
    } else {
      pp = &r->next;
    }
  }
  shunt_cu_leave(&cg);
}

static void gpu_backend_free_world(struct shunt_backend* b, bool collective) {
  struct gpu_backend* g = (struct gpu_backend*)b;
  end_current(g, collective);
  /* Ranks may have released different retired worlds already: none of this is collective. */
  while (g->retired) {
    struct retired* r = g->retired;
    g->retired = r->next;
    if (keeper_free(r->keeper)) {
      release_retired(g, r);
    } else {
      end_held(r->world, r->tail, r->keeper, false);
      free(r);
    }
  }
}

/* The current world steps aside for a larger one: its programs' memory goes with it (into its
 * deferred frees), and it is kept, with its tail staging, for graphs captured on it. */
static void retire_world(struct gpu_backend* g) {
  struct shunt_gpu_world* w = atomic_load(&g->world);
  struct retired* r = malloc(sizeof(*r));
  drop_uploads(g);
  /* Out of memory for the record: the old world is left alive unrecorded (a leak) rather than
   * freed under a graph that may replay on it. */
  if (r) {
    r->world = w;
    r->tail = g->tail;
    r->keeper = g->keeper;
    r->next = g->retired;
    g->retired = r;
  } else {
    keeper_put(g->keeper);
  }
  g->keeper = NULL;
  g->tail = NULL;
  g->tail_cap = 0;
  atomic_store(&g->world, NULL);
}

/* Whether any rank captured a call on its current world into a graph. Collective: every rank
 * grows at the same call. A failed exchange counts as captured (the world is kept: safe). */
static bool captured_anywhere(struct gpu_backend* g) {
  uint32_t n = g->base.nranks;
  uint8_t* all = calloc(n, 1);
  /* Without room for the exchange this rank cannot take part: its peers' exchange fails. */
  if (!all) return true;
  all[g->base.rank] = g->captured;
  bool any = g->base.ex.oob.allgather(g->base.ex.oob.ctx, all, 1) != 0;
  for (uint32_t q = 0; q < n && !any; q++) any = all[q] != 0;
  free(all);
  return any;
}

static int gpu_backend_prepare(struct shunt_backend* b, const struct shunt_plan* plan,
                               const struct shunt_split* s, char* err, size_t len) {
  struct gpu_backend* g = (struct gpu_backend*)b;
  reap(g);
  reap_orphans();
  (void)plan;
  uint64_t scratch = s->scratch, in_need = s->in_need, out_need = s->out_need, tail_need = s->tail_bytes;
  struct shunt_gpu_world* w = atomic_load(&g->world);
  if (w && g->cfg.scratch_bytes >= scratch && g->cfg.input_bytes >= in_need &&
      g->cfg.output_bytes >= out_need && g->tail_cap >= tail_need)
    return SHUNT_OK;
  struct shunt_gpu_world_config cfg = {shunt_backend_round(scratch), shunt_backend_round(in_need),
                                       shunt_backend_round(out_need), 0, b->device};
  uint64_t tail_cap = tail_need ? shunt_backend_round(tail_need) : 0;
  if (w) {
    if (g->cfg.scratch_bytes > cfg.scratch_bytes) cfg.scratch_bytes = g->cfg.scratch_bytes;
    if (g->cfg.input_bytes > cfg.input_bytes) cfg.input_bytes = g->cfg.input_bytes;
    if (g->cfg.output_bytes > cfg.output_bytes) cfg.output_bytes = g->cfg.output_bytes;
    if (g->tail_cap > tail_cap) tail_cap = g->tail_cap;
    /* Every rank grows at the same call. A world no rank captured into a graph is used by
     * nothing once this rank's launches on it are done: it goes now, with every rank
     * (collective, at this call on every rank). One a graph may replay on stays. */
    if (captured_anywhere(g)) {
      retire_world(g);
    } else {
      /* Relaxed: the growing call may itself be being captured (waiting for the old world's
       * eager launches and freeing its memory neither fail nor break that capture). */
      struct shunt_cu_guard cg = shunt_cu_enter(g->cu, g->ctx, 1);
      end_current(g, true);
      shunt_cu_leave(&cg);
    }
  }
  struct shunt_gpu_world* made = NULL;
  SHUNT_TRY_AT(shunt_gpu_world_create(b->rank, b->nranks, &cfg, &b->ex, &made, err, len),
               "the GPU backend could not set up");
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
      shunt_gpu_world_destroy(made);
      SHUNT_FAIL(e == CUDA_ERROR_OUT_OF_MEMORY ? SHUNT_E_NOMEM : SHUNT_E_CUDA,
                 "cuMemAlloc(device memory for a %llu-byte tail): %s", (unsigned long long)tail_cap,
                 shunt_cu_error(e));
    }
    g->tail = (char*)(uintptr_t)d;
    g->tail_cap = tail_cap;
  }
  g->cu = shunt_gpu_world_cu(made);
  g->ctx = shunt_gpu_world_ctx(made);
  g->captured = false;
  g->keeper = keeper_new();
  atomic_store(&g->world, made);
  /* Every rank made its first world at this call, and knows alike whether it spans hosts. */
  if (!g->board_tried && !shunt_gpu_world_spans(made)) {
    char why2[256];
    g->board_tried = true;
    g->board = shunt_gpu_agree_new(b->rank, b->nranks, &b->ex, why2, sizeof(why2));
    if (!g->board) SHUNT_INFO(SHUNT_ALLOC, "rank %u: registered buffers will be staged: %s", b->rank, why2);
  }
  return SHUNT_OK;
}

/* The upload of the program for `shape`, made on first use. */
static struct shunt_gpu_prog* upload_for(struct gpu_backend* g, struct shunt_gpu_world* w,
                                         const struct shunt_plan* plan, const struct shunt_call_shape* shape,
                                         int* code, char* err, size_t len) {
  *code = SHUNT_E_INVALID;
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
    if ((*code = shunt_gpu_prog_create(w, p, 0, &gp, err, len)) != SHUNT_OK) {
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

static int launch_part(struct gpu_backend* g, struct shunt_gpu_world* w, const struct shunt_backend_call* c,
                       const struct shunt_call_shape* shape, const void* in, void* out,
                       const struct shunt_gpu_zc* z, char* err, size_t len) {
  int code = 0;
  struct shunt_gpu_prog* gp = upload_for(g, w, c->plan, shape, &code, err, len);
  if (!gp) return code;
  struct shunt_gpu_run r = {w,    gp,   in,   out, c->scalar, c->timeout_ms * 1000000ull,
                            true, NULL, NULL, 0,   0,         c->scalar_on_device};
  /* The tables hold each rank's own address of this call's buffers: no offset on top. */
  if (z) {
    r.zc_out = z->out;
    r.zc_in = z->in;
  }
  atomic_store(&g->last, gp->host);
  return shunt_gpu_launch(&r, (CUstream)c->stream, err, len);
}

/* A root's input moved into its output (exec/backend.h: move_from), memmove on the device, in
 * stream order: pieces that never overlap what is still to be read
 * (from the end when the output lies above the input), each one copy when the buffers are at
 * least a piece apart, else bounced through the world's input staging or the tail staging. */
static int move_input(struct gpu_backend* g, struct shunt_gpu_world* w, const struct shunt_backend_call* c,
                      char* err, size_t len) {
  const struct shunt_cu* cu = shunt_gpu_world_cu(w);
  CUstream st = (CUstream)c->stream;
  const char* in = c->move_from;
  char* out = c->out;
  uint64_t n = c->split->call.in_bytes, d = in < out ? (uint64_t)(out - in) : (uint64_t)(in - out);
  char* bounce = shunt_gpu_world_stage(w, 0);
  uint64_t cap = g->cfg.input_bytes;
  if (g->tail_cap > cap) bounce = g->tail, cap = g->tail_cap;
  uint64_t piece = d >= cap || !bounce ? d : cap;
  CUresult e = CUDA_SUCCESS;
  for (uint64_t done = 0; done < n && e == CUDA_SUCCESS;) {
    uint64_t b = n - done < piece ? n - done : piece;
    uint64_t at = in < out ? n - done - b : done;
    if (b <= d) {
      e = cu->MemcpyAsync(DP(out + at), DP(in + at), b, st);
    } else {
      e = cu->MemcpyAsync(DP(bounce), DP(in + at), b, st);
      if (e == CUDA_SUCCESS) e = cu->MemcpyAsync(DP(out + at), DP(bounce), b, st);
    }
    done += b;
  }
  if (e == CUDA_SUCCESS) return SHUNT_OK;
  SHUNT_FAIL(SHUNT_E_CUDA, "cuMemcpyAsync(moving the root's input into its output): %s", shunt_cu_error(e));
}

static CUresult copies_async(const struct shunt_cu* cu, const struct shunt_copies* c, CUstream st) {
  CUresult e = CUDA_SUCCESS;
  for (uint32_t k = 0; k < c->n && e == CUDA_SUCCESS; k++)
    e = cu->MemcpyAsync(DP(c->dst + (uint64_t)k * c->dst_stride), DP(c->src + (uint64_t)k * c->src_stride),
                        c->bytes, st);
  return e;
}

/* The head on the user's buffers, then the tail padded with zeros in the device staging, all
 * in one ordered section of the world's launches (the staging is shared by every call). */
static int run_call(struct gpu_backend* g, struct shunt_gpu_world* w, const struct shunt_backend_call* c,
                    const struct shunt_gpu_zc* z, char* err, size_t len) {
  const struct shunt_cu* cu = shunt_gpu_world_cu(w);
  CUstream st = (CUstream)c->stream;
  struct shunt_parts pt;
  shunt_parts_plan(c->plan, c->split, g->base.rank, c->in, c->out, g->tail, &pt);
  if (pt.head.shape) {
    int rc = launch_part(g, w, c, pt.head.shape, pt.head.in, pt.head.out, z, err, len);
    if (rc != SHUNT_OK) return rc;
  }
  if (!pt.tail.shape) return SHUNT_OK;
  if (pt.zero_bytes > g->tail_cap)
    SHUNT_FAIL(SHUNT_E_INVALID, "the tail staging holds %llu bytes, the call needs %llu",
               (unsigned long long)g->tail_cap, (unsigned long long)pt.zero_bytes);
  CUresult e = cu->MemsetD8Async(DP(pt.zero), 0, pt.zero_bytes, st);
  if (e != CUDA_SUCCESS) SHUNT_FAIL(SHUNT_E_CUDA, "cuMemsetD8Async(staging the tail): %s", shunt_cu_error(e));
  e = copies_async(cu, &pt.tail_in, st);
  if (e != CUDA_SUCCESS) SHUNT_FAIL(SHUNT_E_CUDA, "cuMemcpyAsync(staging the tail): %s", shunt_cu_error(e));
  int rc = launch_part(g, w, c, pt.tail.shape, pt.tail.in, pt.tail.out, NULL, err, len);
  if (rc != SHUNT_OK) return rc;
  e = copies_async(cu, &pt.tail_out, st);
  if (e != CUDA_SUCCESS)
    SHUNT_FAIL(SHUNT_E_CUDA, "cuMemcpyAsync(copying the tail out): %s", shunt_cu_error(e));
  return SHUNT_OK;
}

/* Whether any rank's program of the plan reaches a peer's user buffer (exec/lower.c's
 * remote_access, over every rank): known alike on every rank, so every rank binds the same
 * calls. Plans that move everything through scratch (the LL ones, the small calls) never bind. */
static bool plan_reaches_user(const struct shunt_plan* p) {
  for (uint32_t g = 0; g < p->ngpus; g++) {
    const struct shunt_plan_gpu* gp = &p->gpus[g];
    for (uint32_t i = 0; i < gp->nremote_buffers; i++)
      if (gp->remote_buffers[i].type == SHUNT_BUF_INPUT || gp->remote_buffers[i].type == SHUNT_BUF_OUTPUT)
        return true;
    for (uint32_t i = 0; i < gp->nchannels[SHUNT_CHAN_SWITCH]; i++) {
      enum shunt_buf_type t = gp->channels[SHUNT_CHAN_SWITCH][i].buffer_type;
      if (t == SHUNT_BUF_INPUT || t == SHUNT_BUF_OUTPUT) return true;
    }
  }
  return false;
}

/* Whether a rank waiting on the board should stop: the communicator was aborted (from another
 * thread) or its world broke (a peer may never come). */
static bool give_up(void* p) {
  struct gpu_backend* g = p;
  struct shunt_gpu_world* w = atomic_load(&g->world);
  return atomic_load(&g->aborted) || (w && shunt_gpu_world_broken(w));
}

/* Whether every kernel this rank launched so far is done: peers' mappings that no verdict
 * needs any more close then (gpu_reg.h). An outgrown world's last kernels may still run and
 * read them. */
static bool drained(void* p) {
  struct gpu_backend* g = p;
  for (struct retired* r = g->retired; r; r = r->next)
    if (!shunt_gpu_world_drained(r->world)) return false;
  return shunt_gpu_world_drained(atomic_load(&g->world));
}

/* Which of the call head's buffers peers reach in place (gpu_reg.h: agreed with every rank at
 * this call): both when the call is not in place; in place only the buffer that holds the
 * other (the output, or reducescatter's input). */
/* SHUNT_ZERO_COPY, read once: it is asked at every call. */
static pthread_once_t zc_once = PTHREAD_ONCE_INIT;
static int zc_asked;
static void zc_read(void) {
  zc_asked = shunt_env_bool("SHUNT_ZERO_COPY", 0);
}
static bool zero_copy_asked(void) {
  pthread_once(&zc_once, zc_read);
  return zc_asked != 0;
}

static int zero_copy(struct gpu_backend* g, const struct shunt_backend_call* c, struct shunt_gpu_zc* z,
                     char* err, size_t len) {
  /* Agreeing on zero-copy is a host rendezvous of the ranks at every call that could use it
   * (gpu_reg.h): a rank's call then waits for its peers' calls, which NCCL's never does. Only
   * where the job asks for it (SHUNT_ZERO_COPY=1, on every rank); otherwise every rank stages. */
  if (!zero_copy_asked()) {
    z->in = z->out = NULL;
    return 0;
  }
  bool inplace = c->split->inplace;
  struct shunt_gpu_world* w = atomic_load(&g->world);
  CUstream ws = w ? shunt_gpu_world_stream(w) : NULL;
  bool captured = shunt_gpu_stream_capturing(c->stream);
  const struct shunt_gpu_reg_waits waits = {give_up, drained, g};
  if (inplace && shunt_coll_out_in_input(c->plan->coll)) {
    /* The mirror: the input holds the output, so the input is the buffer peers reach; bound
     * as the holder, its table is the input's. */
    struct shunt_gpu_zc h = {NULL, NULL};
    int rc = shunt_gpu_reg_bind(g->regs, g->cu, g->ctx, ws, g->board, g->base.rank, g->base.nranks, c->out,
                                c->split->call.out_bytes, c->in, c->split->call.in_bytes, true, captured,
                                &waits, &h, err, len);
    z->in = h.out;
    z->out = NULL;
    return rc;
  }
  return shunt_gpu_reg_bind(g->regs, g->cu, g->ctx, ws, g->board, g->base.rank, g->base.nranks, c->in,
                            c->split->call.in_bytes, c->out, c->split->call.out_bytes, inplace, captured,
                            &waits, z, err, len);
}

static void tie_to_graph(struct gpu_backend* g, CUstream st);

static int gpu_backend_run(struct shunt_backend* b, const struct shunt_backend_call* c, char* err,
                           size_t len) {
  struct gpu_backend* g = (struct gpu_backend*)b;
  struct shunt_gpu_world* w = atomic_load(&g->world);
  if (!w) SHUNT_FAIL(SHUNT_E_INVALID, "no world");
  if (shunt_gpu_world_broken(w)) {
    char why[1024];
    int was = shunt_gpu_world_check(w, atomic_load(&g->last), why, sizeof(why));
    SHUNT_FAIL(was != SHUNT_OK ? was : SHUNT_E_ABORTED, "an earlier run on this communicator failed: %s",
               why);
  }
  uint32_t ra, rb;
  if (!shunt_gpu_world_fits(w, c->plan->ranks_per_node, &ra, &rb))
    SHUNT_FAIL(SHUNT_E_INVALID,
               "plan %s joins ranks %u and %u through memory, but they are on different hosts", c->plan->name,
               ra, rb);
  /* The world's kernels are loaded in the device's primary context (the runtime's): a stream
   * of another context cannot run them. A default-stream handle names the world context's own. */
  CUcontext sctx = NULL;
  const struct shunt_cu* wcu = shunt_gpu_world_cu(w);
  if ((uintptr_t)c->stream > 2 &&
      (wcu->StreamGetCtx((CUstream)c->stream, &sctx) != CUDA_SUCCESS || sctx != shunt_gpu_world_ctx(w)))
    SHUNT_FAIL(
        SHUNT_E_INVALID,
        "stream %p is not a stream of device %d's primary context (the CUDA runtime's), where shunt's GPU "
        "kernels run: use a stream of that context",
        c->stream, shunt_gpu_world_device(w));
  /* Registered buffers are reached in place through CUDA IPC, which a rank of another host
   * has not: a world across hosts stages them. */
  struct shunt_gpu_zc z = {NULL, NULL};
  if (c->split->head && !shunt_gpu_world_spans(w) && plan_reaches_user(c->plan))
    SHUNT_TRY(zero_copy(g, c, &z, err, len));
  bool capturing = shunt_gpu_stream_capturing(c->stream);
  if (capturing) g->captured = true;
  struct shunt_cu_guard cg = shunt_cu_enter(shunt_gpu_world_cu(w), shunt_gpu_world_ctx(w), 0);
  int rc = shunt_gpu_world_order_begin(w, (CUstream)c->stream, err, len);
  if (rc == SHUNT_OK) {
    rc = c->move_from ? move_input(g, w, c, err, len) : SHUNT_OK;
    if (rc == SHUNT_OK) rc = run_call(g, w, c, &z, err, len);
    if (capturing) tie_to_graph(g, (CUstream)c->stream);
    /* Recorded even after a failure midway: what was enqueued is ordered before the next. */
    char why[256];
    int end = shunt_gpu_world_order_end(w, (CUstream)c->stream, true, why, sizeof(why));
    if (end != SHUNT_OK && rc == SHUNT_OK) {
      shunt_setf(err, len, "%s", why);
      rc = end;
    }
  }
  shunt_cu_leave(&cg);
  return rc;
}

/* The current world is kept for the graph that `st` is capturing into (see struct keeper); where
 * the driver cannot say which graph, the world is kept until the backend ends. */
static void tie_to_graph(struct gpu_backend* g, CUstream st) {
  const struct shunt_cu* cu = g->cu;
  struct keeper* k = g->keeper;
  if (!k) return; /* untracked: a retired world without a keeper is never released early */
  void* graph = NULL;
  void* obj = NULL;
  int status = 0;
  if (!cu->UserObjectCreate ||
      cu->StreamGetCaptureInfo(st, &status, NULL, &graph, NULL, NULL) != CUDA_SUCCESS || !graph) {
    atomic_store(&k->untracked, true);
    return;
  }
  atomic_fetch_add(&k->refs, 1);
  atomic_fetch_add(&k->graphs, 1);
  if (cu->UserObjectCreate(&obj, k, graph_gone, 1, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC) != CUDA_SUCCESS) {
    graph_gone(k);
    atomic_store(&k->untracked, true);
    return;
  }
  if (cu->GraphRetainUserObject(graph, obj, 1, CU_GRAPH_USER_OBJECT_MOVE) != CUDA_SUCCESS) {
    atomic_store(&k->untracked, true);
    cu->UserObjectRelease(obj, 1); /* its destructor undoes the counts */
  }
}

static int gpu_backend_check(struct shunt_backend* b, char* err, size_t len) {
  struct gpu_backend* g = (struct gpu_backend*)b;
  if (err && len) err[0] = 0;
  struct shunt_gpu_world* w = atomic_load(&g->world);
  if (!w) return SHUNT_OK;
  return shunt_gpu_world_check(w, atomic_load(&g->last), err, len);
}

static void gpu_backend_abort(struct shunt_backend* b) {
  atomic_store(&((struct gpu_backend*)b)->aborted, true);
  struct shunt_gpu_world* w = atomic_load(&((struct gpu_backend*)b)->world);
  if (w) shunt_gpu_world_abort(w);
}

static void gpu_backend_end(struct shunt_backend* b) {
  struct gpu_backend* g = (struct gpu_backend*)b;
  shunt_gpu_regs_free(g->regs, g->cu, g->ctx);
  g->regs = NULL;
  shunt_gpu_agree_free(g->board);
  g->board = NULL;
  pthread_mutex_destroy(&g->mu);
}

const struct shunt_backend_ops shunt_gpu_backend_ops = {"gpu",
                                                        gpu_backend_prepare,
                                                        gpu_backend_run,
                                                        gpu_backend_check,
                                                        gpu_backend_abort,
                                                        gpu_backend_free_world,
                                                        gpu_backend_end};

void* shunt_backend_register(struct shunt_backend* b, void* buf, size_t bytes, char* err, size_t len) {
  if (!b || b->kind != SHUNT_BACKEND_GPU) {
    shunt_setf(err, len, "not a GPU backend");
    return NULL;
  }
  struct shunt_gpu_reg* r = shunt_gpu_reg_add(((struct gpu_backend*)b)->regs, shunt_cu(NULL, 0), buf, bytes);
  if (!r) shunt_setf(err, len, "out of memory");
  return r;
}

void shunt_backend_deregister(struct shunt_backend* b, void* handle) {
  if (!b || b->kind != SHUNT_BACKEND_GPU || !handle) return;
  /* Nothing to wait for: peers close their mappings of it at the next round (gpu_reg.h). */
  shunt_gpu_reg_remove(((struct gpu_backend*)b)->regs, handle);
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
