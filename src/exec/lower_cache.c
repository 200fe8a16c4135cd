/* A bounded cache of lowered programs, shared by the threads of a communicator.
 * Each program sits behind a small header holding an atomic reference count: the cache
 * holds one reference while the entry is cached, every caller of get one more, and the
 * last release frees it, so eviction never frees a program in use. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/lower.h"

struct held {
  atomic_uint refs;
  struct shunt_program* prog;
};

struct key {
  const struct shunt_plan* plan;
  uint64_t hash;
  uint32_t rank;
  struct shunt_call_shape s;
};

struct entry {
  struct key k;
  struct held* h;
  uint64_t used; /* LRU stamp */
};

struct shunt_lower_cache {
  pthread_mutex_t mu;
  uint32_t cap, n;
  uint64_t clock;
  struct entry* e;
};

/* A cached program is copied 16 bytes into its own block, behind a pointer to its record. */
static struct held* held_of(const struct shunt_program* p) {
  return *((struct held* const*)p - 1);
}

static struct shunt_program* wrap(struct shunt_program* p, struct held** out) {
  /* Re-home the program after a back pointer so release can find its record. */
  size_t n = p->total_bytes;
  char* mem = aligned_alloc(16, 16 + ((n + 15) & ~(size_t)15));
  struct held* h = malloc(sizeof(*h));
  if (!mem || !h) {
    free(mem);
    free(h);
    return NULL;
  }
  memcpy(mem + 16, p, n);
  struct shunt_program* q = (struct shunt_program*)(mem + 16);
  *((struct held**)q - 1) = h;
  atomic_init(&h->refs, 1);
  h->prog = q;
  *out = h;
  return q;
}

static void unref(struct held* h) {
  if (atomic_fetch_sub_explicit(&h->refs, 1, memory_order_acq_rel) == 1) {
    free((char*)h->prog - 16);
    free(h);
  }
}

struct shunt_lower_cache* shunt_lower_cache_create(uint32_t capacity) {
  struct shunt_lower_cache* c = calloc(1, sizeof(*c));
  if (!c) return NULL;
  c->cap = capacity ? capacity : 1;
  c->e = calloc(c->cap, sizeof(*c->e));
  if (!c->e) {
    free(c);
    return NULL;
  }
  pthread_mutex_init(&c->mu, NULL);
  return c;
}

void shunt_lower_cache_destroy(struct shunt_lower_cache* c) {
  if (!c) return;
  for (uint32_t i = 0; i < c->n; i++) unref(c->e[i].h);
  pthread_mutex_destroy(&c->mu);
  free(c->e);
  free(c);
}

static bool same(const struct key* a, const struct key* b) {
  return a->plan == b->plan && a->hash == b->hash && a->rank == b->rank &&
         shunt_call_shape_same(&a->s, &b->s);
}

const struct shunt_program* shunt_lower_cache_get(struct shunt_lower_cache* c, const struct shunt_plan* plan,
                                                  uint32_t rank, const struct shunt_call_shape* s,
                                                  char* reason, size_t len) {
  struct key k = {plan, plan->content_hash, rank, *s};
  if (!k.s.pkt) k.s.pkt = SHUNT_PKT_LL16;
  pthread_mutex_lock(&c->mu);
  for (uint32_t i = 0; i < c->n; i++)
    if (same(&c->e[i].k, &k)) {
      c->e[i].used = ++c->clock;
      atomic_fetch_add_explicit(&c->e[i].h->refs, 1, memory_order_relaxed);
      struct shunt_program* p = c->e[i].h->prog;
      pthread_mutex_unlock(&c->mu);
      return p;
    }
  pthread_mutex_unlock(&c->mu);
  /* Lower outside the lock: a duplicate from a racing thread is harmless. */
  struct shunt_program* raw = shunt_lower(plan, rank, &k.s, reason, len);
  if (!raw) return NULL;
  struct held* h = NULL;
  struct shunt_program* p = wrap(raw, &h);
  shunt_program_free(raw);
  if (!p) {
    if (reason && len) snprintf(reason, len, "out of memory");
    return NULL;
  }
  atomic_fetch_add_explicit(&h->refs, 1, memory_order_relaxed); /* the caller's */
  pthread_mutex_lock(&c->mu);
  uint32_t slot = c->n;
  if (c->n == c->cap) {
    slot = 0;
    for (uint32_t i = 1; i < c->n; i++)
      if (c->e[i].used < c->e[slot].used) slot = i;
    unref(c->e[slot].h);
  } else {
    c->n++;
  }
  c->e[slot] = (struct entry){k, h, ++c->clock};
  pthread_mutex_unlock(&c->mu);
  return p;
}

void shunt_lower_cache_release(struct shunt_lower_cache* c, const struct shunt_program* p) {
  (void)c;
  if (p) unref(held_of(p));
}
