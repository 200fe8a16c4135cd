/* Ranks that never arrive, a root that is gone, a peer that never sends: every waiting rank
 * fails within the timeout with an error that names who is missing.
 * (CHECK's counter is shared by the threads; see test_bootstrap_ranks.c.) */
#include <stdio.h>

#include "bootstrap/ranks.h"

struct missing {
  struct shunt_bootstrap_id id;
  int absent[2]; /* ranks that never come (-1: none) */
  const char* expect;
};

static int arrive(void* ctx, int rank, int n) {
  const struct missing* m = ctx;
  if (rank == m->absent[0] || rank == m->absent[1]) return 0;
  char err[512] = "";
  struct shunt_bootstrap* b = NULL;
  int before = check_failures;
  CHECK(shunt_bootstrap_init(&m->id, rank, n, &b, err, sizeof(err)) != 0);
  CHECK(b == NULL);
  CHECK_STR_CONTAINS(err, m->expect);
  return check_failures - before;
}

static void missing_ranks(int n, int a, int b, const char* expect) {
  struct missing m = {.absent = {a, b}, .expect = expect};
  char err[256] = "";
  CHECK_MSG(shunt_bootstrap_root_create_timeout(&m.id, 2, err, sizeof(err)) == 0, "%s", err);
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  CHECK_EQ_INT(run_threads(arrive, &m, n), 0);
  double s = seconds_since(&t0);
  CHECK_MSG(s >= 1.5 && s < 10, "the ranks gave up after %.2f s", s);
}

/* The process that made the id exits before anyone arrives. */
static void root_gone(void) {
  int fds[2];
  CHECK(pipe(fds) == 0);
  pid_t pid = fork();
  if (pid == 0) {
    struct shunt_bootstrap_id id;
    char err[256];
    int ok = shunt_bootstrap_root_create_timeout(&id, 60, err, sizeof(err)) == 0;
    _exit(ok && write(fds[1], &id, sizeof(id)) == (ssize_t)sizeof(id) ? 0 : 1);
  }
  struct shunt_bootstrap_id id;
  CHECK(read(fds[0], &id, sizeof(id)) == (ssize_t)sizeof(id));
  waitpid(pid, NULL, 0);
  close(fds[0]);
  close(fds[1]);
  id.timeout_s = 2; /* the id's timeout is what ranks wait for the root */
  char err[512] = "";
  struct shunt_bootstrap* b = NULL;
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  CHECK(shunt_bootstrap_init(&id, 0, 2, &b, err, sizeof(err)) != 0);
  CHECK_STR_CONTAINS(err, "bootstrap root");
  CHECK_MSG(seconds_since(&t0) < 10, "gave up after %.2f s", seconds_since(&t0));
}

/* A peer that is there but never sends: recv names it after the timeout. */
static int silent_peer(void* ctx, int rank, int n) {
  const struct shunt_bootstrap_id* id = ctx;
  char err[512] = "";
  struct shunt_bootstrap* b = NULL;
  int before = check_failures;
  CHECK_MSG(shunt_bootstrap_init(id, rank, n, &b, err, sizeof(err)) == 0, "%s", err);
  if (!b) return 1;
  if (rank == 0) {
    int v;
    CHECK(shunt_bootstrap_recv(b, 1, 5, &v, sizeof(v), err, sizeof(err)) != 0);
    CHECK_STR_CONTAINS(err, "rank 1 sent nothing with tag 5 within 1 s");
  } else {
    usleep(1500000); /* there, connected to the root's table, but silent */
  }
  shunt_bootstrap_destroy(b);
  return check_failures - before;
}

int main(void) {
  root_gone(); /* first: it forks, which is safe only while no root thread runs here */
  missing_ranks(3, 2, -1, "rank 2 of 3 did not arrive within 2 s");
  missing_ranks(8, 2, 5, "ranks 2, 5 of 8 did not arrive within 2 s");
  struct shunt_bootstrap_id id;
  char err[256] = "";
  CHECK_MSG(shunt_bootstrap_root_create_timeout(&id, 1, err, sizeof(err)) == 0, "%s", err);
  CHECK_EQ_INT(run_threads(silent_peer, &id, 2), 0);
  /* An id that is not shunt's is refused at once. */
  struct shunt_bootstrap_id zero;
  memset(&zero, 0, sizeof(zero));
  struct shunt_bootstrap* b = NULL;
  CHECK(!shunt_bootstrap_id_valid(&zero));
  CHECK(shunt_bootstrap_init(&zero, 0, 1, &b, err, sizeof(err)) != 0);
  CHECK_STR_CONTAINS(err, "no shunt rendezvous");
  CHECK_DONE();
}
