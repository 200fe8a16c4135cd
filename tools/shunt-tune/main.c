/* shunt-tune: measures every plan that can serve each size (and NCCL when there is one) through
 * shunt-perf, and writes the tuning file that gives each plan the sizes where it wins, with a
 * plot of the measurements. See docs/tuning.md. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "measure.h"
#include "plan/planset.h"
#include "plan/tuning.h"
#include "tune.h"
#include "util/host.h"

struct opts {
  const char *np, *nthreads, *minb, *maxb, *factor, *iters, *warmup, *coll, *out, *plot, *perf;
  double margin, stable;
  unsigned min_runs, max_runs;
};

static volatile sig_atomic_t interrupted;
static char tmp_tuning[4096];

static void on_signal(int sig) {
  interrupted = sig;
  if (tune_child_pid > 0) kill(tune_child_pid, SIGTERM);
}

static void usage(FILE* f) {
  fprintf(f,
          "usage: shunt-tune [options]\n"
          "Times every plan of SHUNT_PLAN_DIR that can serve each size (and NCCL when there is one)\n"
          "through shunt-perf, and writes a tuning file giving each plan the sizes where it wins.\n\n"
          "  -np N, -t N             ranks as processes / threads per process, as shunt-perf\n"
          "  -b, -e SIZE             smallest and largest size (default 1K and 16M; K, M, G)\n"
          "  -f F                    step factor between sizes (default 2)\n"
          "  -n N, -w N              timed and warm-up calls per size and run (default 20, 3)\n"
          "  --coll C                allreduce, allgather, reducescatter, alltoall, broadcast, reduce\n"
          "                          or all\n"
          "                          (default all)\n"
          "  -o FILE                 the tuning file to write (default shunt.tuning)\n"
          "  --plot FILE             the plot (PNG) to write (default: the tuning file's name + .png)\n"
          "  --margin PCT            a plan takes over only when faster by more than PCT%% (default 5)\n"
          "  --stable PCT            repeat runs until no median moves by more than PCT%% (default 3)\n"
          "  --min-runs N, --max-runs N   runs of each candidate (default 3 and 9)\n"
          "  --perf PATH             the shunt-perf to run (default: next to shunt-tune, else PATH)\n"
          "  -h, --help              this text\n\n"
          "A run over several machines: start shunt-tune on each with shunt-perf's variables\n"
          "(SHUNT_PERF_RANK, SHUNT_PERF_NRANKS, SHUNT_PERF_ROOT); rank 0 writes the file and the plot.\n");
}

static int parse(int argc, char** argv, struct opts* o) {
  *o = (struct opts){.minb = "1K",
                     .maxb = "16M",
                     .factor = "2",
                     .iters = "20",
                     .warmup = "3",
                     .coll = "all",
                     .out = "shunt.tuning",
                     .margin = 0.05,
                     .stable = 0.03,
                     .min_runs = 3,
                     .max_runs = 9};
  for (int i = 1; i < argc; i++) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      exit(0);
    }
#define OPT(name, field)                                       \
  if (!strcmp(a, name)) {                                      \
    if (!v) {                                                  \
      fprintf(stderr, "shunt-tune: %s needs a value\n", name); \
      return -1;                                               \
    }                                                          \
    o->field = v;                                              \
    i++;                                                       \
    continue;                                                  \
  }
    OPT("-np", np)
    OPT("--np", np)
    OPT("-t", nthreads)
    OPT("--nthreads", nthreads)
    OPT("-b", minb)
    OPT("--minbytes", minb)
    OPT("-e", maxb)
    OPT("--maxbytes", maxb)
    OPT("-f", factor) OPT("--stepfactor", factor) OPT("-n", iters) OPT("--iters", iters) OPT("-w", warmup)
        OPT("--warmup_iters", warmup) OPT("--coll", coll) OPT("-o", out) OPT("--plot", plot)
            OPT("--perf", perf)
#undef OPT
                char* end = NULL;
    if ((!strcmp(a, "--margin") || !strcmp(a, "--stable")) && v) {
      double p = strtod(v, &end);
      if (*end || p < 0 || p > 100) {
        fprintf(stderr, "shunt-tune: %s %s: want a percentage from 0 to 100\n", a, v);
        return -1;
      }
      *(a[2] == 'm' ? &o->margin : &o->stable) = p / 100;
      i++;
      continue;
    }
    if ((!strcmp(a, "--min-runs") || !strcmp(a, "--max-runs")) && v) {
      unsigned long n = strtoul(v, &end, 10);
      if (*end || n < 1 || n > TUNE_MAX_REPS) {
        fprintf(stderr, "shunt-tune: %s %s: want 1 to %d\n", a, v, TUNE_MAX_REPS);
        return -1;
      }
      *(a[3] == 'i' ? &o->min_runs : &o->max_runs) = (unsigned)n;
      i++;
      continue;
    }
    fprintf(stderr, "shunt-tune: unknown option %s (see --help)\n", a);
    return -1;
  }
  if (strcmp(o->coll, "all") && !shunt_coll_served(shunt_coll_of_name(o->coll))) {
    fprintf(stderr,
            "shunt-tune: --coll %s: want allreduce, allgather, reducescatter, alltoall, broadcast, reduce or "
            "all\n",
            o->coll);
    return -1;
  }
  if (o->min_runs > o->max_runs) o->min_runs = o->max_runs;
  return 0;
}

/* A size as shunt-perf takes it and the tuning file writes it; 0 and "max" are no sizes here. */
static int size_arg(const char* s, uint64_t* out) {
  return shunt_tuning_parse_size(s, out) && *out && *out != UINT64_MAX ? 0 : -1;
}

/* shunt-perf's launch options, then sizes from -b to max by -f, iters and warm-up calls, then
 * "--coll" and an empty slot for the collective, whose index is returned; NULL-terminated. */
static unsigned perf_args(const struct opts* o, char** args, const char* max, const char* iters,
                          const char* warmup) {
  unsigned n = 0;
  if (o->np) args[n++] = "-np", args[n++] = (char*)o->np;
  if (o->nthreads) args[n++] = "-t", args[n++] = (char*)o->nthreads;
  args[n++] = "-b", args[n++] = (char*)o->minb, args[n++] = "-e", args[n++] = (char*)max;
  args[n++] = "-f", args[n++] = (char*)o->factor, args[n++] = "-n", args[n++] = (char*)iters;
  args[n++] = "-w", args[n++] = (char*)warmup, args[n++] = "--coll", args[n] = NULL, args[n + 1] = NULL;
  return n;
}

static const char* find_perf(const char* given, char* buf, size_t len) {
  if (given) return given;
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) {
    self[n] = 0;
    char* slash = strrchr(self, '/');
    if (slash) *slash = 0;
    const char* tries[] = {"%s/shunt-perf", "%s/../shunt-perf/shunt-perf"};
    for (unsigned i = 0; i < 2; i++) {
      int k = snprintf(buf, len, tries[i], self);
      if (k > 0 && (size_t)k < len && access(buf, X_OK) == 0) return buf;
    }
  }
  return "shunt-perf"; /* execv needs a path: resolved below through PATH */
}

static const char* in_path(const char* name, char* buf, size_t len) {
  if (strchr(name, '/')) return name;
  const char* p = getenv("PATH");
  while (p && *p) {
    const char* c = strchr(p, ':');
    size_t n = c ? (size_t)(c - p) : strlen(p);
    int k = snprintf(buf, len, "%.*s/%s", (int)n, p, name);
    if (k > 0 && (size_t)k < len && access(buf, X_OK) == 0) return buf;
    p = c ? c + 1 : NULL;
  }
  return NULL;
}

/* The tuning file that leaves, for one collective on nranks, the plans named oop and ip
 * (either may be NULL) over every size and disables every other plan of it. */
static int write_forcing(const char* path, const struct shunt_planset* ps, const char* coll, unsigned nranks,
                         const char* oop, const char* ip) {
  FILE* f = fopen(path, "w");
  if (!f) return -1;
  for (uint32_t i = 0; i < shunt_planset_count(ps); i++) {
    const struct shunt_plan_entry* e = shunt_planset_entry(ps, i);
    if (e->status != SHUNT_PLAN_OK || e->plan->ngpus != nranks || strcmp(e->plan->collective, coll)) continue;
    /* A rooted collective's plan serves both modes (planset.h): the out-of-place choice forces it. */
    const char* keep = e->plan->inplace && !shunt_coll_rooted(e->plan->coll) ? ip : oop;
    if (keep && !strcmp(e->plan->name, keep))
      fprintf(f, "%s %u 0 max\n", e->plan->name, nranks);
    else
      fprintf(f, "%s %u disable\n", e->plan->name, nranks);
  }
  return fclose(f);
}

/* The run's placement, as selection's query states it (planset.h): 0 when every rank is on one
 * host, else the ranks per host when every host holds that many consecutive ranks, else
 * SHUNT_RPN_IRREGULAR. From shunt-perf's list of ranks ("#  Rank  R Group G Pid P on HOST"),
 * whose host is the identity shunt places ranks by. False when the list is not whole. */
static bool run_placement(const char* head, unsigned nranks, uint32_t* rpn) {
  char(*host)[64] = calloc(nranks, sizeof(*host));
  uint64_t* id = calloc(nranks, sizeof(*id));
  if (!host || !id) {
    free(host);
    free(id);
    return false;
  }
  unsigned seen = 0;
  for (const char* l = head; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
    int r = -1;
    char h[64];
    if (sscanf(l, "# Rank %d Group %*d Pid %*d on %63s", &r, h) == 2 && r >= 0 && (unsigned)r < nranks &&
        !host[r][0]) {
      snprintf(host[r], sizeof(host[r]), "%s", h);
      seen++;
    }
  }
  bool known = seen == nranks;
  /* A host's id: its first rank. */
  for (unsigned r = 0; known && r < nranks; r++)
    for (unsigned q = 0; q <= r; q++)
      if (!strcmp(host[q], host[r])) {
        id[r] = q;
        break;
      }
  int m = known ? shunt_hosts_rpn(id, (int)nranks) : 0;
  *rpn = (unsigned)m == nranks ? 0 : m ? (uint32_t)m : SHUNT_RPN_IRREGULAR;
  free(host);
  free(id);
  return known;
}

static void add_cand(struct tune_group* g, const char* name) {
  if (g->ncand >= TUNE_MAX_CAND) {
    fprintf(stderr, "shunt-tune: more than %d candidates for %s; %s is left out\n", TUNE_MAX_CAND, g->coll,
            name);
    return;
  }
  snprintf(g->cand[g->ncand], sizeof(g->cand[0]), "%s", name);
  for (unsigned s = 0; s < TUNE_MAX_SIZES; s++) g->med[g->ncand][s] = -1;
  g->ncand++;
}

static int cand_index(const struct tune_group* g, const char* name) {
  for (unsigned c = 0; c < g->ncand; c++)
    if (!strcmp(g->cand[c], name)) return (int)c;
  return -1;
}

static void record(struct tune_group* g, const struct tune_row* rows, int nrows, unsigned side,
                   const char* want) {
  int c = cand_index(g, want);
  if (c < 0) return;
  for (int r = 0; r < nrows; r++) {
    if (strcmp(rows[r].plan[side], want)) continue; /* served by something else: not a sample */
    for (unsigned s = 0; s < g->nsizes; s++)
      if (g->size[s] == rows[r].bytes && g->nsamp[c][s] < TUNE_MAX_REPS)
        g->samp[c][s][g->nsamp[c][s]++] = rows[r].us[side];
  }
}

static void print_table(const struct tune_group* g) {
  char a[32];
  printf("\n# %s, %u ranks, %s: median time per call (us); * serves the size\n", g->coll, g->nranks,
         g->inplace ? "in place" : "out of place");
  printf("%10s", "size");
  for (unsigned c = 0; c < g->ncand; c++) printf("  [%u]%*s", c, 9, "");
  printf("  %-8s %s\n", "next/win", "winner");
  for (unsigned s = 0; s < g->nsizes; s++) {
    printf("%10s", shunt_tuning_format_size(g->size[s], a, sizeof(a)));
    int w = g->winner[s];
    double next = -1;
    for (unsigned c = 0; c < g->ncand; c++) {
      double m = g->med[c][s];
      if (m < 0)
        printf("  %13s", "-");
      else
        printf("  %12.1f%s", m, (int)c == w ? "*" : " ");
      if ((int)c != w && m >= 0 && (next < 0 || m < next)) next = m;
    }
    if (w >= 0 && next > 0)
      printf("  %7.2fx %s\n", next / g->med[w][s], g->cand[w]);
    else
      printf("  %8s %s\n", "-", w >= 0 ? g->cand[w] : "(none)");
  }
  for (unsigned c = 0; c < g->ncand; c++) printf("# [%u] %s\n", c, g->cand[c]);
}

static int write_tuning(const char* path, struct tune_group* groups, unsigned n, const struct opts* o,
                        unsigned runs) {
  char tmp[4096];
  snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
  FILE* f = fopen(tmp, "w");
  if (!f) {
    fprintf(stderr, "shunt-tune: %s: %s\n", tmp, strerror(errno));
    return -1;
  }
  char host[256] = "?", when[64] = "?";
  gethostname(host, sizeof(host) - 1);
  time_t now = time(NULL);
  strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", localtime(&now));
  fprintf(f,
          "# Written by shunt-tune on %s at %s: sizes %s..%s (x%s), %s calls per size and run, the median\n",
          host, when, o->minb, o->maxb, o->factor, o->iters);
  fprintf(f, "# of up to %u runs, a plan taking over when faster by more than %.0f%%. Load it with\n", runs,
          o->margin * 100);
  fprintf(f, "# SHUNT_TUNING=%s; see it with shunt-plan list --tuning %s DIR.\n", path, path);
  for (unsigned i = 0; i < n; i++) {
    struct tune_group* g = &groups[i];
    /* One plan of a rooted collective serves both modes, and selection ignores the mode: the
     * out-of-place group's ranges are the rules (the in-place group's times are shown beside
     * them). */
    bool rooted = shunt_coll_rooted(shunt_coll_of_name(g->coll));
    if (g->inplace && rooted) continue;
    fprintf(f, "\n# %s, %u ranks, %s\n", g->coll, g->nranks,
            rooted       ? "both modes"
            : g->inplace ? "in place"
                         : "out of place");
    for (unsigned c = 0; c < g->ncand; c++) {
      char lo[32], hi[32];
      if (!strcmp(g->cand[c], TUNE_NCCL)) {
        if (g->has_range[c])
          fprintf(f, "# NCCL serves %s..%s (no plan covers it)\n",
                  shunt_tuning_format_size(g->lo[c], lo, sizeof(lo)),
                  shunt_tuning_format_size(g->hi[c], hi, sizeof(hi)));
        continue;
      }
      if (g->has_range[c])
        fprintf(f, "%-40s %u %s %s\n", g->cand[c], g->nranks,
                shunt_tuning_format_size(g->lo[c], lo, sizeof(lo)),
                shunt_tuning_format_size(g->hi[c], hi, sizeof(hi)));
      else
        fprintf(f, "%-40s %u disable\n", g->cand[c], g->nranks);
    }
  }
  if (fclose(f) != 0 || interrupted || rename(tmp, path) != 0) {
    unlink(tmp);
    if (!interrupted) fprintf(stderr, "shunt-tune: cannot write %s: %s\n", path, strerror(errno));
    return -1;
  }
  return 0;
}

static void cleanup(void) {
  if (tmp_tuning[0]) unlink(tmp_tuning);
}

int main(int argc, char** argv) {
  struct opts o;
  if (parse(argc, argv, &o) != 0) return 2;
  const char* dir = getenv("SHUNT_PLAN_DIR");
  if (!dir || !*dir) {
    fprintf(stderr, "shunt-tune: set SHUNT_PLAN_DIR to the folder of plans to tune\n");
    return 2;
  }
  uint64_t lo, hi;
  char* fend = NULL;
  unsigned long f = strtoul(o.factor, &fend, 10);
  if (size_arg(o.minb, &lo) || size_arg(o.maxb, &hi) || lo > hi || *fend || fend == o.factor || f < 2) {
    fprintf(stderr, "shunt-tune: sizes -b %s -e %s -f %s: want 0 < MIN <= MAX and a factor of 2 or more\n",
            o.minb, o.maxb, o.factor);
    return 2;
  }
  unsigned np = o.np ? (unsigned)atoi(o.np) : 1, nt = o.nthreads ? (unsigned)atoi(o.nthreads) : 1;
  unsigned nranks = np * nt;
  const char* env_n = getenv("SHUNT_PERF_NRANKS");
  const char* env_r = getenv("SHUNT_PERF_RANK");
  if (env_n) nranks = (unsigned)atoi(env_n);
  bool writer = !env_r || atoi(env_r) == 0;
  if (nranks < 2) {
    fprintf(stderr, "shunt-tune: tune for 2 ranks or more (-np N, -t N, or SHUNT_PERF_NRANKS)\n");
    return 2;
  }
  char pbuf[PATH_MAX], pbuf2[PATH_MAX];
  const char* perf = in_path(find_perf(o.perf, pbuf, sizeof(pbuf)), pbuf2, sizeof(pbuf2));
  if (!perf || access(perf, X_OK) != 0) {
    fprintf(stderr, "shunt-tune: shunt-perf not found (give it with --perf PATH)\n");
    return 2;
  }
  char plot_path[4096];
  if (o.plot)
    snprintf(plot_path, sizeof(plot_path), "%s", o.plot);
  else
    snprintf(plot_path, sizeof(plot_path), "%s.png", o.out);

  struct shunt_planset* ps = NULL;
  struct shunt_plan_errors errs = {0};
  /* The files' own ranges (the tuning is made anew), of the plans for this rank count. */
  struct shunt_planset_opts popts = {.nranks = nranks};
  if (shunt_planset_load(dir, &popts, &ps, &errs) != 0 || !ps) {
    fprintf(stderr, "shunt-tune: cannot read the plans in %s\n", dir);
    shunt_plan_errors_free(&errs);
    shunt_planset_free(ps);
    return 2;
  }
  shunt_plan_errors_free(&errs);

  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  atexit(cleanup);
  char tdir[4096];
  snprintf(tdir, sizeof(tdir), "%s", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  int tk = snprintf(tmp_tuning, sizeof(tmp_tuning), "%s/shunt-tune.%d.tuning", tdir, (int)getpid());
  if (tk < 0 || (size_t)tk >= sizeof(tmp_tuning)) {
    fprintf(stderr, "shunt-tune: TMPDIR is too long\n");
    return 2;
  }

  /* The launch and size arguments every run shares. */
  char* args[24];
  unsigned coll_arg = perf_args(&o, args, o.maxb, o.iters, o.warmup);
  struct tune_perf tp = {perf, args};
  static struct tune_row rows[TUNE_MAX_SIZES * 2];
  static char head[1 << 16];
  char err[512];

  /* NCCL is a candidate when shunt-perf reports one behind shunt: one call of the smallest size. */
  char* probe_args[24];
  char probe_coll[16];
  snprintf(probe_coll, sizeof(probe_coll), "%s", strcmp(o.coll, "all") ? o.coll : "allreduce");
  probe_args[perf_args(&o, probe_args, o.minb, "1", "0")] = probe_coll;
  struct tune_perf probe = {perf, probe_args};
  if (tune_measure(&probe, NULL, NULL, rows, TUNE_MAX_SIZES * 2, head, sizeof(head), err, sizeof(err)) < 0) {
    fprintf(stderr, "shunt-tune: a first run of %s failed: %s\n", perf, err);
    shunt_planset_free(ps);
    return 1;
  }
  bool nccl = strstr(head, ", fallback NCCL ") != NULL;
  /* Only plans made for this run's placement can serve it (a plan for two hosts of two ranks
   * does not serve four ranks of one host): the probe lists every rank's host. */
  uint32_t rpn = 0;
  bool placed = run_placement(head, nranks, &rpn);

  /* Groups: each collective asked for, out of place then in place. */
  static struct tune_group groups[12]; /* six collectives, two placements each */
  unsigned ng = 0;
  const char* colls[] = {"allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "reduce"};
  for (unsigned k = 0; k < sizeof(colls) / sizeof(colls[0]); k++) {
    if (strcmp(o.coll, "all") && strcmp(o.coll, colls[k])) continue;
    for (int ip = 0; ip < 2; ip++) {
      struct tune_group* g = &groups[ng];
      memset(g, 0, sizeof(*g));
      snprintf(g->coll, sizeof(g->coll), "%s", colls[k]);
      g->inplace = ip;
      g->nranks = nranks;
      for (uint64_t s = lo; s <= hi && g->nsizes < TUNE_MAX_SIZES; s *= f) g->size[g->nsizes++] = s;
      for (uint32_t i = 0; i < shunt_planset_count(ps); i++) {
        const struct shunt_plan_entry* e = shunt_planset_entry(ps, i);
        if (e->status == SHUNT_PLAN_OK && e->plan->ngpus == nranks &&
            !strcmp(e->plan->collective, colls[k]) &&
            (e->plan->inplace == (bool)ip || shunt_coll_rooted(e->plan->coll)) &&
            (!placed || shunt_rpn_matches(e->plan->ranks_per_node, nranks, rpn)))
          add_cand(g, e->plan->name);
      }
      ng++;
    }
  }
  for (unsigned i = 0; i < ng; i++) {
    if (!groups[i].ncand && !nccl) {
      /* A run needs something for both placements: without NCCL, a plan. */
      fprintf(stderr, "shunt-tune: no plan of %s serves %s on %u ranks %s, and there is no NCCL\n", dir,
              groups[i].coll, nranks, groups[i].inplace ? "in place" : "out of place");
      shunt_planset_free(ps);
      return 2;
    }
    if (nccl) add_cand(&groups[i], TUNE_NCCL);
  }
  fprintf(stderr, "shunt-tune: %u ranks, sizes %s..%s, %s; NCCL %s\n", nranks, o.minb, o.maxb, perf,
          nccl ? "measured too" : "not there (plans only)");

  unsigned runs = 0;
  for (; runs < o.max_runs && !interrupted; runs++) {
    for (unsigned k = 0; k < ng; k += 2) {
      struct tune_group *oop = &groups[k], *ip = &groups[k + 1];
      unsigned plans_o = oop->ncand - nccl, plans_i = ip->ncand - nccl;
      unsigned passes = (plans_o > plans_i ? plans_o : plans_i) + nccl;
      args[coll_arg] = oop->coll;
      for (unsigned p = 0; p < passes && !interrupted; p++) {
        bool is_nccl = nccl && p == passes - 1;
        const char* co = is_nccl || !plans_o ? NULL : oop->cand[p % plans_o];
        const char* ci = is_nccl || !plans_i ? NULL : ip->cand[p % plans_i];
        fprintf(stderr, "shunt-tune: run %u of at most %u, %s %u/%u: %s%s%s\n", runs + 1, o.max_runs,
                oop->coll, p + 1, passes,
                is_nccl ? "NCCL"
                : co    ? co
                        : "-",
                is_nccl ? "" : " + ",
                is_nccl ? ""
                : ci    ? ci
                        : "-");
        if (!is_nccl && write_forcing(tmp_tuning, ps, oop->coll, nranks, co, ci) != 0) {
          fprintf(stderr, "shunt-tune: cannot write %s: %s\n", tmp_tuning, strerror(errno));
          shunt_planset_free(ps);
          return 1;
        }
        int n = tune_measure(&tp, is_nccl ? NULL : tmp_tuning, is_nccl ? oop->coll : NULL, rows,
                             TUNE_MAX_SIZES * 2, NULL, 0, err, sizeof(err));
        if (n < 0 && is_nccl && !interrupted) {
          /* An NCCL that loads but cannot run here (no GPU): tune among the plans. */
          fprintf(stderr, "shunt-tune: NCCL did not run (%s); tuning among the plans only\n", err);
          nccl = false;
          for (unsigned i = 0; i < ng; i++) groups[i].ncand--;
          break;
        }
        if (n < 0) {
          if (interrupted) break;
          fprintf(stderr, "shunt-tune: %s\n", err);
          shunt_planset_free(ps);
          return 1;
        }
        if (is_nccl) {
          record(oop, rows, n, 0, TUNE_NCCL);
          record(ip, rows, n, 1, TUNE_NCCL);
        } else {
          if (co && p < plans_o) record(oop, rows, n, 0, co);
          if (ci && p < plans_i) record(ip, rows, n, 1, ci);
        }
      }
    }
    if (interrupted) break;
    double moved = 0;
    for (unsigned i = 0; i < ng; i++) {
      double m = tune_update_medians(&groups[i]);
      if (m > moved) moved = m;
    }
    if (runs > 0)
      fprintf(stderr, "shunt-tune: after run %u the medians moved by %.1f%% at most\n", runs + 1,
              moved * 100);
    if (runs + 1 >= o.min_runs && moved <= o.stable) {
      runs++;
      break;
    }
  }
  shunt_planset_free(ps);
  if (interrupted) {
    fprintf(stderr, "shunt-tune: interrupted; %s not written\n", o.out);
    return 130;
  }
  if (!writer) return 0;
  for (unsigned i = 0; i < ng; i++) {
    tune_decide(&groups[i], o.margin);
    print_table(&groups[i]);
  }
  if (write_tuning(o.out, groups, ng, &o, runs) != 0) return 1;
  if (tune_plot(plot_path, groups, ng, err, sizeof(err)) != 0) {
    fprintf(stderr, "shunt-tune: the plot: %s\n", err);
    return 1;
  }
  printf("\n# wrote %s and %s (%u run(s) of each candidate)\n", o.out, plot_path, runs);
  return 0;
}
