/* A packet plan on a fresh world whose scratch holds what other plans leave there. Two threads
 * build a world and fill their own scratch: the part plans without packets use (exec/ops/packet.h:
 * shunt_scratch_at) with the worst user data there is, words whose upper half is the very flag the
 * next run stamps its packets with; the packet part with small integers (the 32-bit value 1),
 * which a packet plan's own plain data could leave. Then they run the seed plan (2-rank LL
 * allgather); rank 1 starts late, so rank 0 unpacks before rank 1's packets land. A stale word
 * read as a packet would show in the output: every byte is checked. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/check.h"
#include "exec/host/host_run.h"
#include "exec/lower.h"
#include "exec/ops/packet.h"
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
  uint32_t flag = shunt_pkt_flag_for_epoch(0); /* the world's first run */
  uint64_t plain = shunt_scratch_at(flag, w->cfg.scratch_bytes, 0, 0);
  uint32_t* s = (uint32_t*)(void*)w->peers[w->rank].scratch;
  for (uint64_t i = 0; i < w->cfg.scratch_bytes / 4; i++) s[i] = i * 4 < plain ? 1 : (i % 2 ? flag : 7);
  thread_exchange_barrier(NULL); /* both scratches filled before either rank sends */
  struct shunt_call_shape shape = {in_bytes,       out_bytes, SHUNT_DT_INT8, SHUNT_REDOP_SUM,
                                   SHUNT_PKT_LL16, 0,         false, false};
  struct shunt_program* p = shunt_lower(a->plan, a->rank, &shape, err, sizeof(err));
  char* out = malloc(out_bytes);
  if (p) {
    memset(out, 0, out_bytes);
    char* in = out + a->rank * in_bytes; /* the seed plan is in place */
    for (uint64_t i = 0; i < in_bytes; i++) in[i] = (char)(i * 7 + a->rank * 13 + 5);
    if (a->rank == 1) usleep(50000);
    struct shunt_host_run_opts o = {10000, NULL};
    if (shunt_host_run(w, p, in, out, &o, err, sizeof(err)) != 0) {
      fprintf(stderr, "run: %s\n", err);
      a->failures++;
    }
    for (uint32_t r = 0; r < NR && !a->failures; r++)
      for (uint64_t i = 0; i < in_bytes; i++)
        if (out[r * in_bytes + i] != (char)(i * 7 + r * 13 + 5)) {
          fprintf(stderr, "rank %u: byte %llu of rank %u's part differs\n", a->rank, (unsigned long long)i,
                  r);
          a->failures++;
          break;
        }
  } else {
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
