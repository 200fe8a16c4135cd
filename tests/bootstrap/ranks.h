/* Running the ranks of a bootstrap test as threads of this process or as child processes,
 * and the exchanges every rank goes through once its communicator exists. */
#ifndef SHUNT_TEST_BOOTSTRAP_RANKS_H
#define SHUNT_TEST_BOOTSTRAP_RANKS_H

#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "comm/bootstrap.h"
#include "common/check.h"

#define MAX_TEST_RANKS 64

typedef int (*rank_fn)(void* ctx, int rank, int nranks);

struct rank_thread {
  rank_fn fn;
  void* ctx;
  int rank, nranks, failures;
};

static void* rank_thread_main(void* p) {
  struct rank_thread* t = p;
  t->failures = t->fn(t->ctx, t->rank, t->nranks);
  return NULL;
}

/* Runs fn for ranks 0..n-1 as threads; returns the failures they saw. */
static inline int run_threads(rank_fn fn, void* ctx, int n) {
  struct rank_thread t[MAX_TEST_RANKS];
  pthread_t th[MAX_TEST_RANKS];
  int bad = 0;
  for (int r = 0; r < n; r++) {
    t[r] = (struct rank_thread){fn, ctx, r, n, 0};
    if (pthread_create(&th[r], NULL, rank_thread_main, &t[r]) != 0) return n;
  }
  for (int r = 0; r < n; r++) {
    pthread_join(th[r], NULL);
    bad += t[r].failures;
  }
  return bad;
}

/* Runs fn(&id, rank, n) for ranks 0..n-1 as child processes; returns how many failed. The
 * children are forked before this process makes the root (its thread could hold an allocator
 * lock at fork time, which a sanitizer's allocator does not survive) and get the id through a
 * pipe, as real ranks get it out of band. */
static inline int run_procs(rank_fn fn, int n, int timeout_s) {
  pid_t pids[MAX_TEST_RANKS];
  int pipes[MAX_TEST_RANKS][2];
  for (int r = 0; r < n; r++) {
    if (pipe(pipes[r]) != 0) return n;
    if ((pids[r] = fork()) == 0) {
      struct shunt_bootstrap_id id;
      if (read(pipes[r][0], &id, sizeof(id)) != (ssize_t)sizeof(id)) _exit(1);
      _exit(fn(&id, r, n) ? 1 : 0);
    }
  }
  struct shunt_bootstrap_id id;
  char err[256] = "";
  int made = shunt_bootstrap_root_create_timeout(&id, timeout_s, err, sizeof(err)) == 0;
  CHECK_MSG(made, "%s", err);
  int bad = 0;
  for (int r = 0; r < n; r++) {
    if (!made || write(pipes[r][1], &id, sizeof(id)) != (ssize_t)sizeof(id)) kill(pids[r], SIGKILL);
    close(pipes[r][0]);
    close(pipes[r][1]);
  }
  for (int r = 0; r < n; r++) {
    int st = 0;
    waitpid(pids[r], &st, 0);
    bad += !WIFEXITED(st) || WEXITSTATUS(st) != 0;
  }
  return bad;
}

static inline double seconds_since(const struct timespec* t0) {
  struct timespec t1;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  return (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) / 1e9;
}

/* A byte pattern that differs per (rank, index). */
static inline unsigned char pattern(int rank, size_t i) {
  return (unsigned char)(rank * 31 + i * 7 + (i >> 9));
}

/* Collectives and point-to-point on b, checking every byte; returns the failures seen. */
static inline int exercise_comm(struct shunt_bootstrap* b) {
  int before = check_failures;
  int rank = shunt_bootstrap_rank(b), n = shunt_bootstrap_nranks(b);
  char err[512] = "";
  int64_t* small = calloc((size_t)n, sizeof(int64_t));
  small[rank] = 1000 + rank * 7;
  CHECK_MSG(shunt_bootstrap_allgather(b, small, sizeof(int64_t), err, sizeof(err)) == 0, "%s", err);
  for (int r = 0; r < n; r++) CHECK_EQ_INT(small[r], 1000 + r * 7);
  free(small);

  /* Slots larger than a socket buffer: the ring must not deadlock. */
  const size_t big = 300000;
  unsigned char* all = calloc((size_t)n, big);
  for (size_t i = 0; i < big; i++) all[(size_t)rank * big + i] = pattern(rank, i);
  CHECK_MSG(shunt_bootstrap_allgather(b, all, big, err, sizeof(err)) == 0, "%s", err);
  int wrong = 0;
  for (int r = 0; r < n; r++)
    for (size_t i = 0; i < big; i++) wrong += all[(size_t)r * big + i] != pattern(r, i);
  CHECK_EQ_INT(wrong, 0);

  for (int root = 0; root < n; root++) {
    int v = rank == root ? 42 + root : -1;
    CHECK_MSG(shunt_bootstrap_bcast(b, &v, sizeof(v), root, err, sizeof(err)) == 0, "%s", err);
    CHECK_EQ_INT(v, 42 + root);
  }
  int root = n - 1;
  if (rank != root)
    memset(all, 0, big);
  else
    for (size_t i = 0; i < big; i++) all[i] = pattern(root, i);
  CHECK_MSG(shunt_bootstrap_bcast(b, all, big, root, err, sizeof(err)) == 0, "%s", err);
  wrong = 0;
  for (size_t i = 0; i < big; i++) wrong += all[i] != pattern(root, i);
  CHECK_EQ_INT(wrong, 0);

  for (int i = 0; i < 3; i++) CHECK_MSG(shunt_bootstrap_barrier(b, err, sizeof(err)) == 0, "%s", err);

  /* Ring with tags: two messages to the next rank, received in the other order. */
  int next = (rank + 1) % n, prev = (rank + n - 1) % n;
  int a = rank * 3, c = rank * 5, got = -1;
  CHECK(shunt_bootstrap_send(b, next, 7, &a, sizeof(a), err, sizeof(err)) == 0);
  CHECK(shunt_bootstrap_send(b, next, 3, &c, sizeof(c), err, sizeof(err)) == 0);
  CHECK_MSG(shunt_bootstrap_recv(b, prev, 3, &got, sizeof(got), err, sizeof(err)) == 0, "%s", err);
  CHECK_EQ_INT(got, prev * 5);
  CHECK_MSG(shunt_bootstrap_recv(b, prev, 7, &got, sizeof(got), err, sizeof(err)) == 0, "%s", err);
  CHECK_EQ_INT(got, prev * 3);
  /* Everyone sends a large message before anyone receives. */
  for (size_t i = 0; i < big; i++) all[i] = pattern(rank + 100, i);
  CHECK_MSG(shunt_bootstrap_send(b, next, 11, all, big, err, sizeof(err)) == 0, "%s", err);
  CHECK_MSG(shunt_bootstrap_recv(b, prev, 11, all, big, err, sizeof(err)) == 0, "%s", err);
  wrong = 0;
  for (size_t i = 0; i < big; i++) wrong += all[i] != pattern(prev + 100, i);
  CHECK_EQ_INT(wrong, 0);
  /* A size the receiver does not expect is refused and consumed, not misread. */
  short s = 1;
  CHECK(shunt_bootstrap_send(b, next, 9, &s, sizeof(s), err, sizeof(err)) == 0);
  CHECK(shunt_bootstrap_recv(b, prev, 9, &got, sizeof(got), err, sizeof(err)) != 0);
  CHECK_STR_CONTAINS(err, "where 4 were expected");
  /* To itself. */
  CHECK(shunt_bootstrap_send(b, rank, 1, &a, sizeof(a), err, sizeof(err)) == 0);
  CHECK(shunt_bootstrap_recv(b, rank, 1, &got, sizeof(got), err, sizeof(err)) == 0);
  CHECK_EQ_INT(got, rank * 3);
  CHECK_MSG(shunt_bootstrap_barrier(b, err, sizeof(err)) == 0, "%s", err);
  free(all);
  return check_failures - before;
}

/* Splits b into halves by parity (key reverses the order; with 3+ ranks the last opts out
 * with NOCOLOR), runs the exchanges on each child, then splits with NOCOLOR everywhere. */
static inline int exercise_split(struct shunt_bootstrap* b) {
  int before = check_failures;
  int rank = shunt_bootstrap_rank(b), n = shunt_bootstrap_nranks(b);
  char err[512] = "";
  int color = (n > 2 && rank == n - 1) ? SHUNT_SPLIT_NOCOLOR : rank % 2;
  struct shunt_bootstrap* child = NULL;
  CHECK_MSG(shunt_bootstrap_split(b, color, n - rank, &child, err, sizeof(err)) == 0, "%s", err);
  if (color < 0) {
    CHECK(child == NULL);
  } else if (child) {
    int members = 0, below = 0;
    for (int r = 0; r < n; r++) {
      int cr = (n > 2 && r == n - 1) ? -1 : r % 2;
      members += cr == color;
      below += cr == color && r > rank;
    }
    CHECK_EQ_INT(shunt_bootstrap_nranks(child), members);
    CHECK_EQ_INT(shunt_bootstrap_rank(child), below);
    int* v = calloc((size_t)members, sizeof(int));
    v[below] = rank;
    CHECK_MSG(shunt_bootstrap_allgather(child, v, sizeof(int), err, sizeof(err)) == 0, "%s", err);
    for (int i = 0; i < members; i++) CHECK_EQ_INT(v[i] % 2, color);
    free(v);
    exercise_comm(child);
    shunt_bootstrap_destroy(child);
  } else {
    CHECK_MSG(child != NULL, "rank %d: no child of color %d", rank, color);
  }
  /* The parent still works after the split, and NOCOLOR everywhere makes no child. */
  CHECK_MSG(shunt_bootstrap_barrier(b, err, sizeof(err)) == 0, "%s", err);
  child = (struct shunt_bootstrap*)1;
  CHECK_MSG(shunt_bootstrap_split(b, SHUNT_SPLIT_NOCOLOR, 0, &child, err, sizeof(err)) == 0, "%s", err);
  CHECK(child == NULL);
  return check_failures - before;
}

#endif
