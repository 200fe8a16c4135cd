/* Plan lookup cost: 200 synthetic plans (allreduce and allgather, 2..32 ranks, in-place and
 * out-of-place, 10 size ranges each) written to a temp folder and loaded as a PlanSet; then
 * timed lookups over a fixed pseudo-random mix of calls. Prints ns per lookup.
 *   plan_lookup_bench [LOOKUPS]   (default 20,000,000) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "plan/planset.h"

static const unsigned ranks[] = {2, 4, 8, 16, 32};

static void write_plan(const char* dir, int coll, unsigned n, int inplace, int k) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/%s_%ur_%s_%02d.json", dir, coll ? "ag" : "ar", n, inplace ? "ip" : "oop",
           k);
  FILE* f = fopen(path, "w");
  if (!f) {
    perror(path);
    exit(1);
  }
  /* Range k: [4K << k, (8K << k) - 1] for k < 9; the last one open-ended. */
  unsigned long long lo = 4096ull << k, hi = k == 9 ? 18446744073709551615ull : (8192ull << k) - 1;
  fprintf(f,
          "{\"name\":\"%s_%u_%d_%d\",\"collective\":\"%s\",\"protocol\":\"LL\",\"inplace\":%s,"
          "\"min_message_size\":%llu,\"max_message_size\":%llu,\"gpus\":[",
          coll ? "ag" : "ar", n, inplace, k, coll ? "allgather" : "allreduce", inplace ? "true" : "false", lo,
          hi);
  for (unsigned r = 0; r < n; r++)
    fprintf(
        f,
        "%s{\"id\":%u,\"input_chunks\":%u,\"output_chunks\":%u,\"scratch_chunks\":0,\"channels\":[],"
        "\"remote_buffers\":[],\"threadblocks\":[{\"id\":0,\"channels\":[],\"ops\":[{\"name\":\"nop\"}]}]}",
        r ? "," : "", r, coll ? 1 : n, n);
  fprintf(f, "]}\n");
  fclose(f);
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

int main(int argc, char** argv) {
  long lookups = argc > 1 ? atol(argv[1]) : 20000000L;
  char dir[] = "/tmp/shunt-plan-bench-XXXXXX";
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  int nplans = 0;
  for (int coll = 0; coll < 2; coll++)
    for (unsigned i = 0; i < sizeof(ranks) / sizeof(ranks[0]); i++)
      for (int ip = 0; ip < 2; ip++)
        for (int k = 0; k < 10; k++, nplans++) write_plan(dir, coll, ranks[i], ip, k);
  struct shunt_plan_errors errs = {0};
  struct shunt_planset* ps = NULL;
  double t0 = now();
  shunt_planset_load(dir, NULL, &ps, &errs);
  double load_ms = (now() - t0) / 1e6;
  char cmd[256];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  if (!ps || shunt_planset_usable(ps) != (uint32_t)nplans || errs.n) {
    fprintf(stderr, "loaded %u of %d plans\n", ps ? shunt_planset_usable(ps) : 0, nplans);
    return 1;
  }

  enum { NQ = 4096 };
  static struct shunt_select_query q[NQ];
  unsigned seed = 12345;
  for (int i = 0; i < NQ; i++) {
    seed = seed * 1103515245u + 12345u;
    unsigned n = ranks[(seed >> 8) % 5];
    q[i].coll = (seed >> 4) & 1 ? SHUNT_COLL_ALLGATHER : SHUNT_COLL_ALLREDUCE;
    q[i].nranks = n;
    q[i].inplace = (seed >> 5) & 1;
    q[i].dtype = SHUNT_DT_FLOAT32;
    q[i].op = SHUNT_REDOP_SUM;
    /* sizes 4K..8M, multiples of 16 * n * n so every plan's divisibility holds */
    unsigned long long unit = 16ull * n * n;
    unsigned long long size = 4096ull << ((seed >> 12) % 12);
    q[i].bytes = (size / unit + 1) * unit;
  }
  long hits = 0;
  for (int i = 0; i < NQ; i++) hits += shunt_planset_select(ps, &q[i]).entry != NULL; /* warm up */
  hits = 0;
  t0 = now();
  for (long i = 0; i < lookups; i++) {
    struct shunt_selection s = shunt_planset_select(ps, &q[i & (NQ - 1)]);
    hits += s.entry != NULL;
  }
  double ns = (now() - t0) / (double)lookups;
  printf("plans loaded: %d (load %.1f ms)\nlookups: %ld, hits: %ld\nns per lookup: %.1f\n", nplans, load_ms,
         lookups, hits, ns);
  shunt_planset_free(ps);
  shunt_plan_errors_free(&errs);
  return 0;
}
