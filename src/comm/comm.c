/* shunt_comm_create / shunt_comm_free: topology, plan-set agreement, state. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/redop.h"
#include "comm/bootstrap.h"
#include "comm/comm_create.h"
#include "util/host.h"
#include "util/log.h"
#include "util/status.h"

/* What every rank tells the others at creation. */
struct rank_card {
  uint64_t host_hash; /* identity of the machine: ranks with equal hashes share a node */
  uint64_t plan_hash; /* the plan set it loaded (0: none) */
  int32_t cuda_dev;   /* -1: no CUDA device in use where this rank was made */
  int32_t has_plans;
};

struct shunt_comm* shunt_comm_alloc(int rank, int nranks, ncclComm_t real, int cuda_dev, int blocking) {
  struct shunt_comm* c = calloc(1, sizeof(*c));
  if (!c || !(c->redops = shunt_redop_table_new())) {
    SHUNT_WARN("CommInit: out of memory");
    free(c);
    return NULL;
  }
  pthread_mutex_init(&c->mu, NULL);
  /* Process-wide and atomic: communicators are made from any thread. */
  static atomic_uint_fast64_t next_serial = 1;
  c->serial = atomic_fetch_add(&next_serial, 1);
  c->rank = rank;
  c->nranks = nranks;
  c->real = real;
  c->handle = real ? real : (ncclComm_t)c;
  c->cuda_dev = cuda_dev;
  c->blocking = blocking;
  c->local_size = 1;
  c->nnodes = 1;
  atomic_store(&c->state, SHUNT_COMM_PENDING);
  return c;
}

int shunt_comm_adopt_boot(struct shunt_comm* c, struct shunt_bootstrap* boot) {
  pthread_mutex_lock(&c->mu);
  c->boot = boot;
  int cancelled = atomic_load(&c->cancelled);
  /* Abort only marks and shuts down sockets: safe under the lock, and whoever waits on boot
   * now fails at once. */
  if (cancelled) shunt_bootstrap_abort(boot);
  pthread_mutex_unlock(&c->mu);
  return cancelled ? -1 : 0;
}

int shunt_comm_setup(struct shunt_comm* c, const struct shunt_planset* plans, uint64_t plans_hash,
                     uint32_t plans_usable) {
  struct shunt_bootstrap* boot = c->boot;
  int rank = shunt_bootstrap_rank(boot), nranks = shunt_bootstrap_nranks(boot);
  struct rank_card* cards = calloc((size_t)nranks, sizeof(*cards));
  if (!cards) {
    SHUNT_WARN("CommInit: out of memory");
    return SHUNT_E_NOMEM;
  }
  cards[rank] = (struct rank_card){shunt_host_identity(), plans ? plans_hash : 0, c->cuda_dev, plans != NULL};
  char err[256];
  int rc = shunt_bootstrap_allgather(boot, cards, sizeof(*cards), err, sizeof(err));
  if (rc != SHUNT_OK) {
    SHUNT_WARN("CommInit: rank %d of %d: exchanging rank information failed: %s", rank, nranks, err);
    free(cards);
    return rc;
  }
  c->rank = rank;
  c->nranks = nranks;
  c->plans = plans;
  c->gpu_everywhere = 1;
  for (int r = 0; r < nranks; r++) c->gpu_everywhere &= cards[r].cuda_dev >= 0;

  /* Nodes numbered by first appearance in rank order: the same numbering on every rank. */
  int nodes = 0;
  c->local_rank = c->local_size = 0;
  for (int r = 0; r < nranks; r++) {
    int same = cards[r].host_hash == cards[rank].host_hash, first = 1;
    for (int q = 0; q < r && first; q++) first = cards[q].host_hash != cards[r].host_hash;
    if (first && same) c->node = nodes;
    nodes += first;
    c->local_rank += same && r < rank;
    c->local_size += same;
  }
  c->nnodes = nodes;
  /* Uniform and consecutive placement, decided from the gathered cards alone (not from this
   * rank's own node size, which may differ from another rank's). */
  uint64_t* hosts = malloc((size_t)nranks * sizeof(*hosts));
  if (!hosts) {
    SHUNT_WARN("CommInit: out of memory");
    free(cards);
    return SHUNT_E_NOMEM;
  }
  for (int r = 0; r < nranks; r++) hosts[r] = cards[r].host_hash;
  c->ranks_per_node = shunt_hosts_rpn(hosts, nranks);
  free(hosts);

  /* Every rank must run the same plans, or none: decided from the same gathered data. */
  int agree = 1;
  for (int r = 1; r < nranks; r++)
    agree &= cards[r].plan_hash == cards[0].plan_hash && cards[r].has_plans == cards[0].has_plans;
  c->plans_enabled = plans != NULL && agree && plans_usable > 0;
  if (!agree) {
    int other = 0;
    while (other < nranks && cards[other].plan_hash == cards[rank].plan_hash) other++;
    SHUNT_WARN("CommInit: ranks hold different plan sets (rank %d: %016" PRIx64 ", rank %d: %016" PRIx64
               "); plans are disabled for this communicator on every rank",
               rank, cards[rank].plan_hash, other < nranks ? other : 0,
               cards[other < nranks ? other : 0].plan_hash);
  }
  SHUNT_INFO(SHUNT_INIT,
             "comm rank %d of %d: node %d of %d, local rank %d of %d, %d ranks per node, plans %s%s", rank,
             nranks, c->node, c->nnodes, c->local_rank, c->local_size, c->ranks_per_node,
             c->plans_enabled ? "on" : "off", c->real ? "" : ", no NCCL communicator");
  free(cards);
  return 0;
}

struct shunt_comm* shunt_comm_create(struct shunt_bootstrap* boot, ncclComm_t real, int cuda_dev,
                                     int blocking, const struct shunt_planset* plans, uint64_t plans_hash,
                                     uint32_t plans_usable) {
  struct shunt_comm* c =
      shunt_comm_alloc(shunt_bootstrap_rank(boot), shunt_bootstrap_nranks(boot), real, cuda_dev, blocking);
  if (!c) {
    shunt_bootstrap_destroy(boot);
    return NULL;
  }
  shunt_comm_adopt_boot(c, boot);
  if (shunt_comm_setup(c, plans, plans_hash, plans_usable) != 0) {
    shunt_comm_free(c, 1);
    return NULL;
  }
  atomic_store(&c->state, SHUNT_COMM_READY);
  return c;
}

/* Joins a worker that has finished or is about to (no cancel). */
static void join_job(struct shunt_comm* c) {
  pthread_mutex_lock(&c->mu);
  int live = c->worker_live;
  pthread_t t = c->worker;
  c->worker_live = 0;
  pthread_mutex_unlock(&c->mu);
  if (live) pthread_join(t, NULL);
}

int shunt_comm_start_job(struct shunt_comm* c, void* (*fn)(void*), void* arg) {
  join_job(c);
  pthread_mutex_lock(&c->mu);
  atomic_store(&c->job_running, 1);
  int rc = pthread_create(&c->worker, NULL, fn, arg);
  c->worker_live = rc == 0;
  if (rc != 0) atomic_store(&c->job_running, 0);
  pthread_mutex_unlock(&c->mu);
  if (rc != 0) SHUNT_WARN("comm: cannot start a thread for nonblocking work");
  return rc == 0 ? 0 : -1;
}

void shunt_comm_job_done(struct shunt_comm* c) {
  atomic_store(&c->job_running, 0);
}

int shunt_comm_cancelled(struct shunt_comm* c) {
  return atomic_load(&c->cancelled);
}

void shunt_comm_stop_job(struct shunt_comm* c) {
  pthread_mutex_lock(&c->mu);
  if (c->worker_live && atomic_load(&c->job_running)) {
    atomic_store(&c->cancelled, 1);
    if (c->boot) shunt_bootstrap_abort(c->boot);
  }
  pthread_mutex_unlock(&c->mu);
  join_job(c);
}

void shunt_comm_free(struct shunt_comm* c, int abort) {
  if (!c) return;
  if (c->boot) {
    if (abort) shunt_bootstrap_abort(c->boot);
    shunt_bootstrap_destroy(c->boot);
  }
  shunt_redop_table_free(c->redops);
  pthread_mutex_destroy(&c->mu);
  free(c->gpu_unfit);
  free(c);
}
