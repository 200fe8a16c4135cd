/* Ranks as threads of one process: two threads build a world over an in-process bootstrap
 * and run the seed plan (2-rank LL allgather) several times; every output byte is checked. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "exec/host/host_run.h"
#include "exec/lower.h"
#include "plan/parse.h"

#define NR 2
#define THREAD_EXCHANGE_RANKS NR
#define THREAD_EXCHANGE_SLOT 4096
#include "common/thread_exchange.h"

struct rank_arg {
  uint32_t rank;
  const struct shunt_plan* plan;
  int failures;
};

static int allgather(void* ctx, void* buf, size_t bytes) {
  return thread_exchange_allgather(((struct rank_arg*)ctx)->rank, buf, bytes);
}

static void* rank_main(void* arg) {
  struct rank_arg* a = arg;
  const uint64_t in_bytes = 4096, out_bytes = in_bytes * NR;
  struct shunt_world_exchange bs = {.oob = {a, allgather, thread_exchange_barrier}};
  struct shunt_world_config cfg = {shunt_lower_scratch_need(a->plan, in_bytes, out_bytes), in_bytes,
                                   out_bytes};
  struct shunt_world* w = NULL;
  char err[4096];
  if (shunt_world_create(a->rank, NR, &cfg, &bs, &w, err, sizeof(err)) != 0) {
    fprintf(stderr, "world: %s\n", err);
    a->failures++;
    return NULL;
  }
  struct shunt_call_shape s = {in_bytes, out_bytes, SHUNT_DT_INT8, SHUNT_REDOP_SUM, SHUNT_PKT_LL16, 0, false, false};
  struct shunt_program* p = shunt_lower(a->plan, a->rank, &s, err, sizeof(err));
  char* out = malloc(out_bytes);
  for (int it = 0; p && it < 5; it++) {
    memset(out, 0, out_bytes);
    char* in = out + a->rank * in_bytes; /* the seed plan is in place */
    for (uint64_t i = 0; i < in_bytes; i++) in[i] = (char)(i * 7 + a->rank * 13 + it);
    struct shunt_host_run_opts o = {10000, NULL};
    if (shunt_host_run(w, p, in, out, &o, err, sizeof(err)) != 0) {
      fprintf(stderr, "run: %s\n", err);
      a->failures++;
      break;
    }
    for (uint32_t r = 0; r < NR; r++)
      for (uint64_t i = 0; i < in_bytes; i++)
        if (out[r * in_bytes + i] != (char)(i * 7 + r * 13 + it)) {
          fprintf(stderr, "rank %u iteration %d: byte %llu of rank %u's part differs\n", a->rank, it,
                  (unsigned long long)i, r);
          a->failures++;
          i = in_bytes;
        }
  }
  if (!p) {
    fprintf(stderr, "lower: %s\n", err);
    a->failures++;
  }
  free(out);
  shunt_program_free(p);
  shunt_world_destroy(w);
  return NULL;
}

int main(void) {
  struct shunt_plan_errors errs = {0};
  struct shunt_plan* plan = shunt_plan_load_file(SEED_PLAN, &errs);
  CHECK(plan != NULL);
  shunt_plan_errors_free(&errs);
  if (!plan) CHECK_DONE();
  pthread_t th[NR];
  struct rank_arg args[NR];
  for (uint32_t r = 0; r < NR; r++) {
    args[r] = (struct rank_arg){r, plan, 0};
    pthread_create(&th[r], NULL, rank_main, &args[r]);
  }
  for (uint32_t r = 0; r < NR; r++) {
    pthread_join(th[r], NULL);
    CHECK_EQ_INT(args[r].failures, 0);
  }
  shunt_plan_free(plan);
  CHECK_DONE();
}
