/* Open-addressing hash table keyed by handle pointer, behind a reader-writer lock:
 * communicators are made and destroyed rarely and looked up on every collective. */
#include "api/handles.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "comm/comm.h"
#include "util/log.h"
#include "util/status.h"

struct slot {
  ncclComm_t key; /* NULL: empty; TOMBSTONE: removed */
  struct shunt_comm* comm;
  int own;
};

#define TOMBSTONE ((ncclComm_t)(uintptr_t)1)

static pthread_rwlock_t lock = PTHREAD_RWLOCK_INITIALIZER;
static struct slot* slots;
static size_t cap, used; /* used counts live entries and tombstones */
atomic_long shunt_own_handle_count;

static size_t hash_ptr(ncclComm_t p) {
  uint64_t x = (uint64_t)(uintptr_t)p;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return (size_t)x;
}

/* Index of h's slot, or of the first free slot where it would go; cap must be > 0. */
static size_t probe(ncclComm_t h, int for_insert) {
  size_t mask = cap - 1, i = hash_ptr(h) & mask, first_free = (size_t)-1;
  for (size_t n = 0; n < cap; n++, i = (i + 1) & mask) {
    if (slots[i].key == h) return i;
    if (slots[i].key == TOMBSTONE && first_free == (size_t)-1) first_free = i;
    if (slots[i].key == NULL) return (for_insert && first_free != (size_t)-1) ? first_free : i;
  }
  return first_free;
}

static int grow(void) {
  size_t ncap = cap ? cap * 2 : 64;
  struct slot* ns = calloc(ncap, sizeof(*ns));
  if (!ns) return SHUNT_E_NOMEM;
  struct slot* old = slots;
  size_t ocap = cap;
  slots = ns;
  cap = ncap;
  used = 0;
  for (size_t i = 0; i < ocap; i++) {
    if (old[i].key && old[i].key != TOMBSTONE) {
      slots[probe(old[i].key, 1)] = old[i];
      used++;
    }
  }
  free(old);
  return 0;
}

int shunt_handles_add(ncclComm_t h, struct shunt_comm* c, int own) {
  int rc = 0;
  pthread_rwlock_wrlock(&lock);
  if ((used + 1) * 2 > cap && grow() != 0) {
    rc = SHUNT_E_NOMEM;
  } else {
    size_t i = probe(h, 1);
    if (slots[i].key != h) used += slots[i].key == NULL;
    if (slots[i].key == h && slots[i].own) atomic_fetch_sub(&shunt_own_handle_count, 1);
    slots[i] = (struct slot){h, c, own};
    if (own) atomic_fetch_add(&shunt_own_handle_count, 1);
  }
  pthread_rwlock_unlock(&lock);
  return rc;
}

struct shunt_comm* shunt_handles_get(ncclComm_t h) {
  struct shunt_comm* c = NULL;
  if (!h) return NULL;
  pthread_rwlock_rdlock(&lock);
  if (cap) {
    size_t i = probe(h, 0);
    if (i != (size_t)-1 && slots[i].key == h) c = slots[i].comm;
  }
  /* Taken under the lock: remove (write lock) cannot slip in between. */
  if (c) atomic_fetch_add(&c->users, 1);
  pthread_rwlock_unlock(&lock);
  return c;
}

ncclResult_t shunt_handles_ready(const char* fn, struct shunt_comm* c) {
  ncclResult_t st = shunt_comm_status(c);
  if (st == ncclInProgress) {
    SHUNT_WARN("%s: Attempt to use communicator before the previous operation returned ncclSuccess", fn);
    return ncclInvalidArgument;
  }
  if (atomic_load(&c->state) == SHUNT_COMM_FAILED) {
    SHUNT_WARN("%s: the communicator's initialisation failed", fn);
    return st;
  }
  if (atomic_load(&c->suspended)) {
    SHUNT_WARN("%s: the communicator is suspended (ncclCommSuspend); call ncclCommResume first", fn);
    return ncclInvalidUsage;
  }
  return ncclSuccess;
}

void shunt_handles_put(struct shunt_comm* c) {
  atomic_fetch_sub(&c->users, 1);
}

void shunt_handles_unused(struct shunt_comm* c) {
  struct timespec ms = {0, 1000000};
  for (long waited = 0; atomic_load(&c->users) > 0; waited++) {
    if (waited == 10000)
      SHUNT_WARN("rank %d: still waiting for a call on this communicator in another thread to return",
                 c->rank);
    nanosleep(&ms, NULL);
  }
}

int shunt_handle_is_own_slow(ncclComm_t h) {
  int own = 0;
  if (!h) return 0;
  pthread_rwlock_rdlock(&lock);
  if (cap) {
    size_t i = probe(h, 0);
    if (i != (size_t)-1 && slots[i].key == h) own = slots[i].own;
  }
  pthread_rwlock_unlock(&lock);
  return own;
}

struct shunt_comm* shunt_handles_remove(ncclComm_t h) {
  struct shunt_comm* c = NULL;
  if (!h) return NULL;
  pthread_rwlock_wrlock(&lock);
  if (cap) {
    size_t i = probe(h, 0);
    if (i != (size_t)-1 && slots[i].key == h) {
      c = slots[i].comm;
      if (slots[i].own) atomic_fetch_sub(&shunt_own_handle_count, 1);
      slots[i] = (struct slot){TOMBSTONE, NULL, 0};
    }
  }
  pthread_rwlock_unlock(&lock);
  return c;
}
