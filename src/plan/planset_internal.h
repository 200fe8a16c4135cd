/* The PlanSet's layout, shared by loading (planset.c) and lookup (select.c). */
#ifndef SHUNT_PLAN_PLANSET_INTERNAL_H
#define SHUNT_PLAN_PLANSET_INTERNAL_H

#include "plan/arena.h"
#include "plan/planset.h"

/* What the lookup needs of one usable plan, packed for a linear scan. */
struct sel_entry {
  uint64_t min, max; /* effective range */
  /* The size conditions, folded at load into the call's byte count (total output bytes for
   * allgather): quantum is the size the chunk rule takes a multiple of (alignment x chunk
   * counts, x ranks for allgather's send side); any size runs (exec/split.h) unless it is 0,
   * when no size splits into the chunk counts. bytes <= max_enc: 32-bit device offsets, 16-bit
   * pipeline counters. */
  uint64_t quantum;
  uint64_t max_enc;
  uint32_t rpn;   /* 0: any */
  uint32_t entry; /* index into entries */
  enum shunt_plan_redop redop;
};

/* Plans of one (collective, rank count, in-place) key, in priority order. */
struct bucket {
  uint64_t key; /* bucket_key(coll, nranks, inplace) */
  enum shunt_coll coll;
  uint32_t nranks, inplace;
  uint32_t start, count; /* range of sel */
};

static inline uint32_t slot_of(uint64_t key, uint32_t bits) {
  return (uint32_t)((key * 0x9e3779b97f4a7c15ull) >> (64 - bits));
}

static inline uint64_t bucket_key(enum shunt_coll coll, uint32_t nranks, bool inplace) {
  return ((uint64_t)shunt_coll_code(coll) << 40) | ((uint64_t)nranks << 1) | (inplace ? 1u : 0u);
}

/* A file left unread because its plan is for another rank count (shunt_planset_opts.nranks). */
struct shunt_planset_other {
  const char* name; /* the plan's name ("" when its outline had none) */
  uint32_t ngpus;
};

struct shunt_planset {
  struct shunt_plan_entry* entries;
  uint32_t n;
  struct shunt_planset_other* other;
  uint32_t nother, other_cap;
  uint32_t usable;
  struct sel_entry* sel;
  struct bucket* buckets;
  uint32_t nbuckets;
  /* Open-addressing table: bucket key -> bucket index + 1 (0: empty); a power of two at
   * least twice the bucket count, so a lookup usually probes once. */
  uint32_t* slots;
  uint32_t slot_bits;
  uint64_t hash;
  struct shunt_arena* strings;
};

/* Builds sel and buckets from the OK entries and WARNs about overlaps (select.c). */
bool planset_index(struct shunt_planset* ps);

#endif
