/* N ranks of one rendezvous, as processes or as threads: init, allgather, broadcast from every
 * root, barrier, tagged ring send/recv, split into halves and by NOCOLOR with the same
 * exchanges on the children.
 * Usage: test_bootstrap_ranks procs|threads|onethread N
 *   onethread: one thread starts and finishes every rank's init (as ncclCommInitAll or a group
 *   does), then each rank runs in a thread of its own.
 * CHECK counts failures in a plain int that ranks running as threads share: it is written only
 * when a check fails, and such a run fails whatever the count. */
#include <stdio.h>

#include "bootstrap/ranks.h"

static int one_rank(void* ctx, int rank, int n) {
  const struct shunt_bootstrap_id* id = ctx;
  int before = check_failures;
  char err[512] = "";
  struct shunt_bootstrap* b = NULL;
  CHECK_MSG(shunt_bootstrap_init(id, rank, n, &b, err, sizeof(err)) == 0, "rank %d: %s", rank, err);
  if (!b) return 1;
  CHECK_EQ_INT(shunt_bootstrap_rank(b), rank);
  CHECK_EQ_INT(shunt_bootstrap_nranks(b), n);
  exercise_comm(b);
  exercise_split(b);
  shunt_bootstrap_destroy(b);
  return check_failures - before;
}

static int use_started(void* ctx, int rank, int n) {
  struct shunt_bootstrap** bs = ctx;
  (void)n;
  return exercise_comm(bs[rank]) + exercise_split(bs[rank]);
}

static int one_thread(const struct shunt_bootstrap_id* id, int n) {
  struct shunt_bootstrap* bs[MAX_TEST_RANKS] = {0};
  char err[512] = "";
  for (int r = 0; r < n; r++)
    CHECK_MSG(shunt_bootstrap_init_start(id, r, n, &bs[r], err, sizeof(err)) == 0, "rank %d: %s", r, err);
  for (int r = 0; r < n; r++)
    CHECK_MSG(bs[r] && shunt_bootstrap_init_finish(bs[r], err, sizeof(err)) == 0, "rank %d: %s", r, err);
  if (check_failures) return 1;
  int bad = run_threads(use_started, bs, n);
  for (int r = 0; r < n; r++) shunt_bootstrap_destroy(bs[r]);
  return bad;
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s procs|threads|onethread N\n", argv[0]);
    return 2;
  }
  int n = atoi(argv[2]);
  CHECK(n >= 1 && n <= MAX_TEST_RANKS);
  if (!strcmp(argv[1], "procs")) {
    CHECK_EQ_INT(run_procs(one_rank, n, 60), 0);
    CHECK_DONE();
  }
  struct shunt_bootstrap_id id;
  char err[256] = "";
  CHECK_MSG(shunt_bootstrap_root_create_timeout(&id, 60, err, sizeof(err)) == 0, "%s", err);
  CHECK(shunt_bootstrap_id_valid(&id));
  if (check_failures) CHECK_DONE();
  if (!strcmp(argv[1], "threads"))
    CHECK_EQ_INT(run_threads(one_rank, &id, n), 0);
  else if (!strcmp(argv[1], "onethread"))
    CHECK_EQ_INT(one_thread(&id, n), 0);
  else
    CHECK_MSG(0, "unknown mode %s", argv[1]);
  CHECK_DONE();
}
