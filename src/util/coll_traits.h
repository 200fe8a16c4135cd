/* What tells one collective from another below the NCCL API: one row of traits per collective
 * (struct shunt_coll_traits), and the rules every layer derives from a row.
 *
 * Promises:
 * - This module is the only place below the API that names a collective to decide anything:
 *   selection, splitting, lowering, the plan checks, the executors, the GPU self-check and the
 *   tools ask a row (its fields, or a function here over them) what a call of that collective
 *   looks like, never which collective it is. A new collective is a new row here (and its
 *   enum value and code in util/vocab.h); docs/architecture.md, "Adding a collective", lists
 *   the rest.
 * - shunt_coll_traits answers every enum value, and anything else with the row of
 *   SHUNT_COLL_OTHER (not served, no rule).
 * - Sizes: `count` elements of a call are its per-rank unit; the input holds in_units of them
 *   and the output out_units (each 1 or the rank count, by the row's layout). The size a plan's
 *   range and selection count is the larger buffer (shunt_coll_size).
 * - In place: NCCL's rule (shunt_coll_inplace); the holder is the buffer that holds the other
 *   as a view (the output, or the input where the output lies in it), at the rank's slice where
 *   the holder is cut in rank slices and the view is not (shunt_coll_view_at).
 * - A rooted collective takes a root; a plan written for one root serves every root with its
 *   ranks renamed (plan/rotate.h), and serves both in-place modes, since only the root's
 *   buffers can make a call in place (shunt_coll_root_bind: what the other ranks bind). A
 *   root whose buffers partly overlap has its input moved into its output and runs in place
 *   (shunt_coll_root_overlap: exec/backend.c does it for every executor).
 * - Pure functions of their arguments, no state. C11. */
#ifndef SHUNT_UTIL_COLL_TRAITS_H
#define SHUNT_UTIL_COLL_TRAITS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/vocab.h"

/* Which of a call's buffers hold one slice (a unit) per rank. */
enum shunt_coll_layout {
  SHUNT_LAYOUT_FLAT = 0, /* one unit each (allreduce, broadcast, reduce) */
  SHUNT_LAYOUT_GATHER,   /* the output holds a unit per rank (allgather) */
  SHUNT_LAYOUT_SCATTER,  /* the input holds a unit per rank (reducescatter) */
  SHUNT_LAYOUT_BLOCKS    /* both hold a block per rank (alltoall) */
};

/* Which buffer a rooted collective uses on its root only. */
enum shunt_coll_root {
  SHUNT_ROOT_NONE = 0, /* no root */
  SHUNT_ROOT_SENDS,    /* only the root's input is read: the others' input is their output (broadcast) */
  SHUNT_ROOT_RECEIVES  /* only the root has an output: the others' is none (reduce) */
};

/* What a rank's correct output is, for shunt-plan verify and the GPU self-check. */
enum shunt_coll_ref {
  SHUNT_REF_NONE = 0,     /* not served: nothing to compare */
  SHUNT_REF_REDUCED,      /* every element reduced over the ranks (allreduce) */
  SHUNT_REF_GATHERED,     /* slice j is rank j's input (allgather) */
  SHUNT_REF_REDUCED_MINE, /* slice `rank` of the inputs, reduced over the ranks (reducescatter) */
  SHUNT_REF_ROOT_INPUT,   /* the root's input (broadcast) */
  SHUNT_REF_TRANSPOSED,   /* block j is block `rank` of rank j's input (alltoall) */
  SHUNT_REF_REDUCED_ROOT  /* the root's: every element reduced; the others have no output (reduce) */
};

struct shunt_coll_traits {
  enum shunt_coll coll;
  const char* name; /* a plan's `collective` string */
  bool served;      /* plans of it are selected (and checked for calls back to back) */
  bool reduces;     /* takes a reduction op */
  enum shunt_coll_layout layout;
  enum shunt_coll_root root;
  enum shunt_coll_ref ref;
};

/* c's row (SHUNT_COLL_OTHER's for anything that is no collective). */
const struct shunt_coll_traits* shunt_coll_traits(enum shunt_coll c);

/* The collective a plan's `collective` string names, compared literally; SHUNT_COLL_OTHER for any
 * other string. */
enum shunt_coll shunt_coll_by_name(const char* s);

static inline bool shunt_coll_served(enum shunt_coll c) {
  return shunt_coll_traits(c)->served;
}
static inline bool shunt_coll_reduces(enum shunt_coll c) {
  return shunt_coll_traits(c)->reduces;
}
static inline enum shunt_coll_layout shunt_coll_layout(enum shunt_coll c) {
  return shunt_coll_traits(c)->layout;
}
/* A root, a plan renamed for each root, both in-place modes served by one plan. */
static inline bool shunt_coll_rooted(enum shunt_coll c) {
  return shunt_coll_traits(c)->root != SHUNT_ROOT_NONE;
}

/* ---- Sizes ------------------------------------------------------------------------------------ */

/* Units of the per-rank unit the input / output hold: 1, or nranks where it is cut in slices. */
uint64_t shunt_coll_in_units(enum shunt_coll c, uint64_t nranks);
uint64_t shunt_coll_out_units(enum shunt_coll c, uint64_t nranks);
/* Whether the input / output is cut in rank slices. */
bool shunt_coll_in_sliced(enum shunt_coll c);
bool shunt_coll_out_sliced(enum shunt_coll c);
/* The size a plan's range counts and selection looks up (docs/plan-format.md §4.1): the larger
 * buffer (allgather's output, reducescatter's input, the input otherwise). */
uint64_t shunt_coll_size(enum shunt_coll c, uint64_t in_bytes, uint64_t out_bytes);
/* Units of the per-rank unit in that size. */
uint64_t shunt_coll_size_units(enum shunt_coll c, uint64_t nranks);
/* The per-rank unit of a call of in/out bytes: the unsliced side, or one block of both. */
uint64_t shunt_coll_unit(enum shunt_coll c, uint64_t nranks, uint64_t in_bytes, uint64_t out_bytes);
/* Whether in and out bytes are whole units that agree (input = in_units x unit, output =
 * out_units x unit); false with the rule broken in reason (the name is the plan's string). */
bool shunt_coll_sizes_fit(enum shunt_coll c, const char* name, uint64_t nranks, uint64_t in, uint64_t out,
                          char* reason, size_t len);
/* The chunk counts a plan's gpus must have (docs/plan-format.md §4.2): NULL when they fit (or the
 * collective is not served), else the rule they break, as text. */
const char* shunt_coll_chunk_rule(enum shunt_coll c, uint64_t nranks, uint64_t in_chunks,
                                  uint64_t out_chunks);

/* ---- In place --------------------------------------------------------------------------------- */

/* NCCL's rule: whether send and recv make a call in place (rank's slice of unit bytes). */
bool shunt_coll_inplace(enum shunt_coll c, const void* send, const void* recv, uint32_t rank, uint64_t unit);
/* Whether, in place, the output is the view and the input its holder (reducescatter). */
bool shunt_coll_out_in_input(enum shunt_coll c);
/* Where, in place, the view starts inside its holder: rank x unit when the holder is cut in
 * slices and the view is not, else 0. */
uint64_t shunt_coll_view_at(enum shunt_coll c, uint32_t rank, uint64_t unit);
/* Buffers of a rank's run in this mode, NCCL's rule, from a buffer for the input and one for the
 * output: in place, the view inside the holder; out of place, the two as given. */
void shunt_coll_place(enum shunt_coll c, uint32_t rank, uint64_t unit, bool inplace, char* in_buf,
                      char* out_buf, char** in, char** out);

/* ---- Roots ------------------------------------------------------------------------------------ */

/* What rank binds for a call of a rooted collective (nothing changes for the root, nor on a
 * collective without one): where only the root's input is read, the others' input is their
 * output (*send = *recv: in place); where only the root has an output, the others' is NULL
 * (none: exec/backend.h, the plan's output is the staging). *inplace follows. */
void shunt_coll_root_bind(enum shunt_coll c, uint32_t rank, uint32_t root, const void** send, void** recv,
                          bool* inplace);
/* Whether a rank's buffers of in_bytes / out_bytes at in and out partly overlap where the
 * collective lets the root move its input into its output first and run in place (rooted, one
 * unit each side): its peers cannot see the overlap and have chosen the same plan. */
bool shunt_coll_root_overlap(enum shunt_coll c, const void* in, const void* out, uint64_t in_bytes,
                             uint64_t out_bytes);

#endif
