/* Starting ranks. With -np the parent maps the side channel, forks, then makes the id; it
 * starts no device work itself (a CUDA context does not survive fork) and stays alive
 * until every child has finished, since the id may point at a bootstrap root in it. */
#include "launch.h"

#include <errno.h>
#include <nccl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "channel.h"
#include "rank.h"
#include "rendezvous.h"

static int make_id(ncclUniqueId* id) {
  ncclResult_t rc = ncclGetUniqueId(id);
  if (rc != ncclSuccess) {
    fprintf(stderr, "shunt-perf: ncclGetUniqueId: %s (%s)\n", ncclGetErrorString(rc), ncclGetLastError(NULL));
    return -1;
  }
  return 0;
}

/* Waits for every child; once one fails, the others would wait for it forever, so they
 * are stopped. Returns 0 when all exited 0, PERF_EXIT_WRONG when the worst was a wrong
 * result, PERF_EXIT_FAILED otherwise. */
static int wait_children(pid_t* kids, int n) {
  int worst = PERF_EXIT_OK, left = n;
  while (left > 0) {
    int st = 0;
    pid_t pid = waitpid(-1, &st, 0);
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;
    }
    int r = 0;
    while (r < n && kids[r] != pid) r++;
    if (r == n) continue;
    kids[r] = 0;
    left--;
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : PERF_EXIT_FAILED;
    if (WIFSIGNALED(st)) fprintf(stderr, "shunt-perf: rank %d died of signal %d\n", r, WTERMSIG(st));
    if (code == PERF_EXIT_WRONG && worst == PERF_EXIT_OK) worst = PERF_EXIT_WRONG;
    if (code != PERF_EXIT_OK && code != PERF_EXIT_WRONG) {
      if (worst != PERF_EXIT_FAILED) {
        fprintf(stderr, "shunt-perf: rank %d failed; stopping the others\n", r);
        for (int k = 0; k < n; k++)
          if (kids[k] > 0) kill(kids[k], SIGTERM);
      }
      worst = PERF_EXIT_FAILED;
    }
  }
  return worst;
}

struct rank_thread {
  const struct perf_opts* o;
  int first, nranks;
  const ncclUniqueId* id;
  struct perf_chan* ch;
  int code;
};

static void* rank_thread_main(void* arg) {
  struct rank_thread* t = arg;
  t->code = perf_run_thread(t->o, t->first, t->o->ngpus, t->nranks, t->id, t->ch);
  return NULL;
}

/* Runs o->nthreads threads of this process from rank `first` on, each driving o->ngpus
 * consecutive ranks; returns the worst exit code. Each thread inits its own communicators,
 * as nccl-tests' -t and -g do. */
static int run_rank_threads(const struct perf_opts* o, int first, int nranks, const ncclUniqueId* id,
                            struct perf_chan* ch) {
  int nt = o->nthreads;
  if (nt == 1) return perf_run_thread(o, first, o->ngpus, nranks, id, ch);
  struct rank_thread* t = calloc((size_t)nt, sizeof(*t));
  pthread_t* th = calloc((size_t)nt, sizeof(*th));
  if (!t || !th) {
    free(t);
    free(th);
    return PERF_EXIT_FAILED;
  }
  int started = 0;
  for (int i = 0; i < nt; i++) {
    t[i] = (struct rank_thread){o, first + i * o->ngpus, nranks, id, ch, PERF_EXIT_FAILED};
    if (pthread_create(&th[i], NULL, rank_thread_main, &t[i]) != 0) {
      fprintf(stderr, "shunt-perf: cannot start the thread of rank %d\n", t[i].first);
      break;
    }
    started++;
  }
  int worst = started == nt ? PERF_EXIT_OK : PERF_EXIT_FAILED;
  for (int i = 0; i < started; i++) {
    pthread_join(th[i], NULL);
    if (t[i].code == PERF_EXIT_FAILED || (t[i].code == PERF_EXIT_WRONG && worst == PERF_EXIT_OK))
      worst = t[i].code;
  }
  free(t);
  free(th);
  return worst;
}

/* The side channel's verdicts, summed up by the process that started the ranks. */
static int report_verdicts(struct perf_chan* ch, int n, int code) {
  int64_t wrong = 0;
  int finished = 0;
  for (int r = 0; r < n; r++) {
    const struct perf_verdict* v = perf_chan_verdict(ch, r);
    finished += v->finished && !v->failed;
    if (v->wrong > wrong) wrong = v->wrong;
  }
  if (wrong > 0 && code == PERF_EXIT_OK) code = PERF_EXIT_WRONG;
  if (finished < n && code == PERF_EXIT_OK) code = PERF_EXIT_FAILED;
  printf("# Ranks finished: %d of %d, max #wrong over ranks: %lld: %s\n", finished, n, (long long)wrong,
         code == PERF_EXIT_OK ? "OK" : "FAILED");
  return code;
}

int perf_launch_procs(const struct perf_opts* o) {
  int np = o->nprocs, per_proc = o->nthreads * o->ngpus, n = np * per_proc;
  struct perf_chan* ch = perf_chan_shm(n, np * o->nthreads);
  pid_t* kids = calloc((size_t)n, sizeof(*kids));
  int(*pipes)[2] = calloc((size_t)np, sizeof(*pipes));
  if (!ch || !kids || !pipes) {
    fprintf(stderr, "shunt-perf: cannot set up %d ranks\n", n);
    perf_chan_close(ch);
    free(kids);
    free(pipes);
    return PERF_EXIT_FAILED;
  }
  perf_print_preamble(o, n);
  fflush(NULL); /* children must not inherit buffered output and print it again */
  /* Ranks are forked before the id exists: making it starts bootstrap threads, and a child
   * forked while they run could inherit a lock one of them holds. The id follows by pipe. */
  int started = 0;
  pid_t parent = getpid();
  for (int r = 0; r < np; r++) {
    if (pipe(pipes[r]) != 0 || (kids[r] = fork()) < 0) {
      perror("shunt-perf: starting a rank");
      break;
    }
    if (kids[r] == 0) {
      /* A launcher killed (a tool driving it interrupted) takes its ranks with it, rather than
       * leaving them to run the whole benchmark on cores others are measuring on. */
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (getppid() != parent) _exit(PERF_EXIT_FAILED);
      ncclUniqueId id;
      int code = PERF_EXIT_FAILED;
      if (read(pipes[r][0], &id, sizeof(id)) == (ssize_t)sizeof(id))
        code = run_rank_threads(o, r * per_proc, n, &id, ch);
      fflush(NULL);
      _exit(code); /* the parent's exit handlers are the parent's to run */
    }
    close(pipes[r][0]);
    started++;
  }
  ncclUniqueId id;
  int ok = started == np && make_id(&id) == 0;
  for (int r = 0; r < started; r++) {
    if (ok && write(pipes[r][1], &id, sizeof(id)) != (ssize_t)sizeof(id)) ok = 0;
    close(pipes[r][1]); /* a rank that reads nothing gives up */
  }
  free(pipes);
  if (!ok) {
    wait_children(kids, started);
    perf_chan_close(ch);
    free(kids);
    return PERF_EXIT_FAILED;
  }
  /* the verdict comes from the side channel, not from anything the library reported */
  int code = report_verdicts(ch, n, wait_children(kids, np));
  perf_chan_close(ch);
  free(kids);
  return code;
}

int perf_launch_single(const struct perf_opts* o) {
  static ncclUniqueId id;
  int n = o->nthreads * o->ngpus;
  struct perf_chan* ch = n > 1 ? perf_chan_shm(n, o->nthreads) : NULL;
  if ((n > 1 && !ch) || make_id(&id) != 0) {
    perf_chan_close(ch);
    return PERF_EXIT_FAILED;
  }
  perf_print_preamble(o, n);
  if (n == 1) return perf_run_thread(o, 0, 1, 1, &id, NULL);
  int code = report_verdicts(ch, n, run_rank_threads(o, 0, n, &id, ch));
  perf_chan_close(ch);
  return code;
}

int perf_env_requested(void) {
  return getenv("SHUNT_PERF_RANK") || getenv("SHUNT_PERF_NRANKS") || getenv("SHUNT_PERF_ID") ||
         getenv("SHUNT_PERF_ROOT");
}

/* How long the ranks of a joined run wait for each other: the bootstrap's own timeout. */
static int join_timeout_s(void) {
  const char* s = getenv("SHUNT_BOOTSTRAP_TIMEOUT");
  int t = s ? atoi(s) : 0;
  return t > 0 ? t : 300;
}

static int parse_hex_id(const char* s, ncclUniqueId* id) {
  if (!s || strlen(s) != 2 * NCCL_UNIQUE_ID_BYTES) return -1;
  for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++) {
    unsigned v;
    if (sscanf(s + 2 * i, "%2x", &v) != 1) return -1;
    id->internal[i] = (char)v;
  }
  return 0;
}

int perf_launch_env(const struct perf_opts* o) {
  const char *rs = getenv("SHUNT_PERF_RANK"), *ns = getenv("SHUNT_PERF_NRANKS");
  const char *hex = getenv("SHUNT_PERF_ID"), *root = getenv("SHUNT_PERF_ROOT");
  int rank = rs ? atoi(rs) : -1, n = ns ? atoi(ns) : 0;
  static ncclUniqueId id; /* rank 0 serves it from a thread for as long as the run lasts */
  if (o->nthreads != 1 || o->ngpus != 1) {
    fprintf(stderr, "shunt-perf: ranks joining from the environment are one per process (-t 1 -g 1)\n");
    return PERF_EXIT_FAILED;
  }
  if (n < 1 || rank < 0 || rank >= n || (!hex == !root) || (hex && parse_hex_id(hex, &id) != 0)) {
    fprintf(stderr,
            "shunt-perf: joining a run needs SHUNT_PERF_RANK (0..NRANKS-1), SHUNT_PERF_NRANKS and either "
            "SHUNT_PERF_ROOT (host:port where rank 0 hands out the id) or SHUNT_PERF_ID (%d hex digits from "
            "shunt-perf --make-id)\n",
            2 * NCCL_UNIQUE_ID_BYTES);
    return PERF_EXIT_FAILED;
  }
  if (root) {
    int rc = rank == 0 ? (make_id(&id) == 0 ? perf_rdv_serve(root, n, &id, join_timeout_s()) : -1)
                       : perf_rdv_fetch(root, rank, n, &id, join_timeout_s());
    if (rc != 0) return PERF_EXIT_FAILED;
  }
  if (rank == 0) perf_print_preamble(o, n);
  return perf_run_thread(o, rank, 1, n, &id, NULL);
}

/* Prints the id and stays alive: the id may name a bootstrap root living in this process. */
int perf_make_id(void) {
  ncclUniqueId id;
  if (make_id(&id) != 0) return PERF_EXIT_FAILED;
  for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++) printf("%02x", (unsigned char)id.internal[i]);
  printf("\n");
  fflush(stdout);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  sigprocmask(SIG_BLOCK, &set, NULL);
  int sig = 0;
  sigwait(&set, &sig);
  return PERF_EXIT_OK;
}
