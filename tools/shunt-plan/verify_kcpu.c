/* shunt-plan verify --backend kernel-cpu: the GPU backend's kernel, compiled for the CPU
 * (exec/kcpu), runs the plan with every rank a thread of this process (verify.h). A broadcast
 * plan runs renamed for every root its placement allows (or --root), in place and out of place
 * (or the mode asked for), as the host runner runs it. */
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/kcpu/kcpu_world.h"
#include "exec/lower.h"
#include "exec/split.h"
#include "exec/steps.h"
#include "plan/rotate.h"
#include "transport/world.h"
#include "verify.h"
#include "verify_ref.h"

#define SLOT 256 /* bytes a rank contributes to one allgather of the world's creation */

/* Ranks as threads: a barrier, an allgather and a vote, all over one mutex. */
struct team {
  uint32_t n;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  unsigned arrived, gen;
  bool any_bad, all_ok;
  char* slots;
};

struct job {
  const struct vopts* o;
  const struct shunt_plan* plan;
  const struct shape* shapes;
  unsigned nshapes, threads;
  bool inplace;     /* the calls' mode (the plan's own, or each of a broadcast's) */
  const char* what; /* a broadcast's root and mode ("root R in place, "), else "" */
  struct team team;
  struct shunt_kcpu_world_config cfg;
  struct verify_needs need; /* the world config and the buffers below follow from it */
  char** exp;               /* [iters]: the reference output of each execution; each rank writes a slice */
  pthread_mutex_t mu;
  int status;
  char* msg;
  size_t len;
};

struct rank_ctx {
  struct job* J;
  uint32_t rank;
};

static void team_wait(struct team* t) {
  unsigned g = t->gen;
  if (++t->arrived == t->n) {
    t->arrived = 0;
    t->gen++;
    pthread_cond_broadcast(&t->cv);
  } else {
    while (g == t->gen) pthread_cond_wait(&t->cv, &t->mu);
  }
}

static int team_barrier(void* ctx) {
  struct team* t = &((struct rank_ctx*)ctx)->J->team;
  pthread_mutex_lock(&t->mu);
  team_wait(t);
  pthread_mutex_unlock(&t->mu);
  return 0;
}

static int team_allgather(void* ctx, void* buf, size_t bytes) {
  struct rank_ctx* c = ctx;
  struct team* t = &c->J->team;
  if (bytes > SLOT) return -1;
  memcpy(t->slots + (size_t)c->rank * SLOT, (char*)buf + (size_t)c->rank * bytes, bytes);
  team_barrier(ctx);
  for (uint32_t r = 0; r < t->n; r++)
    memcpy((char*)buf + (size_t)r * bytes, t->slots + (size_t)r * SLOT, bytes);
  return team_barrier(ctx);
}

/* A barrier that tells every rank whether all are fine, so they stop together. */
static bool team_agree(struct rank_ctx* c, bool ok) {
  struct team* t = &c->J->team;
  pthread_mutex_lock(&t->mu);
  if (!ok) t->any_bad = true;
  if (t->arrived + 1 == t->n) {
    t->all_ok = !t->any_bad;
    t->any_bad = false;
  }
  team_wait(t);
  bool r = t->all_ok;
  pthread_mutex_unlock(&t->mu);
  return r;
}

static void record(struct job* J, int status, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
static void record(struct job* J, int status, const char* fmt, ...) {
  pthread_mutex_lock(&J->mu);
  /* The first failure is kept, except that a mismatch or an error outranks the timeouts it
   * causes on other ranks. */
  if (J->status == VERIFY_PASS || (J->status == VERIFY_TIMEOUT && status != VERIFY_TIMEOUT)) {
    J->status = status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(J->msg, J->len, fmt, ap);
    va_end(ap);
  }
  pthread_mutex_unlock(&J->mu);
}

/* One part of a call (exec/split.h) on the kernel's CPU build. */
struct part_ctx {
  struct shunt_kcpu_world* w;
  const struct shunt_kcpu_prog *head, *tail;
  const char* scalar;
  unsigned skew;
  char* err;
  size_t len;
};

static int run_part(void* arg, const struct shunt_call_shape* shape, bool tail, const void* in, void* out) {
  (void)shape; /* the programs were lowered for both parts beforehand */
  struct part_ctx* c = arg;
  struct shunt_kcpu_run r = {tail ? c->tail : c->head, in, out, c->scalar, c->skew};
  return shunt_kcpu_launch(c->w, &r, c->err, c->len);
}

static void* rank_main(void* arg) {
  struct rank_ctx* c = arg;
  struct job* J = c->J;
  const struct vopts* o = J->o;
  const struct shunt_plan* plan = J->plan;
  uint32_t rank = c->rank, nranks = plan->ngpus;
  /* What the reference is (util/coll_traits.h). */
  enum shunt_coll_ref ref_kind = shunt_coll_traits(plan->coll)->ref;
  bool rs = ref_kind == SHUNT_REF_REDUCED_MINE;
  bool bcast = ref_kind == SHUNT_REF_ROOT_INPUT;
  bool a2a = ref_kind == SHUNT_REF_TRANSPOSED;
  bool reduce = shunt_coll_reduces(plan->coll);
  bool inplace = J->inplace;
  struct shunt_world_exchange bs = {.oob = {c, team_allgather, team_barrier}};
  struct shunt_kcpu_world* w = NULL;
  char err[1024];
  if (shunt_kcpu_world_create(rank, nranks, &J->cfg, &bs, &w, err, sizeof(err)) != 0) {
    record(J, VERIFY_ERROR, "rank %u: world: %s", rank, err);
    return NULL; /* creation is all or nothing: every rank gets here */
  }
  char* in = malloc(J->need.max_in + 16);
  char* out = malloc(J->need.max_out + 16);
  char* tail = malloc(J->need.tail + 16);
  char* tmp = malloc(J->need.max_out + 16);
  char** outs = calloc(o->iters, sizeof(*outs));
  bool ok = in && out && tail && tmp && outs;
  for (unsigned it = 0; ok && it < o->iters; it++) ok = (outs[it] = malloc(J->need.max_out + 16)) != NULL;
  if (!ok) record(J, VERIFY_ERROR, "rank %u: out of memory", rank);
  for (unsigned k = 0; k < J->nshapes; k++) {
    const struct shape* s = &J->shapes[k];
    struct shunt_call_shape cs = {
        s->in, s->out, s->dt, s->op, (enum shunt_pkt_type)o->pkt,
        0,     false, false};
    struct shunt_split sp;
    struct shunt_program *ph = NULL, *pt = NULL;
    struct shunt_kcpu_prog *kh = NULL, *kt = NULL;
    if (ok && !shunt_split_call(plan, &cs, &sp, err, sizeof(err))) ok = false;
    /* The buffers: NCCL's rule in this mode (a rooted collective's other ranks bind as the API
     * binds them; user_out NULL: none). */
    char *user_in = NULL, *user_out = NULL;
    bool mine = inplace;
    verify_bind(plan, rank, s->in, s->out, in, out, &user_in, &user_out, &mine);
    sp.inplace = mine;
    if (ok && sp.head && !(ph = shunt_lower(plan, rank, &sp.head_shape, err, sizeof(err)))) ok = false;
    if (ok && sp.rest && !(pt = shunt_lower(plan, rank, &sp.tail_shape, err, sizeof(err)))) ok = false;
    if (ok && ph && shunt_kcpu_prog_create(w, ph, J->threads, &kh, err, sizeof(err))) ok = false;
    if (ok && pt && shunt_kcpu_prog_create(w, pt, J->threads, &kt, err, sizeof(err))) ok = false;
    if (!ok && J->status == VERIFY_PASS)
      record(J, VERIFY_ERROR, "rank %u: %" PRIu64 " bytes: %s", rank, s->total, err);
    ok = team_agree(c, ok);
    char scalar[8];
    verify_premul_scalar(s->dt, scalar);
    /* The executions run back to back, as on a stream: nothing waits for the peers between
     * them, so flags, scratch halves and the epoch must keep them apart. */
    for (unsigned it = 0; ok && it < o->iters; it++) {
      unsigned seed = k * 131 + it;
      if (user_out) memset(user_out, 0xa5, s->out);
      verify_fill_input(user_in, 0, s->in, rank, nranks, seed, s->dt, s->op, reduce);
      /* Only rank 0 runs skewed: its peers, unhindered, consume whatever it publishes early. */
      unsigned skew = rank == 0 ? o->skew_us : 0;
      struct part_ctx pc = {w, kh, kt, scalar, skew, err, sizeof(err)};
      int rc = shunt_parts_run_host(plan, &sp, rank, user_in, user_out, tail, run_part, &pc);
      if (rc) {
        record(J, rc == SHUNT_E_TIMEOUT ? VERIFY_TIMEOUT : VERIFY_ERROR,
               "%s%" PRIu64 " bytes, %s %s, iteration %u, %u threads per block: rank %u: %s", J->what,
               s->total, verify_dt_names[s->dt], reduce ? verify_op_names[s->op] : "-", it, J->threads, rank,
               err);
        ok = false;
        break;
      }
      if (user_out) memcpy(outs[it], user_out, s->out);
    }
    /* This rank's slice of every execution's reference. */
    if (ok) {
      uint32_t es = shunt_dtype_size(s->dt);
      uint64_t nel = s->out / es, lo = nel * rank / nranks * es, hi = nel * (rank + 1) / nranks * es;
      /* Reducescatter: the rank's output is the sum of the ranks' slice `rank`, kept at that
       * slice of the reference (as long as the input), each rank computing its own. */
      if (rs) lo = (uint64_t)rank * s->out, hi = lo + s->out;
      for (unsigned it = 0; it < o->iters; it++) {
        unsigned seed = k * 131 + it;
        if (reduce) {
          verify_expected_allreduce(J->exp[it] + lo, tmp, lo, hi - lo, nranks, seed, s->dt,
                                    s->op);
        } else if (bcast) { /* the root's input */
          verify_fill_input(J->exp[it] + lo, lo, hi - lo, plan->root, nranks, seed, s->dt,
                            s->op, false);
        } else if (!a2a) { /* allgather (alltoall's reference is each rank's own, below) */
          verify_fill_input(tmp, 0, s->in, rank, nranks, seed, s->dt, s->op, false);
          memcpy(J->exp[it] + (uint64_t)rank * s->in, tmp, s->in);
        }
      }
    }
    ok = team_agree(c, ok);
    uint64_t at = rs ? (uint64_t)rank * s->out : 0;
    for (unsigned it = 0; ok && user_out && it < o->iters; it++) {
      const char* want = J->exp[it] + at;
      if (a2a) {
        /* This rank's own reference: block j is block `rank` of rank j's input. */
        uint64_t blk = s->in / nranks;
        for (uint32_t j = 0; j < nranks; j++)
          verify_fill_input(tmp + (uint64_t)j * blk, (uint64_t)rank * blk, blk, j, nranks, k * 131 + it,
                            s->dt, s->op, false);
        want = tmp;
      }
      if (memcmp(outs[it], want, s->out) == 0) continue;
      uint64_t b = 0;
      while (outs[it][b] == want[b]) b++;
      record(J, VERIFY_MISMATCH,
             "mismatch: %s, %s%" PRIu64 " bytes (head %" PRIu64 " + tail %" PRIu64
             " per rank), %s %s, iteration %u, %u threads per block: rank %u byte offset %" PRIu64
             ": expected 0x%02x, got 0x%02x",
             plan->name, J->what, s->total, sp.head, sp.rest, verify_dt_names[s->dt],
             reduce ? verify_op_names[s->op] : "-", it, J->threads, rank, b, (unsigned)(unsigned char)want[b],
             (unsigned)(unsigned char)outs[it][b]);
      break;
    }
    /* Nobody overwrites the references before every rank has compared; no program goes while
     * a peer's kernel may still run it. */
    ok = team_agree(c, ok);
    shunt_kcpu_prog_destroy(kh);
    shunt_kcpu_prog_destroy(kt);
    shunt_program_free(ph);
    shunt_program_free(pt);
    if (!ok) break;
  }
  shunt_kcpu_world_destroy(w);
  for (unsigned it = 0; outs && it < o->iters; it++) free(outs[it]);
  free(outs);
  free(in), free(out), free(tail), free(tmp);
  return NULL;
}

static int run_threads(struct job* J) {
  uint32_t n = J->plan->ngpus;
  pthread_t* th = calloc(n, sizeof(*th));
  struct rank_ctx* ctx = calloc(n, sizeof(*ctx));
  if (!th || !ctx) {
    free(th), free(ctx);
    snprintf(J->msg, J->len, "out of memory");
    return VERIFY_ERROR;
  }
  uint32_t started = 0;
  for (; started < n; started++) {
    ctx[started] = (struct rank_ctx){J, started};
    if (pthread_create(&th[started], NULL, rank_main, &ctx[started]) != 0) break;
  }
  if (started < n) {
    /* The started ranks wait in the world's creation for the missing ones: nothing to join. */
    fprintf(stderr, "cannot start rank thread %u of %u\n", started, n);
    exit(3);
  }
  for (uint32_t r = 0; r < n; r++) pthread_join(th[r], NULL);
  free(th), free(ctx);
  return J->status;
}

/* The job at each thread count of o->threads; the first failure. */
static int run_thread_counts(struct job* J) {
  const struct vopts* o = J->o;
  int rc = VERIFY_PASS;
  for (unsigned t = 0; rc == VERIFY_PASS && t < o->nthreads; t++) {
    J->threads = o->threads[t];
    if (o->nthreads > 1)
      fprintf(stderr, "%s: kernel-cpu, %s%u thread(s) per block...\n", o->file, J->what, J->threads);
    rc = run_threads(J);
  }
  return rc;
}

/* A rooted collective's plan renamed for each root its placement allows (or o->root), out of
 * place and in place (or o->inplace); the first failure. */
static int run_rooted(struct job* J) {
  const struct vopts* o = J->o;
  const struct shunt_plan* plan = J->plan;
  int rc = VERIFY_PASS;
  char what[48];
  for (uint32_t root = 0; root < plan->ngpus && rc == VERIFY_PASS; root++) {
    if (o->root >= 0 && (uint32_t)o->root != root) continue;
    uint32_t shift = shunt_plan_root_shift(plan, root);
    if (!shunt_plan_rotatable(plan, shift)) continue; /* no plan serves that root */
    struct shunt_plan* rp = shunt_plan_rotate(plan, shift);
    if (!rp) {
      snprintf(J->msg, J->len, "out of memory");
      return VERIFY_ERROR;
    }
    J->plan = rp;
    for (int ip = 0; ip < 2 && rc == VERIFY_PASS; ip++) {
      if (o->inplace >= 0 && o->inplace != ip) continue;
      snprintf(what, sizeof(what), "root %u %s, ", root, ip ? "in place" : "out of place");
      J->what = what;
      J->inplace = ip != 0;
      rc = run_thread_counts(J);
    }
    J->plan = plan;
    shunt_plan_free(rp);
  }
  J->what = "";
  return rc;
}

int verify_kcpu_plan(const struct vopts* o, const struct shunt_plan* plan, const struct shape* shapes,
                     unsigned nshapes, char* msg, size_t len) {
  struct job J;
  memset(&J, 0, sizeof(J));
  J.o = o;
  J.plan = plan;
  J.shapes = shapes;
  J.nshapes = nshapes;
  J.msg = msg;
  J.len = len;
  msg[0] = 0;
  verify_world_needs(o, plan, shapes, nshapes, &J.need);
  J.cfg.scratch_bytes = J.need.scratch;
  J.cfg.input_bytes = J.need.stage_in;
  J.cfg.output_bytes = J.need.stage_out;
  J.cfg.timeout_ms = o->timeout_ms ? o->timeout_ms : 60000;
  J.exp = calloc(o->iters, sizeof(*J.exp));
  J.team.slots = calloc(plan->ngpus, SLOT);
  int rc = VERIFY_PASS;
  if (!J.exp || !J.team.slots) rc = VERIFY_ERROR;
  /* The reference of every rank's output: reducescatter's, one slice per rank, is as long as
   * the input. */
  uint64_t ref = J.need.max_in > J.need.max_out ? J.need.max_in : J.need.max_out;
  for (unsigned it = 0; rc == VERIFY_PASS && it < o->iters; it++)
    if (!(J.exp[it] = malloc(ref + 16))) rc = VERIFY_ERROR;
  if (rc != VERIFY_PASS) snprintf(msg, len, "out of memory");
  pthread_mutex_init(&J.mu, NULL);
  pthread_mutex_init(&J.team.mu, NULL);
  pthread_cond_init(&J.team.cv, NULL);
  J.team.n = plan->ngpus;
  J.inplace = plan->inplace;
  J.what = "";
  if (rc == VERIFY_PASS && shunt_coll_rooted(plan->coll))
    rc = run_rooted(&J);
  else
    rc = rc == VERIFY_PASS ? run_thread_counts(&J) : rc;
  pthread_cond_destroy(&J.team.cv);
  pthread_mutex_destroy(&J.team.mu);
  pthread_mutex_destroy(&J.mu);
  for (unsigned it = 0; J.exp && it < o->iters; it++) free(J.exp[it]);
  free(J.exp);
  free(J.team.slots);
  return rc;
}
