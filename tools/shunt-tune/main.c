/* shunt-tune: runs the in-job tuning engine (SHUNT_TUNING=auto, api/tune.h) as a benchmark over
 * every size, through shunt-perf, with every plan that can serve a size (and NCCL when there is
 * one) a candidate, and writes the tuning file that gives each plan the sizes where it won, with
 * a plot of the engine's times. See docs/tuning.md. */
#include <dirent.h>
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
#include "plan/tune_cache.h"
#include "plan/tuning.h"
#include "tune.h"
#include "util/host.h"

struct opts {
  const char *np, *nthreads, *minb, *maxb, *factor, *coll, *out, *plot, *perf;
  unsigned samples, warmup, margin, cut; /* the engine's SHUNT_TUNING_SAMPLES, _WARMUP, _MARGIN, _CUT */
};

static volatile sig_atomic_t interrupted;
static char tmp_cache[4096]; /* the engine's cache folder, removed at exit */

static void on_signal(int sig) {
  interrupted = sig;
  if (tune_child_pid > 0) kill(tune_child_pid, SIGTERM);
}

static void usage(FILE* f) {
  fprintf(f,
          "usage: shunt-tune [options]\n"
          "Runs shunt's in-job tuning (SHUNT_TUNING=auto) over shunt-perf at each size, every plan of\n"
          "SHUNT_PLAN_DIR that can serve it (and NCCL when there is one) a candidate, and writes a\n"
          "tuning file giving each plan the sizes where it won.\n\n"
          "  -np N, -t N             ranks as processes / threads per process, as shunt-perf\n"
          "  -b, -e SIZE             smallest and largest size (default 1K and 16M; K, M, G)\n"
          "  -f F                    step factor between sizes (default 2)\n"
          "  -n N                    timed calls of each candidate the screen keeps (default 20)\n"
          "  -w N                    warm-up calls of each candidate before its screen call (default 3)\n"
          "  --coll C                allreduce, allgather, reducescatter, alltoall, broadcast, reduce\n"
          "                          or all\n"
          "                          (default all)\n"
          "  -o FILE                 the tuning file to write (default shunt.tuning)\n"
          "  --plot FILE             the plot (PNG) to write (default: the tuning file's name + .png)\n"
          "  --cut PCT               the screen keeps candidates within PCT%% of the fastest (default 30)\n"
          "  --margin PCT            a plan takes over from the untuned one only when faster by more\n"
          "                          than PCT%% (default 5)\n"
          "  --perf PATH             the shunt-perf to run (default: next to shunt-tune, else PATH)\n"
          "  -h, --help              this text\n\n"
          "A run over several machines: start shunt-tune on each with shunt-perf's variables\n"
          "(SHUNT_PERF_RANK, SHUNT_PERF_NRANKS, SHUNT_PERF_ROOT); rank 0 writes the file and the plot.\n");
}

static int parse(int argc, char** argv, struct opts* o) {
  *o = (struct opts){.minb = "1K",
                     .maxb = "16M",
                     .factor = "2",
                     .coll = "all",
                     .out = "shunt.tuning",
                     .samples = 20,
                     .warmup = 3,
                     .margin = 5,
                     .cut = 30};
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
    OPT("-f", factor)
    OPT("--stepfactor", factor)
    OPT("--coll", coll)
    OPT("-o", out)
    OPT("--plot", plot)
    OPT("--perf", perf)
#undef OPT
    /* Whole numbers the engine takes, with its bounds. */
    struct {
      const char* name;
      unsigned* field;
      unsigned long lo, hi;
    } nums[] = {{"-n", &o->samples, 1, 1000},     {"--iters", &o->samples, 1, 1000},
                {"-w", &o->warmup, 0, 100},       {"--warmup_iters", &o->warmup, 0, 100},
                {"--margin", &o->margin, 0, 100}, {"--cut", &o->cut, 0, 1000}};
    bool took = false;
    for (unsigned k = 0; k < sizeof(nums) / sizeof(nums[0]) && !took; k++) {
      if (strcmp(a, nums[k].name)) continue;
      char* end = NULL;
      unsigned long n = v ? strtoul(v, &end, 10) : 0;
      if (!v || !*v || *end || n < nums[k].lo || n > nums[k].hi) {
        fprintf(stderr, "shunt-tune: %s %s: want a whole number from %lu to %lu\n", a, v ? v : "(nothing)",
                nums[k].lo, nums[k].hi);
        return -1;
      }
      *nums[k].field = (unsigned)n;
      took = true;
      i++;
    }
    if (took) continue;
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

/* The engine's decisions for one group, from the cache file it wrote: each size's winner and
 * every candidate's time there. The sizes it did not decide are listed in err. */
static int take_decisions(struct tune_group* g, const struct shunt_tune_saved* d, uint32_t n, char* err,
                          size_t len) {
  enum shunt_coll coll = shunt_coll_of_name(g->coll);
  /* A plan of a rooted collective serves both modes: its calls are one bucket (api/tune.h). */
  uint32_t inplace = !shunt_coll_rooted(coll) && g->inplace;
  size_t at = 0;
  err[0] = 0;
  for (unsigned s = 0; s < g->nsizes; s++) {
    g->winner[s] = -1;
    const struct shunt_tune_saved* x = NULL;
    for (uint32_t i = 0; i < n && !x; i++)
      if (d[i].key.coll == shunt_coll_code(coll) && d[i].key.inplace == inplace &&
          d[i].key.cls == shunt_tune_class(g->size[s]))
        x = &d[i];
    if (!x) {
      char a[32];
      if (at < len)
        at += (size_t)snprintf(err + at, len - at, "%s%s", at ? ", " : "",
                               shunt_tuning_format_size(g->size[s], a, sizeof(a)));
      continue;
    }
    for (uint32_t k = 0; k < x->ntimes; k++) {
      if (cand_index(g, x->times[k].name) < 0) add_cand(g, x->times[k].name);
      int c = cand_index(g, x->times[k].name);
      if (c >= 0) g->med[c][s] = x->times[k].us;
    }
    if (cand_index(g, x->winner) < 0) add_cand(g, x->winner);
    g->winner[s] = cand_index(g, x->winner);
  }
  return at ? -1 : 0;
}

/* The cache file the engine wrote in `dir` (the only one there): its decisions. */
static int read_cache(const char* dir, struct shunt_tune_saved** d, uint32_t* n) {
  *d = NULL;
  *n = 0;
  DIR* dp = opendir(dir);
  if (!dp) return -1;
  struct dirent* de;
  char path[8192] = "";
  while ((de = readdir(dp))) {
    size_t l = strlen(de->d_name);
    /* "shunt-HASH.tuning", not a writer's temporary "shunt-HASH.tuning.PID.tmp" */
    if (!strncmp(de->d_name, "shunt-", 6) && l > 7 && !strcmp(de->d_name + l - 7, ".tuning"))
      snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
  }
  closedir(dp);
  if (!path[0]) return -1;
  shunt_tune_cache_read(path, NULL, d, n);
  return 0;
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

static int write_tuning(const char* path, struct tune_group* groups, unsigned n, const struct opts* o) {
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
  fprintf(
      f,
      "# Written by shunt-tune on %s at %s: sizes %s..%s (x%s), decided by shunt's in-job tuning: %u\n"
      "# warm-up and one screen call per candidate, those within %u%% of the fastest timed %u more times,\n"
      "# the slowest rank's median deciding; a plan takes over from the untuned one when faster by more\n"
      "# than %u%% and its samples beat the untuned one's in enough of their pairs (docs/tuning.md).\n"
      "# Load it with\n",
      host, when, o->minb, o->maxb, o->factor, o->warmup, o->cut, o->samples, o->margin);
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
  if (!tmp_cache[0]) return;
  DIR* dp = opendir(tmp_cache);
  struct dirent* de;
  char path[8192];
  while (dp && (de = readdir(dp)))
    if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
      snprintf(path, sizeof(path), "%s/%s", tmp_cache, de->d_name);
      unlink(path);
    }
  if (dp) closedir(dp);
  rmdir(tmp_cache);
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
  int tk = snprintf(tmp_cache, sizeof(tmp_cache), "%s/shunt-tune.%d.XXXXXX", tdir, (int)getpid());
  if (tk < 0 || (size_t)tk >= sizeof(tmp_cache) || !mkdtemp(tmp_cache)) {
    fprintf(stderr, "shunt-tune: cannot make a temporary folder in %s: %s\n", tdir, strerror(errno));
    tmp_cache[0] = 0;
    shunt_planset_free(ps);
    return 2;
  }
  /* The engine's settings, for every shunt-perf run: every plan a candidate, whatever its own
   * range says; the decisions kept in a folder of this run's own. */
  char num[4][16];
  snprintf(num[0], sizeof(num[0]), "%u", o.warmup);
  snprintf(num[1], sizeof(num[1]), "%u", o.samples);
  snprintf(num[2], sizeof(num[2]), "%u", o.cut);
  snprintf(num[3], sizeof(num[3]), "%u", o.margin);
  setenv("SHUNT_TUNING_CACHE", tmp_cache, 1);
  setenv("SHUNT_TUNING_REACH", "64", 1);
  setenv("SHUNT_TUNING_WARMUP", num[0], 1);
  setenv("SHUNT_TUNING_SAMPLES", num[1], 1);
  setenv("SHUNT_TUNING_CUT", num[2], 1);
  setenv("SHUNT_TUNING_MARGIN", num[3], 1);

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

  /* Groups: each collective asked for, out of place then in place; every plan that can serve
   * one is listed (a plan the engine never picks gets no range: the file disables it). */
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
  }
  shunt_planset_free(ps);
  fprintf(stderr, "shunt-tune: %u ranks, sizes %s..%s, %s; NCCL %s\n", nranks, o.minb, o.maxb, perf,
          nccl ? "a candidate for device buffers" : "not there (plans only)");

  /* One engine run per collective: enough calls per size and mode for every candidate's warm-up
   * and screen call, the samples of all of them, a second round of samples for two, the swaps,
   * and slack for swaps put off while device samples are still running. */
  for (unsigned k = 0; k < ng && !interrupted; k += 2) {
    unsigned n = groups[k].ncand > groups[k + 1].ncand ? groups[k].ncand : groups[k + 1].ncand;
    n += nccl;
    if (n > SHUNT_TUNE_MAX_CAND) n = SHUNT_TUNE_MAX_CAND;
    char calls[16];
    snprintf(calls, sizeof(calls), "%u", n * (o.warmup + 1) + 2 + n * o.samples + 2 * o.samples + 1 + n + 4);
    char* args[24];
    args[perf_args(&o, args, o.maxb, calls, "0")] = groups[k].coll;
    struct tune_perf tp = {perf, args};
    fprintf(stderr, "shunt-tune: %s: %u sizes x 2 modes, %s calls each, up to %u candidates ...\n",
            groups[k].coll, groups[k].nsizes, calls, n);
    if (tune_measure(&tp, "auto", NULL, rows, TUNE_MAX_SIZES * 2, NULL, 0, err, sizeof(err)) < 0) {
      if (interrupted) break;
      fprintf(stderr, "shunt-tune: %s: %s\n", groups[k].coll, err);
      return 1;
    }
  }
  if (interrupted) {
    fprintf(stderr, "shunt-tune: interrupted; %s not written\n", o.out);
    return 130;
  }
  if (!writer) return 0;
  struct shunt_tune_saved* d = NULL;
  uint32_t nd = 0;
  if (read_cache(tmp_cache, &d, &nd) != 0 || !nd) {
    fprintf(stderr, "shunt-tune: the tuning engine kept no decisions in %s\n", tmp_cache);
    free(d);
    return 1;
  }
  for (unsigned i = 0; i < ng; i++) {
    if (take_decisions(&groups[i], d, nd, err, sizeof(err)) != 0) {
      fprintf(stderr, "shunt-tune: %s %s: no decision for %s\n", groups[i].coll,
              groups[i].inplace ? "in place" : "out of place", err);
      free(d);
      return 1;
    }
    tune_ranges(&groups[i]);
    print_table(&groups[i]);
  }
  free(d);
  if (write_tuning(o.out, groups, ng, &o) != 0) return 1;
  if (tune_plot(plot_path, groups, ng, err, sizeof(err)) != 0) {
    fprintf(stderr, "shunt-tune: the plot: %s\n", err);
    return 1;
  }
  printf("\n# wrote %s and %s\n", o.out, plot_path);
  return 0;
}
