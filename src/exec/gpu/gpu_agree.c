/* The same-host agreement board (gpu_agree.h): one shared-memory segment, a slot per rank and
 * parity of the round. */
#include "exec/gpu/gpu_agree.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "transport/shm.h"
#include "util/env.h"
#include "util/status.h"

struct slot {
  _Atomic uint64_t seq; /* the round whose record this slot holds */
  uint64_t pad[7];
  unsigned char rec[SHUNT_GPU_AGREE_RECORD];
};

struct shunt_gpu_agree {
  struct shunt_shm shm;
  uint32_t rank, nranks;
  int64_t timeout_s;
};

static struct slot* slot_of(struct shunt_gpu_agree* a, uint64_t seq, uint32_t rank) {
  return (struct slot*)a->shm.base + (size_t)(seq & 1) * a->nranks + rank;
}

struct shunt_gpu_agree* shunt_gpu_agree_new(uint32_t rank, uint32_t nranks,
                                            const struct shunt_world_exchange* ex, char* err, size_t len) {
  struct shunt_gpu_agree* a = calloc(1, sizeof(*a));
  char(*names)[SHUNT_SHM_NAME_MAX] = calloc(nranks, SHUNT_SHM_NAME_MAX);
  uint8_t* votes = calloc(nranks ? nranks : 1, 1);
  size_t bytes = sizeof(struct slot) * 2u * nranks;
  if (!a || !names || !votes) {
    /* Without room for the exchange this rank cannot take part (its peers' exchange fails). */
    snprintf(err, len, "out of memory for the agreement board");
    free(a);
    free(names);
    free(votes);
    return NULL;
  }
  bool ok = true;
  /* Rank 0 makes it; every rank takes part in both exchanges whatever failed locally. */
  if (ok && rank == 0) {
    ok = shunt_shm_create(&a->shm, bytes, err, len) == 0;
    if (ok) memcpy(names[0], a->shm.name, SHUNT_SHM_NAME_MAX);
  }
  if (ex->oob.allgather(ex->oob.ctx, names, SHUNT_SHM_NAME_MAX) != 0 && ok) {
    snprintf(err, len, "exchanging the agreement board's name failed");
    ok = false;
  }
  if (ok && rank != 0) ok = shunt_shm_open(&a->shm, names[0], bytes, err, len) == 0;
  char why[256];
  int agreed = shunt_world_agree(&ex->oob, rank, nranks, ok, votes, why, sizeof(why));
  if (ok && agreed != 0) snprintf(err, len, "%s", why);
  if (rank == 0 && a->shm.base) shunt_shm_unlink(a->shm.name);
  free(names);
  free(votes);
  if (agreed != 0) {
    if (a->shm.base) shunt_shm_close(&a->shm);
    free(a);
    return NULL;
  }
  a->rank = rank;
  a->nranks = nranks;
  /* A late peer is waited for as the kernels wait for one: as long as it takes (a checkpoint,
   * data loading), unless SHUNT_GPU_TIMEOUT bounds the waits; abort ends the wait. */
  a->timeout_s = shunt_env_int("SHUNT_GPU_TIMEOUT", 0, 0, INT64_MAX / 1000000000);
  return a;
}

void shunt_gpu_agree_free(struct shunt_gpu_agree* a) {
  if (!a) return;
  shunt_shm_close(&a->shm);
  free(a);
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int shunt_gpu_agree_round(struct shunt_gpu_agree* a, uint64_t seq, const void* mine, size_t bytes, void* all,
                          bool (*stop)(void*), void* arg, char* err, size_t len) {
  if (bytes > SHUNT_GPU_AGREE_RECORD) {
    snprintf(err, len, "an agreement record of %zu bytes", bytes);
    return SHUNT_E_INVALID;
  }
  /* My slot of this parity was last written two rounds ago; every rank has read it since (it
   * wrote its record of the round in between only after reading every record of the one before). */
  struct slot* me = slot_of(a, seq, a->rank);
  memcpy(me->rec, mine, bytes);
  atomic_store_explicit(&me->seq, seq, memory_order_release);
  double start = 0;
  for (uint32_t q = 0; q < a->nranks; q++) {
    struct slot* s = slot_of(a, seq, q);
    for (unsigned spins = 0; atomic_load_explicit(&s->seq, memory_order_acquire) != seq; spins++) {
      /* Ranks reach a call within microseconds of each other in steady state; a late one (data
       * loading, a checkpoint) is waited for without burning a core. */
      if (spins < 1024) continue;
      if (spins < 4096) {
        sched_yield();
        continue;
      }
      if (stop && spins % 64 == 0 && stop(arg)) {
        snprintf(err, len, "gave up waiting for rank %u: the communicator failed", q);
        return SHUNT_E_ABORTED;
      }
      if (start == 0) start = now_s();
      if (a->timeout_s && now_s() - start > (double)a->timeout_s) {
        snprintf(err, len, "rank %u did not reach the call within %lld s", q, (long long)a->timeout_s);
        return SHUNT_E_TIMEOUT;
      }
      nanosleep(&(struct timespec){0, 50000}, NULL);
    }
    memcpy((char*)all + (size_t)q * bytes, s->rec, bytes);
  }
  return 0;
}
