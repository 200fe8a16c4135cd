/* The one peer set-up (transport/peers.h), ranks as threads over an in-process exchange with
 * the plain memory row: all succeed and map each other; a rank asking for other sizes, a rank
 * whose own part failed and a rank whose last step failed each fail every rank, with the
 * cause named, and whatever ready step succeeded is undone. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "transport/mem.h"
#include "transport/peers.h"
#include "util/status.h"

#define NR 4
#define THREAD_EXCHANGE_RANKS NR
#define THREAD_EXCHANGE_SLOT 512
#include "common/thread_exchange.h"

/* What a case asks of one rank, and what it saw. */
struct rank {
  uint32_t rank;
  uint64_t sizes[2];
  bool local_ok, ready_ok;
  int readied, unreadied;
  char region[64];
  int rc;
  char err[256];
  char* base[NR];
};

static int allgather(void* ctx, void* buf, size_t bytes) {
  return thread_exchange_allgather(((struct rank*)ctx)->rank, buf, bytes);
}

static int ready(void* ctx, const struct shunt_peers* p, char* err, size_t len) {
  struct rank* a = ctx;
  for (uint32_t r = 0; r < NR; r++) a->base[r] = p->base[r];
  if (!a->ready_ok) {
    snprintf(err, len, "my proxy would not start");
    return SHUNT_E_SYSTEM; /* reaches this rank's caller as it is */
  }
  a->readied++;
  return 0;
}

static void unready(void* ctx) {
  ((struct rank*)ctx)->unreadied++;
}

static void* rank_main(void* arg) {
  struct rank* a = arg;
  struct shunt_world_exchange bs = {.oob = {a, allgather, thread_exchange_barrier}};
  struct shunt_peers_config c = {.rank = a->rank,
                                 .nranks = NR,
                                 .bs = &bs,
                                 .what = "test region",
                                 .sizes = a->sizes,
                                 .sizes_bytes = sizeof(a->sizes),
                                 .mem = &shunt_mem_plain,
                                 .region = a->region,
                                 .bytes = sizeof(a->region),
                                 .ctx = a,
                                 .ready = ready,
                                 .unready = unready};
  struct shunt_peers p;
  if (!a->local_ok) snprintf(a->err, sizeof(a->err), "my region could not be made");
  a->rc = shunt_peers_setup(&c, a->local_ok, &p, a->err, sizeof(a->err));
  if (a->rc == 0) shunt_peers_free(&p, false);
  return NULL;
}

static void run(struct rank* ranks) {
  pthread_t t[NR];
  for (uint32_t r = 0; r < NR; r++) pthread_create(&t[r], NULL, rank_main, &ranks[r]);
  for (uint32_t r = 0; r < NR; r++) pthread_join(t[r], NULL);
}

static void fresh(struct rank* ranks) {
  memset(ranks, 0, NR * sizeof(*ranks));
  for (uint32_t r = 0; r < NR; r++)
    ranks[r] = (struct rank){.rank = r, .sizes = {4096, 8192}, .local_ok = true, .ready_ok = true};
}

int main(void) {
  static struct rank ranks[NR];

  fresh(ranks);
  run(ranks);
  for (uint32_t r = 0; r < NR; r++) {
    CHECK_MSG(ranks[r].rc == 0, "rank %u: %s", r, ranks[r].err);
    CHECK_EQ_INT(ranks[r].readied, 1);
    CHECK_EQ_INT(ranks[r].unreadied, 0);
    for (uint32_t k = 0; k < NR; k++) CHECK(ranks[r].base[k] == ranks[k].region);
  }

  /* Rank 2 asks for other sizes: every rank fails; rank 2's peers say so. */
  fresh(ranks);
  ranks[2].sizes[1] = 4096;
  run(ranks);
  for (uint32_t r = 0; r < NR; r++) {
    CHECK_EQ_INT(ranks[r].rc, SHUNT_E_INVALID);
    CHECK_EQ_INT(ranks[r].readied, 0);
  }
  CHECK_STR_CONTAINS(ranks[0].err, "rank 2 asked for different world sizes than rank 0");

  /* Rank 1's own part failed: it keeps its message, the others name it. */
  fresh(ranks);
  ranks[1].local_ok = false;
  run(ranks);
  /* The code says whose failure it was: the rank's own, a peer's for the others. */
  for (uint32_t r = 0; r < NR; r++) CHECK_EQ_INT(ranks[r].rc, r == 1 ? SHUNT_E_INVALID : SHUNT_E_PEER);
  CHECK_STR_CONTAINS(ranks[1].err, "my region could not be made");
  CHECK_STR_CONTAINS(ranks[3].err, "rank 1 could not create its test region");

  /* Rank 3's last step failed: the others learn it in the vote and undo theirs. */
  fresh(ranks);
  ranks[3].ready_ok = false;
  run(ranks);
  for (uint32_t r = 0; r < NR; r++) CHECK_EQ_INT(ranks[r].rc, r == 3 ? SHUNT_E_SYSTEM : SHUNT_E_PEER);
  CHECK_STR_CONTAINS(ranks[3].err, "my proxy would not start");
  CHECK_STR_CONTAINS(ranks[0].err, "rank 3 failed to set up its world");
  for (uint32_t r = 0; r < 3; r++) {
    CHECK_EQ_INT(ranks[r].readied, 1);
    CHECK_EQ_INT(ranks[r].unreadied, 1);
  }
  CHECK_EQ_INT(ranks[3].unreadied, 0);
  return check_failures ? 1 : 0;
}
