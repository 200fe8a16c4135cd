/* Ranks as processes for the NCCL API tests: the ranks are forked before any id exists (a
 * process that forks while shunt's bootstrap root thread runs could inherit a held allocator
 * lock), the parent then makes `nids` ids and hands them to every rank by pipe, and collects the
 * ranks' exit codes. */
#ifndef SHUNT_TEST_FORK_RANKS_H
#define SHUNT_TEST_FORK_RANKS_H

#include <nccl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define FORK_RANKS_MAX 64
#define FORK_RANKS_MAX_IDS 4

/* run(rank, ids) is the rank's exit code. use_exit: the rank ends with exit() (atexit work, leak
 * checks and coverage run in it) rather than _exit(). Returns 0 when every rank exited 0. */
static inline int fork_ranks(int n, int nids, int use_exit, int (*run)(int rank, const ncclUniqueId* ids)) {
  pid_t pids[FORK_RANKS_MAX];
  int pipes[FORK_RANKS_MAX][2];
  if (n < 1 || n > FORK_RANKS_MAX || nids < 1 || nids > FORK_RANKS_MAX_IDS) return 2;
  for (int r = 0; r < n; r++) {
    if (pipe(pipes[r]) != 0) return 2;
    pids[r] = fork();
    if (pids[r] == 0) {
      ncclUniqueId ids[FORK_RANKS_MAX_IDS];
      for (int k = 0; k < nids; k++)
        if (read(pipes[r][0], &ids[k], sizeof(ids[k])) != (ssize_t)sizeof(ids[k])) _exit(3);
      int code = run(r, ids);
      if (use_exit) exit(code);
      _exit(code);
    }
    close(pipes[r][0]);
  }
  ncclUniqueId ids[FORK_RANKS_MAX_IDS];
  for (int k = 0; k < nids; k++)
    if (ncclGetUniqueId(&ids[k]) != ncclSuccess) {
      fprintf(stderr, "ncclGetUniqueId failed: %s\n", ncclGetLastError(NULL));
      for (int r = 0; r < n; r++) kill(pids[r], SIGKILL);
      return 1;
    }
  for (int r = 0; r < n; r++) {
    if (write(pipes[r][1], ids, sizeof(ids[0]) * (size_t)nids) != (ssize_t)(sizeof(ids[0]) * (size_t)nids))
      fprintf(stderr, "cannot hand rank %d its ids\n", r);
    close(pipes[r][1]);
  }
  int failed = 0;
  for (int r = 0; r < n; r++) {
    int st = 0;
    waitpid(pids[r], &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      fprintf(stderr, "rank %d failed (%s %d)\n", r, WIFEXITED(st) ? "exit" : "signal",
              WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
      failed = 1;
    }
  }
  return failed;
}

#endif
