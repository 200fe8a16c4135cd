/* Several rendezvous at once in one process, their ranks interleaved as threads; each
 * communicator then splits and runs its exchanges while the others run theirs.
 * Usage: test_bootstrap_concurrent [RENDEZVOUS [NRANKS]]
 * (CHECK's counter is shared by the threads; see test_bootstrap_ranks.c.) */
#include <stdio.h>

#include "bootstrap/ranks.h"

#define MAX_IDS 8

struct world {
  struct shunt_bootstrap_id ids[MAX_IDS];
  int nids, nranks;
};

/* Thread t is rank t / nids of rendezvous t % nids. */
static int one_thread(void* ctx, int t, int nthreads) {
  const struct world* w = ctx;
  (void)nthreads;
  int rank = t / w->nids, which = t % w->nids, before = check_failures;
  char err[512] = "";
  struct shunt_bootstrap* b = NULL;
  CHECK_MSG(shunt_bootstrap_init(&w->ids[which], rank, w->nranks, &b, err, sizeof(err)) == 0, "%s", err);
  if (!b) return 1;
  /* Tell the communicators apart: everyone learns which rendezvous its peers joined. */
  int* seen = calloc((size_t)w->nranks, sizeof(int));
  seen[rank] = which;
  CHECK_MSG(shunt_bootstrap_allgather(b, seen, sizeof(int), err, sizeof(err)) == 0, "%s", err);
  for (int r = 0; r < w->nranks; r++) CHECK_EQ_INT(seen[r], which);
  free(seen);
  exercise_comm(b);
  exercise_split(b);
  shunt_bootstrap_destroy(b);
  return check_failures - before;
}

int main(int argc, char** argv) {
  struct world w = {.nids = argc > 1 ? atoi(argv[1]) : 3, .nranks = argc > 2 ? atoi(argv[2]) : 4};
  CHECK(w.nids >= 1 && w.nids <= MAX_IDS && w.nranks >= 1 && w.nids * w.nranks <= MAX_TEST_RANKS);
  if (check_failures) CHECK_DONE();
  char err[256] = "";
  for (int i = 0; i < w.nids; i++)
    CHECK_MSG(shunt_bootstrap_root_create_timeout(&w.ids[i], 60, err, sizeof(err)) == 0, "%s", err);
  for (int i = 1; i < w.nids; i++)
    CHECK(w.ids[i].key != w.ids[0].key && w.ids[i].root.port != w.ids[0].root.port);
  if (check_failures) CHECK_DONE();
  CHECK_EQ_INT(run_threads(one_thread, &w, w.nids * w.nranks), 0);
  CHECK_DONE();
}
