/* shunt-plan verify: run a plan on the host backend, one process per rank, and compare every
 * output byte with the reference collective.
 *
 * For each size (total bytes: allreduce buffer, allgather output, reducescatter and alltoall
 * input, broadcast buffer), dtype and op, every rank
 * runs K executions back to back; before each, inputs are filled with rank- and
 * index-dependent values (small integers, so any summation order is exact in every dtype)
 * and outputs with a sentinel. Prints PASS, the first mismatch (rank, byte offset, expected,
 * got), or the hang report of every rank. Static and race problems are reported first.
 *
 * A broadcast plan serves every root (its ranks renamed, plan/rotate.h) and both in-place modes
 * (planset.h): each root its placement allows (or --root R) runs out of place and in place (or
 * the mode --inplace/--outofplace names), every rank checking that its output is the root's
 * input. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <inttypes.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "commands.h"
#include "exec/elem.h"
#include "exec/host/host_call.h"
#include "exec/host/host_run.h"
#include "exec/lower.h"
#include "exec/ops/dtype.h"
#include "plan/check.h"
#include "plan/parse.h"
#include "plan/planset.h"
#include "plan/rotate.h"
#include "transport/backoff.h"
#include "transport/world.h"
#include "verify.h"
#include "verify_ref.h"

#define MSG_BYTES 8192
#define BS_SLOT 4096

/* Shared between the rank processes: bootstrap and results. */
struct shared {
  uint32_t nranks;
  _Atomic uint32_t arrived, gen;
  atomic_bool abort; /* a rank stopped early: barriers give up instead of waiting for it */
  struct {
    int status; /* 0 pass, 1 mismatch, 2 timeout, 3 error */
    uint64_t runs;
    char msg[MSG_BYTES];
  } res[64];
  char* expected; /* the reference output, each rank computes a slice */
  char data[];
};

struct bsctx {
  struct shared* s;
  uint32_t rank;
};

static int bs_barrier(void* ctx) {
  struct shared* s = ((struct bsctx*)ctx)->s;
  uint32_t g = atomic_load(&s->gen);
  if (atomic_fetch_add(&s->arrived, 1) + 1 == s->nranks) {
    atomic_store(&s->arrived, 0);
    atomic_fetch_add(&s->gen, 1);
    return 0;
  }
  struct shunt_backoff bo = {0};
  while (atomic_load(&s->gen) == g) {
    if (atomic_load(&s->abort)) return -1;
    shunt_backoff(&bo, 0);
  }
  return 0;
}

static int bs_allgather(void* ctx, void* buf, size_t bytes) {
  struct bsctx* c = ctx;
  if (bytes > BS_SLOT) return -1;
  memcpy(c->s->data + (size_t)c->rank * BS_SLOT, (char*)buf + (size_t)c->rank * bytes, bytes);
  if (bs_barrier(ctx)) return -1;
  for (uint32_t r = 0; r < c->s->nranks; r++)
    memcpy((char*)buf + r * bytes, c->s->data + (size_t)r * BS_SLOT, bytes);
  return bs_barrier(ctx);
}

/* ---- one rank ---- */

static int rank_main(const struct vopts* o, const struct shunt_plan* plan, struct shared* sh, uint32_t rank,
                     const struct shape* shapes, unsigned nshapes, bool inplace) {
  struct bsctx bc = {sh, rank};
  struct shunt_world_exchange bs = {.oob = {&bc, bs_allgather, bs_barrier}};
  if (o->net) {
    bs.at.nnodes = o->nodes;
    bs.at.node = rank / (o->nranks / o->nodes);
    struct sockaddr_in* lo = (struct sockaddr_in*)&bs.at.net_addr;
    lo->sin_family = AF_INET;
    lo->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  }
  struct shunt_world_config cfg = {0, 0, 0};
  struct verify_needs nd;
  verify_world_needs(o, plan, shapes, nshapes, &nd);
  cfg.scratch_bytes = nd.scratch;
  cfg.input_bytes = nd.stage_in;
  cfg.output_bytes = nd.stage_out;
  uint64_t user_in_max = nd.max_in, user_out_max = nd.max_out;
  char* msg = sh->res[rank].msg;
  struct shunt_world* w = NULL;
  if (shunt_world_create(rank, o->nranks, &cfg, &bs, &w, msg, MSG_BYTES) != 0) {
    sh->res[rank].status = 3;
    return 3;
  }
  struct shunt_lower_cache* cache = shunt_lower_cache_create(16);
  struct shunt_host_reuse reuse = {0};
  char* out = malloc(user_out_max ? user_out_max : 1);
  char* in = malloc(user_in_max ? user_in_max : 1);
  /* What the reference is (util/coll_traits.h). */
  enum shunt_coll_ref ref_kind = shunt_coll_traits(plan->coll)->ref;
  bool rs = ref_kind == SHUNT_REF_REDUCED_MINE;
  bool a2a = ref_kind == SHUNT_REF_TRANSPOSED;
  bool bcast = ref_kind == SHUNT_REF_ROOT_INPUT;
  char* tmp = malloc((rs || a2a || bcast ? user_out_max : user_out_max / o->nranks) + 64);
  char* exp = sh->expected;
  int status = 0;
  bool reduce = shunt_coll_reduces(plan->coll);
  if (!cache || !out || !in || !tmp) {
    status = 3;
    snprintf(msg, MSG_BYTES, "rank %u: out of memory", rank);
  }
  for (unsigned k = 0; k < nshapes && status < 2; k++) {
    const struct shape* s = &shapes[k];
    struct shunt_call_shape cs = {
        s->in, s->out, s->dt, s->op, (enum shunt_pkt_type)o->pkt,
        0,     false, false};
    struct shunt_split sp;
    if (!shunt_split_call(plan, &cs, &sp, msg, MSG_BYTES)) {
      status = 3;
      break;
    }
    /* The buffers: NCCL's rule in this mode (a rooted collective's other ranks bind as the API
     * binds them; user_out NULL: none). */
    char *user_in, *user_out;
    bool mine = inplace;
    verify_bind(plan, rank, s->in, s->out, in, out, &user_in, &user_out, &mine);
    sp.inplace = mine;
    char scalar[8];
    verify_premul_scalar(s->dt, scalar);
    struct shunt_host_run_opts ro = {o->timeout_ms, scalar};
    uint32_t es = shunt_dtype_size(s->dt);
    /* This rank's slice of the reference output, in whole elements. */
    uint64_t nel = s->out / es, lo = nel * rank / o->nranks * es, hi = nel * (rank + 1) / o->nranks * es;
    /* Reducescatter: this rank's output is the reduction of the ranks' slice `rank`; the
     * reference holds every rank's output, slice by slice, and each rank computes its own. */
    if (rs) lo = (uint64_t)rank * s->out, hi = lo + s->out;
    uint64_t cmp_at = rs ? lo : 0;
    /* Alltoall: each rank computes its own reference into tmp (block j is rank j's block for
     * this rank, which the fill rule gives without asking rank j). */
    const char* ref = a2a || bcast ? tmp : exp + cmp_at;
    uint64_t blk = s->in / o->nranks;
    for (unsigned it = 0; it < o->iters && status < 2; it++) {
      unsigned seed = k * 131 + it;
      if (user_out) memset(user_out, 0xa5, s->out);
      verify_fill_input(user_in, 0, s->in, rank, o->nranks, seed, s->dt, s->op, reduce);
      if (bcast) /* the root's input, which every rank computes for itself */
        verify_fill_input(tmp, 0, s->in, plan->root, o->nranks, seed, s->dt, s->op, false);
      else if (a2a)
        for (uint32_t j = 0; j < o->nranks; j++)
          verify_fill_input(tmp + (uint64_t)j * blk, (uint64_t)rank * blk, blk, j, o->nranks, seed,
                            s->dt, s->op, false);
      else if (reduce)
        verify_expected_allreduce(exp + lo, tmp, lo, hi - lo, o->nranks, seed, s->dt,
                                  s->op);
      else
        memcpy(exp + (uint64_t)rank * s->in, user_in, s->in);
      char err[MSG_BYTES];
      int rc =
          shunt_host_run_call(w, cache, plan, rank, &sp, user_in, user_out, &ro, &reuse, err, sizeof(err));
      sh->res[rank].runs++;
      if (rc) {
        status = rc == SHUNT_E_TIMEOUT ? 2 : 3;
        snprintf(msg, MSG_BYTES, "%s", err);
        break;
      }
      /* Every slice of the reference is written once every rank has finished its run. */
      if (bs_barrier(&bc)) break;
      /* After a mismatch the rank keeps running, so its peers never wait for it. */
      if (!status && user_out && memcmp(ref, user_out, s->out) != 0) {
        uint64_t b = 0;
        while (ref[b] == user_out[b]) b++;
        status = 1;
        /* A broadcast's root is in the line's prefix; its mode only here. */
        const char* root = !shunt_coll_rooted(plan->coll) ? "" : inplace ? " in place" : " out of place";
        snprintf(msg, MSG_BYTES,
                 "mismatch: %s%s, %" PRIu64 " bytes, %s %s, iteration %u: rank %u byte offset %" PRIu64
                 ": expected 0x%02x, got 0x%02x",
                 plan->name, root, s->total, verify_dt_names[s->dt], reduce ? verify_op_names[s->op] : "-",
                 it, rank, b, (unsigned)(unsigned char)ref[b], (unsigned)(unsigned char)user_out[b]);
      }
      /* Nobody writes the next reference before every rank has compared this one. */
      if (bs_barrier(&bc)) break;
    }
  }
  shunt_host_reuse_free(&reuse);
  free(out), free(in), free(tmp);
  shunt_lower_cache_destroy(cache);
  sh->res[rank].status = status;
  if (status >= 2 || atomic_load(&sh->abort)) {
    /* Peers may still spin on this world or wait in a barrier: stop them, and leave without
     * the collective teardown (process exit releases the mappings). */
    atomic_store(&sh->abort, true);
    return status;
  }
  shunt_world_destroy(w);
  return status;
}

/* ---- sizes ---- */

static uint64_t granule(const struct shunt_plan* p) {
  uint64_t a = p->buffer_alignment ? p->buffer_alignment : 16;
  uint64_t ic = p->gpus[0].input_chunks ? p->gpus[0].input_chunks : 1;
  uint64_t g = a * ic;
  enum shunt_coll_layout layout = shunt_coll_layout(p->coll);
  if (layout == SHUNT_LAYOUT_GATHER) g *= p->ngpus;
  if ((layout == SHUNT_LAYOUT_SCATTER || layout == SHUNT_LAYOUT_BLOCKS) && (g / a) % p->ngpus) g *= p->ngpus;
  uint64_t oc = p->gpus[0].output_chunks;
  while (oc && (g / a) % oc) g += a * ic * (layout == SHUNT_LAYOUT_GATHER ? p->ngpus : 1);
  return g;
}

static bool servable(const struct shunt_plan* p, uint64_t total, enum shunt_dtype dt, enum shunt_redop op, char* why,
                     size_t len) {
  uint64_t in, out;
  verify_in_out(p, total, &in, &out);
  struct shunt_call_shape cs = {in, out, dt, op, SHUNT_PKT_LL16, 0, false, false};
  struct shunt_split sp;
  return shunt_split_check(p, &cs, &sp, why, len);
}

static unsigned default_sizes(const struct shunt_plan* p, const struct vopts* o, uint64_t* v) {
  uint64_t g = granule(p);
  uint64_t lo = p->min_message_size < g ? g : (p->min_message_size + g - 1) / g * g;
  char why[256];
  enum shunt_dtype dt = o->dtypes[0];
  enum shunt_redop op = o->ops[0];
  for (unsigned t = 0; t < 64 && !servable(p, lo, dt, op, why, sizeof(why)); t++) lo += g;
  uint64_t hi = p->max_message_size / g * g;
  uint64_t cap = o->max_bytes;
  unsigned n = 0;
  v[n++] = lo;
  if (!o->edge_sizes) {
    if (lo + g <= hi && lo + g <= cap) v[n++] = lo + g;
    for (uint64_t s = lo * 4 / g * g; s < hi && s <= cap && n < MAX_SIZES - 1; s = s * 4 / g * g)
      if (s > v[n - 1]) v[n++] = s;
    if (hi > v[n - 1] && hi <= cap) v[n++] = hi;
  }
  /* Sizes the chunk rule does not take (a head and a padded tail, exec/split.h): one element
   * above the first size, and one element of the dtype per rank, when the range holds them. */
  uint64_t es = shunt_dtype_size(dt), per = shunt_coll_size_units(p->coll, p->ngpus);
  uint64_t odd[2] = {lo + es * per, es * per};
  for (unsigned k = 0; k < 2 && n < MAX_SIZES; k++) {
    bool have = false;
    for (unsigned j = 0; j < n; j++) have |= v[j] == odd[k];
    if (!have && odd[k] >= p->min_message_size && odd[k] <= p->max_message_size && odd[k] <= cap &&
        servable(p, odd[k], dt, op, why, sizeof(why)))
      v[n++] = odd[k];
  }
  return n;
}

static int parse_list(const char* s, const char* const* names, unsigned nnames, int* out, unsigned* n) {
  *n = 0;
  if (!strcmp(s, "all")) {
    for (unsigned i = 0; i < nnames; i++) out[(*n)++] = (int)i;
    return 0;
  }
  char buf[256];
  snprintf(buf, sizeof(buf), "%s", s);
  char* save = NULL;
  for (char* t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    unsigned i = 0;
    while (i < nnames && strcmp(names[i], t)) i++;
    if (i == nnames || *n >= nnames) return -1;
    out[(*n)++] = (int)i;
  }
  return *n ? 0 : -1;
}

static uint64_t parse_bytes(const char* s, int* bad) {
  char* end;
  unsigned long long v = strtoull(s, &end, 10);
  if (end == s) *bad = 1;
  if (*end == 'K' || *end == 'k')
    v <<= 10, end++;
  else if (*end == 'M' || *end == 'm')
    v <<= 20, end++;
  else if (*end == 'G' || *end == 'g')
    v <<= 30, end++;
  if (*end) *bad = 1;
  return v;
}

static int usage(void) {
  fprintf(
      stderr,
      "usage: shunt-plan verify FILE|DIR... [--ranks N] [--sizes S,S,..] [--dtype T,..|all] [--op O,..|all]\n"
      "                         [--iters K] [--inplace|--outofplace] [--timeout MS] [--max-bytes S]\n"
      "                         [--any-size] [--edge-sizes] [--skip-checks] [--packet ll16|ll8]\n"
      "                         [--backend host|kernel-cpu] [--threads T,T,..] [--skew US]\n"
      "                         [--net socket|ib [--nodes N]] [--root R]\n"
      "  broadcast plans run for every root (or R), in place and out of place\n");
  return 2;
}

static double now_s(void) {
  return (double)shunt_now_ns() / 1e9;
}

/* Thread counts per block: "1,3,32". */
static int parse_threads(const char* s, struct vopts* o) {
  char buf[128];
  snprintf(buf, sizeof(buf), "%s", s);
  o->nthreads = 0;
  char* save = NULL;
  for (char* t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    int bad = 0;
    uint64_t v = parse_bytes(t, &bad);
    if (bad || v == 0 || v > 1024 || o->nthreads == sizeof(o->threads) / sizeof(o->threads[0])) return -1;
    o->threads[o->nthreads++] = (unsigned)v;
  }
  return o->nthreads ? 0 : -1;
}

static int verify_file(struct vopts o, const char* dts, const char* ops, const char* sizes);

/* The plans to verify: each FILE as given, each folder's plan files as a plan folder is read
 * (shunt_plan_dir_names). Returns the count, or -1 (with a message) when a folder is unreadable
 * or memory runs out; *out is malloc'ed, its strings too. */
static int expand(const char* const* args, unsigned nargs, char*** out, bool* any_dir) {
  char** v = NULL;
  size_t n = 0, cap = 0;
  for (unsigned a = 0; a < nargs; a++) {
    struct stat st;
    bool dir = stat(args[a], &st) == 0 && S_ISDIR(st.st_mode);
    *any_dir |= dir;
    char** names = NULL;
    uint32_t m = 1;
    if (dir) {
      struct shunt_plan_errors errs = {0};
      if (shunt_plan_dir_names(args[a], &names, &m, &errs) != 0) {
        char buf[1200];
        fprintf(stderr, "shunt-plan verify: %s\n", shunt_plan_error_format(&errs.v[0], buf, sizeof(buf)));
        shunt_plan_errors_free(&errs);
        goto fail;
      }
      if (!m) fprintf(stderr, "shunt-plan verify: no *.json plan in %s\n", args[a]);
    }
    bool oom = false;
    for (uint32_t k = 0; k < m && !oom; k++) {
      if (n == cap) {
        cap = cap ? 2 * cap : 64;
        char** nv = realloc(v, cap * sizeof(*nv));
        if (!(oom = !nv)) v = nv;
      }
      size_t len = strlen(args[a]) + (dir ? strlen(names[k]) + 2 : 1);
      if (!oom && !(oom = !(v[n] = malloc(len)))) {
        if (dir)
          snprintf(v[n], len, "%s%s%s", args[a], args[a][strlen(args[a]) - 1] == '/' ? "" : "/", names[k]);
        else
          snprintf(v[n], len, "%s", args[a]);
        n++;
      }
    }
    for (uint32_t k = 0; dir && k < m; k++) free(names[k]);
    free(names);
    if (oom) {
      fprintf(stderr, "shunt-plan verify: out of memory\n");
      goto fail;
    }
  }
  *out = v;
  return (int)n;
fail:
  for (size_t k = 0; k < n; k++) free(v[k]);
  free(v);
  return -1;
}

int cmd_verify(int argc, char** argv) {
  struct vopts o = {.iters = 3,
                    .pkt = SHUNT_PKT_LL16,
                    .inplace = -1,
                    .timeout_ms = 0,
                    .max_bytes = 2u << 20,
                    .threads = {1, 3, 32},
                    .nthreads = 3,
                    .root = -1}; /* timeout 0: SHUNT_HOST_TIMEOUT_MS */
  const char* dts = NULL;
  const char* ops = "sum";
  const char* sizes = NULL;
  const char** files = calloc((size_t)argc + 1, sizeof(*files));
  unsigned nfiles = 0;
  int bad = !files;
  for (int i = 0; i < argc && !bad; i++) {
    const char* a = argv[i];
    const char* val = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--inplace"))
      o.inplace = 1;
    else if (!strcmp(a, "--outofplace"))
      o.inplace = 0;
    else if (!strcmp(a, "--any-size"))
      o.any_size = 1;
    else if (!strcmp(a, "--packet") && i + 1 < argc &&
             (!strcmp(argv[i + 1], "ll8") || !strcmp(argv[i + 1], "ll16")))
      o.pkt = !strcmp(argv[++i], "ll8") ? SHUNT_PKT_LL8 : SHUNT_PKT_LL16;
    else if (!strcmp(a, "--backend") && val && (!strcmp(val, "host") || !strcmp(val, "kernel-cpu")))
      o.backend = !strcmp(argv[++i], "kernel-cpu") ? VERIFY_BACKEND_KCPU : VERIFY_BACKEND_HOST;
    else if (!strcmp(a, "--net") && val && (!strcmp(val, "socket") || !strcmp(val, "ib")))
      o.net = !strcmp(argv[++i], "ib") ? 2 : 1;
    else if (!strcmp(a, "--skip-checks"))
      o.skip_checks = 1;
    else if (!strcmp(a, "--edge-sizes"))
      o.edge_sizes = 1;
    else if (a[0] == '-' && a[1] == '-' && !val)
      bad = 1;
    else if (!strcmp(a, "--ranks"))
      o.nranks = (uint32_t)parse_bytes(val, &bad), i++;
    else if (!strcmp(a, "--sizes"))
      sizes = val, i++;
    else if (!strcmp(a, "--dtype"))
      dts = val, i++;
    else if (!strcmp(a, "--op"))
      ops = val, i++;
    else if (!strcmp(a, "--iters"))
      o.iters = (unsigned)parse_bytes(val, &bad), i++;
    else if (!strcmp(a, "--timeout"))
      o.timeout_ms = parse_bytes(val, &bad), i++;
    else if (!strcmp(a, "--max-bytes"))
      o.max_bytes = parse_bytes(val, &bad), i++;
    else if (!strcmp(a, "--threads"))
      bad |= parse_threads(val, &o) != 0, i++;
    else if (!strcmp(a, "--nodes"))
      o.nodes = (uint32_t)parse_bytes(val, &bad), i++;
    else if (!strcmp(a, "--skew"))
      o.skew_us = (unsigned)parse_bytes(val, &bad), i++;
    else if (!strcmp(a, "--root"))
      o.root = (int)parse_bytes(val, &bad), i++;
    else if (a[0] == '-')
      bad = 1;
    else
      files[nfiles++] = a;
  }
  if (bad || !nfiles || !o.iters) {
    free(files);
    return usage();
  }
  char** plans = NULL;
  bool any_dir = false;
  int nplans = expand(files, nfiles, &plans, &any_dir);
  if (nplans < 0) {
    free(files);
    return 2;
  }
  /* Every file is verified; the worst result is the exit status (usage errors stop at once). */
  int worst = 0, failed = 0, done = 0;
  double t0 = now_s();
  for (int f = 0; f < nplans; f++) {
    o.file = plans[f];
    int rc = verify_file(o, dts, ops, sizes);
    done++;
    failed += rc != 0;
    if (rc == 2) {
      worst = 2;
      break;
    }
    if (rc > worst) worst = rc;
  }
  if (any_dir || nplans > 1)
    printf("verified %d of %d plan(s) in %.1f s: %d failed\n", done, nplans, now_s() - t0, failed);
  for (int f = 0; f < nplans; f++) free(plans[f]);
  free(plans);
  free(files);
  return nplans ? worst : 1;
}

/* Runs the shapes on one world of o->nranks processes; 0 pass, 1 fail (printed), 2 when the
 * ranks could not start. `what` prefixes the result (a broadcast's root). */
static int run_ranks(const struct vopts* o, const struct shunt_plan* plan, struct shared* sh,
                     const struct shape* shapes, unsigned nshapes, bool inplace, unsigned skipped,
                     const char* what) {
  /* A fresh start: results and barrier state of an earlier world are gone. */
  memset(sh->res, 0, sizeof(sh->res));
  atomic_store(&sh->abort, false);
  atomic_store(&sh->arrived, 0);
  double t0 = now_s();
  fflush(stdout);
  pid_t pids[64];
  for (uint32_t r = 0; r < o->nranks; r++) {
    pids[r] = fork();
    if (pids[r] == 0) _exit(rank_main(o, plan, sh, r, shapes, nshapes, inplace));
    if (pids[r] < 0) {
      fprintf(stderr, "fork: %s\n", strerror(errno));
      for (uint32_t k = 0; k < r; k++) kill(pids[k], SIGKILL);
      for (uint32_t k = 0; k < r; k++) waitpid(pids[k], NULL, 0);
      return 2;
    }
  }
  /* A rank that dies takes the others down with it: they would only wait for it. */
  int crashed = -1;
  for (uint32_t done = 0; done < o->nranks; done++) {
    int st;
    pid_t pid = wait(&st);
    if (pid < 0) break;
    if (!WIFEXITED(st) && crashed < 0) {
      for (uint32_t r = 0; r < o->nranks; r++)
        if (pids[r] == pid) crashed = (int)r;
      for (uint32_t r = 0; r < o->nranks; r++)
        if (pids[r] != pid) kill(pids[r], SIGKILL);
    }
  }
  double dt = now_s() - t0;
  int worst = 0, rc;
  for (uint32_t r = 0; r < o->nranks; r++)
    if (sh->res[r].status > worst) worst = sh->res[r].status;
  if (crashed >= 0) {
    printf("%s: FAIL: %srank %d crashed\n", o->file, what, crashed);
    rc = 1;
  } else if (worst == 0) {
    printf("%s: PASS (%u ranks, %u shape(s) x %u iterations, %s%s, %.2f s%s)\n", o->file, o->nranks, nshapes,
           o->iters, what, inplace ? "in-place" : "out-of-place", dt,
           skipped ? ", unsupported dtype/op pairs skipped" : "");
    rc = 0;
  } else {
    rc = 1;
    if (worst == 1) {
      for (uint32_t r = 0; r < o->nranks; r++)
        if (sh->res[r].status == 1) {
          printf("%s: FAIL: %s%s\n", o->file, what, sh->res[r].msg);
          break;
        }
    } else {
      /* A run that gave up because a transport failed is no hang of the plan's. */
      bool net = false;
      for (uint32_t r = 0; r < o->nranks; r++)
        net |= sh->res[r].status == 2 && strstr(sh->res[r].msg, " transport: ");
      printf("%s: FAIL: %s%s\n", o->file, what, worst == 2 ? (net ? "a transport failed" : "hang") : "error");
      for (uint32_t r = 0; r < o->nranks; r++)
        if (sh->res[r].status >= 2) printf("%s\n", sh->res[r].msg);
    }
  }
  return rc;
}

/* A rooted collective's plan, renamed for each root its placement allows (or o->root), out of
 * place and in place (or the mode asked for); the worst result. */
static int verify_rooted(const struct vopts* o, const struct shunt_plan* plan, struct shared* sh,
                         const struct shape* shapes, unsigned nshapes, unsigned skipped) {
  int worst = 0;
  for (uint32_t root = 0; root < plan->ngpus; root++) {
    if (o->root >= 0 && (uint32_t)o->root != root) continue;
    uint32_t shift = shunt_plan_root_shift(plan, root);
    if (!shunt_plan_rotatable(plan, shift)) {
      printf("%s: root %u: no plan (renaming the ranks would break the plan's placement of %u per host)\n",
             o->file, root, plan->ranks_per_node);
      continue;
    }
    struct shunt_plan* rp = shunt_plan_rotate(plan, shift);
    if (!rp) {
      fprintf(stderr, "%s: out of memory\n", o->file);
      return 2;
    }
    char what[32];
    snprintf(what, sizeof(what), "root %u, ", root);
    for (int ip = 0; ip < 2; ip++) {
      if (o->inplace >= 0 && o->inplace != ip) continue;
      int rc = run_ranks(o, rp, sh, shapes, nshapes, ip != 0, skipped, what);
      if (rc > worst) worst = rc;
      if (rc == 2) break;
    }
    shunt_plan_free(rp);
    if (worst == 2) break;
  }
  return worst;
}

static int verify_file(struct vopts o, const char* dts, const char* ops, const char* sizes) {
  int bad = 0;
  struct shunt_plan_errors errs = {0};
  struct shunt_plan* plan = shunt_plan_load_file(o.file, &errs);
  if (plan) {
    struct shunt_check_opts copts = {0};
    shunt_plan_check(plan, &copts, &errs);
    shunt_plan_check_races(plan, &errs);
  }
  char ebuf[1200];
  for (uint32_t k = 0; k < errs.n; k++)
    printf("%s\n", shunt_plan_error_format(&errs.v[k], ebuf, sizeof(ebuf)));
  if (!plan || (errs.n && !o.skip_checks)) {
    printf("%s: FAIL (static checks)\n", o.file);
    shunt_plan_errors_free(&errs);
    shunt_plan_free(plan);
    return 1;
  }
  shunt_plan_errors_free(&errs);
  if (o.any_size) {
    /* This process's own copy of the plan: open its range so any servable size runs. */
    plan->min_message_size = 0;
    plan->max_message_size = UINT64_MAX;
  }
  int rc = 2;
  bool reduce = shunt_coll_reduces(plan->coll);
  if (!shunt_coll_served(plan->coll)) {
    fprintf(stderr, "%s: verify knows the collectives plans serve, not '%s'\n", o.file, plan->collective);
    goto out;
  }
  if (o.nranks && o.nranks != plan->ngpus) {
    fprintf(stderr, "%s: the plan is for %u ranks, not %u\n", o.file, plan->ngpus, o.nranks);
    goto out;
  }
  o.nranks = plan->ngpus;
  if (o.nranks > 64) {
    fprintf(stderr, "%s: verify runs at most 64 ranks\n", o.file);
    goto out;
  }
  bool rooted = shunt_coll_rooted(plan->coll);
  if (o.root >= 0 && (!rooted || (uint32_t)o.root >= plan->ngpus)) {
    fprintf(stderr, "%s: --root %d names no root of this plan\n", o.file, o.root);
    goto out;
  }
  if (o.net && o.backend != VERIFY_BACKEND_HOST) {
    fprintf(stderr, "%s: --net runs on the host backend only\n", o.file);
    goto out;
  }
  if (o.net) {
    /* The plan's memory groups each on one host; a plan free of placement: every rank alone. */
    uint32_t rpn = plan->ranks_per_node;
    if (!o.nodes) o.nodes = rpn ? o.nranks / rpn : o.nranks;
    if (o.nodes < 2 || o.nranks % o.nodes || (rpn && (o.nranks / o.nodes) % rpn)) {
      fprintf(stderr,
              "%s: %u ranks cannot sit on %u hosts here: the plan joins every %u consecutive ranks through "
              "memory%s\n",
              o.file, o.nranks, o.nodes, rpn ? rpn : 1, rpn == o.nranks ? " (it runs on one host only)" : "");
      goto out;
    }
    printf("%s: %u hosts of %u ranks, port channels between hosts over %s\n", o.file, o.nodes,
           o.nranks / o.nodes, o.net == 2 ? "verbs (SHUNT_IB_LIB)" : "TCP (loopback)");
    /* The ranks' worlds read it: the transport asked for, or a failure saying why not. */
    setenv("SHUNT_NET", o.net == 2 ? "ib" : "socket", 1);
  } else if (o.nodes) {
    fprintf(stderr, "%s: --nodes goes with --net\n", o.file);
    goto out;
  }
  if (o.inplace >= 0 && (o.inplace != 0) != plan->inplace && !rooted) {
    fprintf(stderr, "%s: the plan is %s\n", o.file, plan->inplace ? "in-place" : "out-of-place");
    goto out;
  }
  /* The name lists are in code order (util/vocab.h): a name's index is its code. */
  int dt_codes[SHUNT_DT_COUNT], op_codes[VERIFY_NOPS];
  if (parse_list(dts ? dts : (reduce ? "float32" : "int8"), verify_dt_names, SHUNT_DT_COUNT, dt_codes,
                 &o.ndtypes) ||
      parse_list(reduce ? ops : "sum", verify_op_names, VERIFY_NOPS, op_codes, &o.nops)) {
    rc = usage();
    goto out;
  }
  for (unsigned d = 0; d < o.ndtypes; d++) o.dtypes[d] = shunt_dtype_from_code((uint32_t)dt_codes[d]);
  for (unsigned q = 0; q < o.nops; q++) o.ops[q] = shunt_redop_from_code((uint32_t)op_codes[q]);
  if (sizes) {
    char buf[512];
    snprintf(buf, sizeof(buf), "%s", sizes);
    char* save = NULL;
    for (char* t = strtok_r(buf, ",", &save); t && o.nsizes < MAX_SIZES; t = strtok_r(NULL, ",", &save))
      o.sizes[o.nsizes++] = parse_bytes(t, &bad);
    if (bad || !o.nsizes) {
      rc = usage();
      goto out;
    }
  } else {
    o.nsizes = default_sizes(plan, &o, o.sizes);
  }

  /* The shapes every rank runs, in order; unsupported (dtype, op) pairs are skipped. */
  struct shape* shapes = calloc((size_t)o.nsizes * o.ndtypes * o.nops, sizeof(*shapes));
  unsigned nshapes = 0, skipped = 0;
  for (unsigned d = 0; d < o.ndtypes; d++)
    for (unsigned q = 0; q < o.nops; q++) {
      if (reduce && !shunt_elem_supported(o.dtypes[d], o.ops[q])) {
        skipped++;
        continue;
      }
      for (unsigned k = 0; k < o.nsizes; k++) {
        char why[512];
        if (!servable(plan, o.sizes[k], o.dtypes[d], o.ops[q], why, sizeof(why))) {
          printf("%s: %" PRIu64 " bytes %s %s: not served: %s\n", o.file, o.sizes[k],
                 verify_dt_names[o.dtypes[d]], reduce ? verify_op_names[o.ops[q]] : "", why);
          continue;
        }
        struct shape* s = &shapes[nshapes++];
        s->total = o.sizes[k];
        verify_in_out(plan, s->total, &s->in, &s->out);
        s->dt = o.dtypes[d];
        s->op = reduce ? o.ops[q] : SHUNT_REDOP_SUM;
      }
    }
  if (!nshapes) {
    printf("%s: FAIL (no size, dtype and op to run)\n", o.file);
    free(shapes);
    rc = 1;
    goto out;
  }

  if (o.backend == VERIFY_BACKEND_KCPU) {
    char msg[MSG_BYTES];
    double t0k = now_s();
    int st = verify_kcpu_plan(&o, plan, shapes, nshapes, msg, sizeof(msg));
    if (st == VERIFY_PASS) {
      printf(
          "%s: PASS kernel-cpu (%u ranks, %u shape(s) x %u iterations x %u thread count(s), %s, %.2f s%s)\n",
          o.file, o.nranks, nshapes, o.iters, o.nthreads,
          !rooted                         ? (plan->inplace ? "in-place" : "out-of-place")
          : o.root >= 0 || o.inplace >= 0 ? "the roots and modes asked for"
                                          : "every root, in and out of place",
          now_s() - t0k, skipped ? ", unsupported dtype/op pairs skipped" : "");
      rc = 0;
    } else {
      printf("%s: FAIL kernel-cpu: %s%s\n", o.file, st == VERIFY_TIMEOUT ? "hang: " : "", msg);
      rc = 1;
    }
    free(shapes);
    goto out;
  }
  size_t shbytes = sizeof(struct shared) + (size_t)o.nranks * BS_SLOT;
  struct shared* sh = mmap(NULL, shbytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sh == MAP_FAILED) {
    fprintf(stderr, "mmap: %s\n", strerror(errno));
    free(shapes);
    goto out;
  }
  memset(sh, 0, shbytes);
  sh->nranks = o.nranks;
  /* The reference: the output (reducescatter: every rank's output, as long as the input). */
  uint64_t max_out = 0;
  for (unsigned k = 0; k < nshapes; k++) {
    uint64_t ref =
        shunt_coll_traits(plan->coll)->ref == SHUNT_REF_REDUCED_MINE ? shapes[k].in : shapes[k].out;
    if (ref > max_out) max_out = ref;
  }
  sh->expected = mmap(NULL, max_out, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sh->expected == MAP_FAILED) {
    fprintf(stderr, "mmap: %s\n", strerror(errno));
    munmap(sh, shbytes);
    free(shapes);
    goto out;
  }
  if (rooted) {
    rc = verify_rooted(&o, plan, sh, shapes, nshapes, skipped);
  } else {
    rc = run_ranks(&o, plan, sh, shapes, nshapes, plan->inplace, skipped, "");
  }
  if (rc == 2) {
    munmap(sh->expected, max_out);
    munmap(sh, shbytes);
    free(shapes);
    goto out;
  }
  munmap(sh->expected, max_out);
  munmap(sh, shbytes);
  free(shapes);
out:
  shunt_plan_free(plan);
  return rc;
}
