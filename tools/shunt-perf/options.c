/* Parses nccl-tests' flags by hand: getopt cannot take "-np", and nccl-tests accepts both
 * "-b 8" and "--minbytes 8". */
#include "options.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"

void perf_usage(FILE* f) {
  fprintf(f,
          "usage: shunt-perf [options]\n"
          "shunt's benchmark and correctness check, in the manner of nccl-tests, through the NCCL API.\n"
          "\n"
          "  -b, --minbytes N        smallest size (default 32M); suffixes K, M, G are powers of 2\n"
          "  -e, --maxbytes N        largest size (default 32M)\n"
          "  -i, --stepbytes N       additive step between sizes (default 1M)\n"
          "  -f, --stepfactor F      multiplicative step, used when > 1 (default off)\n"
          "  -n, --iters N           timed iterations per size (default 20)\n"
          "  -w, --warmup_iters N    untimed iterations per size (default 1)\n"
          "  -c, --check N           correctness rounds (default 1; 0 shows #wrong as N/A)\n"
          "  -d, --datatype T[,T..]  int8 uint8 int32 uint32 int64 uint64 half float double bfloat16\n"
          "                          f8e4m3 f8e5m2, or all (default float)\n"
          "  -o, --op OP[,OP..]      sum prod max min avg mulsum, or all (default sum)\n"
          "  -z, --blocking N        0 async; 1 sync and barrier after each op; 2 sync only; 3 sync\n"
          "                          and barrier per size (default 0)\n"
          "  -N, --run_cycles N      repeat the sweep N times, 0 = forever (default 1)\n"
          "  -G, --cudagraph N       GPU buffers: capture the -n calls into a CUDA graph and time N\n"
          "                          launches of it (host buffers: ignored)\n"
          "  --coll C                allreduce, allgather, reducescatter, alltoall, broadcast, reduce,\n"
          "                          all, or a comma list: one table each (default: allreduce and\n"
          "                          allgather)\n"
          "  --root R|all            broadcast's and reduce's root rank (default 0); all: every root\n"
          "                          in turn (a table per root, or with --random size k from root k\n"
          "                          mod the rank count)\n"
          "  --random N[,SEED]       N sizes drawn log-uniformly from [-b, -e] (fixed seed), every\n"
          "                          count exact (allgather, reducescatter and alltoall counts are\n"
          "                          not rounded to 16 bytes);\n"
          "                          with several -d types, size k uses the k-th type in turn\n"
          "  -np N                   start N processes on this machine, each with -t threads\n"
          "  -t, --nthreads N        threads per process (default 1)\n"
          "  -g, --ngpus N           ranks each thread drives, rank r on GPU r mod the GPU count;\n"
          "                          each call is one NCCL group of those ranks' calls (default 1)\n"
          "  --make-id               print a new unique id as hex for SHUNT_PERF_ID, then stay\n"
          "                          alive until interrupted: as with NCCL's bootstrap root, the\n"
          "                          process that made the id must live until every rank has joined\n"
          "  -h, --help              this text\n"
          "\n"
          "Joining a run of several machines: set SHUNT_PERF_RANK and SHUNT_PERF_NRANKS in each\n"
          "process, and SHUNT_PERF_ROOT=host:port (rank 0 listens there and hands out the id)\n"
          "or SHUNT_PERF_ID (the hex from `shunt-perf --make-id`).\n"
          "Without -np or those variables, shunt-perf runs -t x -g ranks in this process; with\n"
          "-np, N x -t x -g ranks.\n"
          "\n"
          "The last column names the plan that served the call, `nccl` when NCCL did, or `-` when\n"
          "the NCCL library in use is not shunt. The exit status is nonzero when any rank fails\n"
          "or any element is wrong.\n");
}

/* A size with an optional K/M/G suffix (powers of 2, as nccl-tests). */
static int parse_size(const char* s, size_t* out) {
  char* end;
  double v = strtod(s, &end);
  if (end == s || v < 0) return -1;
  switch (*end) {
    case 'K':
    case 'k':
      v *= 1024.0;
      end++;
      break;
    case 'M':
    case 'm':
      v *= 1024.0 * 1024;
      end++;
      break;
    case 'G':
    case 'g':
      v *= 1024.0 * 1024 * 1024;
      end++;
      break;
    default:
      break;
  }
  if (*end != '\0' && strcmp(end, "B") != 0) return -1;
  *out = (size_t)v;
  return 0;
}

static int parse_int(const char* s, int* out) {
  char* end;
  long v = strtol(s, &end, 0);
  if (end == s || *end || v < -2147483647L || v > 2147483647L) return -1;
  *out = (int)v;
  return 0;
}

static int parse_types(const char* s, struct perf_opts* o) {
  o->ntypes = 0;
  if (!strcmp(s, "all")) {
    for (int t = 0; t < PERF_NTYPES; t++) o->types[o->ntypes++] = (ncclDataType_t)t;
    return 0;
  }
  char buf[256];
  snprintf(buf, sizeof(buf), "%s", s);
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    if (o->ntypes == 16 || perf_dtype_parse(tok, &o->types[o->ntypes]) != 0) {
      fprintf(stderr, "shunt-perf: unknown datatype '%s'\n", tok);
      return -1;
    }
    o->ntypes++;
  }
  return o->ntypes ? 0 : -1;
}

static int parse_ops(const char* s, struct perf_opts* o) {
  o->nops = 0;
  if (!strcmp(s, "all")) {
    static const int all[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg, PERF_OP_MULSUM};
    for (int i = 0; i < 6; i++) o->ops[o->nops++] = all[i];
    return 0;
  }
  char buf[256];
  snprintf(buf, sizeof(buf), "%s", s);
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    if (o->nops == PERF_MAX_OPS || perf_op_parse(tok, &o->ops[o->nops]) != 0) {
      fprintf(stderr, "shunt-perf: unknown op '%s'\n", tok);
      return -1;
    }
    o->nops++;
  }
  return o->nops ? 0 : -1;
}

/* One name of --coll's comma list: its bit, or 0. */
static int coll_bit(const char* s, size_t n) {
  static const struct {
    const char* name;
    int bit;
  } names[] = {{"allreduce", PERF_COLL_ALLREDUCE},
               {"all_reduce", PERF_COLL_ALLREDUCE},
               {"allgather", PERF_COLL_ALLGATHER},
               {"all_gather", PERF_COLL_ALLGATHER},
               {"reducescatter", PERF_COLL_REDUCESCATTER},
               {"reduce_scatter", PERF_COLL_REDUCESCATTER},
               {"alltoall", PERF_COLL_ALLTOALL},
               {"all_to_all", PERF_COLL_ALLTOALL},
               {"broadcast", PERF_COLL_BROADCAST},
               {"reduce", PERF_COLL_REDUCE},
               {"all", PERF_COLL_ALLREDUCE | PERF_COLL_ALLGATHER | PERF_COLL_REDUCESCATTER |
                           PERF_COLL_ALLTOALL | PERF_COLL_BROADCAST | PERF_COLL_REDUCE}};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
    if (strlen(names[i].name) == n && !strncmp(s, names[i].name, n)) return names[i].bit;
  return 0;
}

static int parse_coll(const char* s, struct perf_opts* o) {
  int colls = 0;
  for (const char* p = s;;) {
    size_t n = strcspn(p, ",");
    int bit = coll_bit(p, n);
    if (!bit) {
      fprintf(
          stderr,
          "shunt-perf: --coll takes allreduce, allgather, reducescatter, alltoall, broadcast, reduce or all "
          "(or a comma list of them), not '%s'\n",
          s);
      return -1;
    }
    colls |= bit;
    if (!p[n]) break;
    p += n + 1;
  }
  o->colls = colls;
  return 0;
}

static const struct flag {
  char short_name;
  const char* long_name;
} flags[] = {{'b', "minbytes"}, {'e', "maxbytes"},     {'i', "stepbytes"},  {'f', "stepfactor"},
             {'n', "iters"},    {'w', "warmup_iters"}, {'c', "check"},      {'d', "datatype"},
             {'o', "op"},       {'z', "blocking"},     {'N', "run_cycles"}, {'G', "cudagraph"},
             {'t', "nthreads"}, {'g', "ngpus"},        {0, "coll"},         {1, "random"},
             {2, "root"}};

static int apply(const struct flag* f, const char* v, struct perf_opts* o) {
  int bad = 0;
  switch (f->short_name) {
    case 'b':
      bad = parse_size(v, &o->min_bytes);
      break;
    case 'e':
      bad = parse_size(v, &o->max_bytes);
      break;
    case 'i':
      bad = parse_size(v, &o->step_bytes);
      break;
    case 'f':
      o->step_factor = atof(v);
      bad = o->step_factor <= 0;
      break;
    case 'n':
      bad = parse_int(v, &o->iters) || o->iters < 1;
      break;
    case 'w':
      bad = parse_int(v, &o->warmup) || o->warmup < 0;
      break;
    case 'c':
      bad = parse_int(v, &o->check) || o->check < 0;
      break;
    case 'd':
      return parse_types(v, o);
    case 'o':
      return parse_ops(v, o);
    case 'z':
      bad = parse_int(v, &o->blocking) || o->blocking < 0 || o->blocking > 3;
      break;
    case 'N':
      bad = parse_int(v, &o->cycles) || o->cycles < 0;
      break;
    case 'G':
      bad = parse_int(v, &o->graph) || o->graph < 0;
      break;
    case 't':
      bad = parse_int(v, &o->nthreads) || o->nthreads < 1 || o->nthreads > 64;
      break;
    case 'g':
      bad = parse_int(v, &o->ngpus) || o->ngpus < 1 || o->ngpus > 64;
      break;
    case 1: {
      /* N sizes, log-uniform in [-b, -e], from a fixed seed (N,SEED to change it). */
      char* end = NULL;
      long k = strtol(v, &end, 10);
      o->random_seed = 1;
      if (end && *end == ',') o->random_seed = strtoul(end + 1, &end, 10);
      bad = k < 1 || k > 1000000 || !end || *end;
      o->random_sizes = (int)k;
      break;
    }
    case 2:
      if (!strcmp(v, "all"))
        o->root = -1;
      else
        bad = parse_int(v, &o->root) || o->root < 0;
      break;
    default:
      return parse_coll(v, o);
  }
  if (bad) fprintf(stderr, "shunt-perf: bad value '%s' for --%s\n", v, f->long_name);
  return bad ? -1 : 0;
}

int perf_parse_options(int argc, char** argv, struct perf_opts* o) {
  *o = (struct perf_opts){.min_bytes = 32u << 20,
                          .max_bytes = 32u << 20,
                          .step_bytes = 1u << 20,
                          .step_factor = 1,
                          .iters = 20,
                          .warmup = 1,
                          .check = 1,
                          .cycles = 1,
                          .nthreads = 1,
                          .ngpus = 1,
                          .ntypes = 1,
                          .types = {ncclFloat32},
                          .nops = 1,
                          .ops = {ncclSum},
                          .colls = PERF_COLL_ALLREDUCE | PERF_COLL_ALLGATHER};
  for (int i = 1; i < argc; i++) {
    const char* a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      perf_usage(stdout);
      return 1;
    }
    if (!strcmp(a, "--make-id")) {
      o->make_id = 1;
      continue;
    }
    if (!strcmp(a, "-np") || !strcmp(a, "--np")) {
      if (i + 1 >= argc || parse_int(argv[++i], &o->nprocs) || o->nprocs < 1) {
        fprintf(stderr, "shunt-perf: -np needs a rank count >= 1\n");
        return -1;
      }
      continue;
    }
    const struct flag* f = NULL;
    const char* value = NULL;
    for (size_t k = 0; k < sizeof(flags) / sizeof(flags[0]) && !f; k++) {
      size_t ln = strlen(flags[k].long_name);
      if (a[0] == '-' && a[1] == '-' && !strncmp(a + 2, flags[k].long_name, ln) &&
          (a[2 + ln] == '\0' || a[2 + ln] == '=')) {
        f = &flags[k];
        if (a[2 + ln] == '=') value = a + 3 + ln;
      } else if (flags[k].short_name && a[0] == '-' && a[1] == flags[k].short_name) {
        f = &flags[k];
        if (a[2]) value = a + 2;
      }
    }
    if (!f) {
      fprintf(stderr, "shunt-perf: unknown option '%s'\n", a);
      perf_usage(stderr);
      return -1;
    }
    if (!value) {
      if (i + 1 >= argc) {
        fprintf(stderr, "shunt-perf: %s needs a value\n", a);
        return -1;
      }
      value = argv[++i];
    }
    if (apply(f, value, o) != 0) return -1;
  }
  if (o->min_bytes > o->max_bytes) {
    fprintf(stderr, "shunt-perf: minbytes %zu is larger than maxbytes %zu\n", o->min_bytes, o->max_bytes);
    return -1;
  }
  if (o->step_factor <= 1 && o->step_bytes == 0) {
    fprintf(stderr, "shunt-perf: stepbytes must be > 0 without a step factor > 1\n");
    return -1;
  }
  return 0;
}
