/* Peers that are gone, and abort: a rank waiting on a killed peer fails at once; abort returns
 * at once, also while another thread waits in a call, which then fails. */
#include <signal.h>
#include <stdio.h>

#include "bootstrap/ranks.h"

struct waiter {
  struct shunt_bootstrap* b;
  int rc;
  char err[512];
};

static void* wait_for_rank1(void* p) {
  struct waiter* w = p;
  int v;
  w->rc = shunt_bootstrap_recv(w->b, 1, 77, &v, sizeof(v), w->err, sizeof(w->err));
  return NULL;
}

/* Ranks 1 and 2: join, say they are done with the barrier, then wait to be killed. */
static void peer_main(int rank, int from_parent) {
  struct shunt_bootstrap_id id;
  struct shunt_bootstrap* b = NULL;
  char err[512];
  int ready = rank;
  if (read(from_parent, &id, sizeof(id)) != (ssize_t)sizeof(id) ||
      shunt_bootstrap_init(&id, rank, 3, &b, err, sizeof(err)) != 0 ||
      shunt_bootstrap_barrier(b, err, sizeof(err)) ||
      shunt_bootstrap_send(b, 0, 99, &ready, sizeof(ready), err, sizeof(err)) != 0)
    _exit(1);
  pause();
  _exit(0);
}

int main(void) {
  char err[512] = "";
  /* Fork before this process holds a root thread (see run_procs in ranks.h). */
  int pipes[2][2];
  pid_t peers[2];
  for (int r = 1; r <= 2; r++) {
    CHECK(pipe(pipes[r - 1]) == 0);
    if ((peers[r - 1] = fork()) == 0) peer_main(r, pipes[r - 1][0]);
  }
  struct shunt_bootstrap_id id;
  CHECK_MSG(shunt_bootstrap_root_create_timeout(&id, 60, err, sizeof(err)) == 0, "%s", err);
  for (int r = 0; r < 2; r++) {
    CHECK(write(pipes[r][1], &id, sizeof(id)) == (ssize_t)sizeof(id));
    close(pipes[r][0]);
    close(pipes[r][1]);
  }
  struct shunt_bootstrap* b = NULL;
  CHECK_MSG(shunt_bootstrap_init(&id, 0, 3, &b, err, sizeof(err)) == 0, "%s", err);
  CHECK_MSG(b && shunt_bootstrap_barrier(b, err, sizeof(err)) == 0, "%s", err);
  for (int r = 1; r <= 2; r++) {
    int ready = -1;
    CHECK_MSG(b && shunt_bootstrap_recv(b, r, 99, &ready, sizeof(ready), err, sizeof(err)) == 0, "%s", err);
    CHECK_EQ_INT(ready, r);
  }
  /* Both peers are connected to rank 0 and done; now rank 2 dies. */
  kill(peers[1], SIGKILL);
  waitpid(peers[1], NULL, 0);
  if (!b) CHECK_DONE();
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int v = 0;
  CHECK(shunt_bootstrap_recv(b, 2, 1, &v, sizeof(v), err, sizeof(err)) != 0);
  CHECK_STR_CONTAINS(err, "rank 2 closed its connection");
  CHECK_MSG(seconds_since(&t0) < 5, "noticing a dead peer took %.2f s", seconds_since(&t0));

  /* Another thread waits on rank 1, which lives but never sends; abort ends the wait. */
  struct waiter w = {b, 0, ""};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, wait_for_rank1, &w) == 0);
  usleep(200000);
  clock_gettime(CLOCK_MONOTONIC, &t0);
  shunt_bootstrap_abort(b);
  double abort_s = seconds_since(&t0);
  pthread_join(t, NULL);
  double wake_s = seconds_since(&t0);
  CHECK_MSG(abort_s < 0.5, "abort took %.2f s", abort_s);
  CHECK_MSG(wake_s < 2, "the waiting call ended %.2f s after abort", wake_s);
  CHECK(w.rc != 0);
  CHECK_STR_CONTAINS(w.err, "aborted");
  CHECK(shunt_bootstrap_send(b, 1, 1, &v, sizeof(v), err, sizeof(err)) != 0);
  CHECK_STR_CONTAINS(err, "aborted");
  CHECK(shunt_bootstrap_barrier(b, err, sizeof(err)) != 0);
  shunt_bootstrap_abort(b); /* twice is harmless */
  shunt_bootstrap_destroy(b);
  kill(peers[0], SIGKILL);
  waitpid(peers[0], NULL, 0);

  /* Abort of a rank whose init never finished (the other rank never comes). */
  CHECK_MSG(shunt_bootstrap_root_create_timeout(&id, 60, err, sizeof(err)) == 0, "%s", err);
  struct shunt_bootstrap* s = NULL;
  CHECK_MSG(shunt_bootstrap_init_start(&id, 0, 2, &s, err, sizeof(err)) == 0, "%s", err);
  if (s) {
    clock_gettime(CLOCK_MONOTONIC, &t0);
    shunt_bootstrap_abort(s);
    CHECK(shunt_bootstrap_init_finish(s, err, sizeof(err)) != 0);
    CHECK_STR_CONTAINS(err, "aborted");
    CHECK_MSG(seconds_since(&t0) < 1, "finish after abort took %.2f s", seconds_since(&t0));
    shunt_bootstrap_destroy(s);
  }
  CHECK_DONE();
}
