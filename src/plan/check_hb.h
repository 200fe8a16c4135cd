/* The happens-before graph of a plan's ops (check_hb.c), read by the check of calls back to
 * back (check_step.c). */
#ifndef SHUNT_PLAN_CHECK_HB_H
#define SHUNT_PLAN_CHECK_HB_H

#include "plan/check_internal.h"

/* One op: gpus[r].threadblocks[b].ops[i], or .ops[j] of that pipeline (j >= 0). */
struct hb_node {
  uint32_t r, b, i;
  int32_t j;
  const struct shunt_plan_op* o;
};

/* Nodes: the ops in rank, block, op order; then one entry per rank (nops + r, before every op
 * of the rank); then the barrier hubs. */
struct hb_graph {
  const struct shunt_plan* p;
  struct hb_node* nd;
  uint32_t nops;       /* op nodes; node nops + r is rank r's entry */
  uint32_t* rank_base; /* first op node of each rank, and nops at [ngpus] */
  uint32_t *ef, *et;   /* edges */
  size_t ne, cap;
  uint32_t *off, *adj;   /* CSR */
  uint32_t *roff, *radj; /* the same, edges reversed */
  uint32_t nhubs;        /* barrier hubs, numbered after the entries */
  bool oom, undecided;
};

/* More pairs of entries to compare than this (no real plan comes near) leave the check undecided. */
#define HB_PAIR_BUDGET (1u << 26)

/* A read of chunks [lo, hi) by a node. */
struct hb_reader {
  uint32_t node;
  double lo, hi;
};

/* Builds g (g->p set, the rest zero); false when out of memory. With g->undecided set the plan
 * was too large to compare and nothing beyond the nodes and edges is built. */
bool hb_build(struct hb_graph* g);
void hb_free(struct hb_graph* g);

/* The part [lo, hi) of an entry, in chunks, that an op's thread-block-group slice covers. */
void hb_slice(const struct shunt_plan_op* o, const struct shunt_plan_ref* e, double* lo, double* hi);
/* Whether the entry e, written by rank w, lands in rank q's memory: a peer's buffer, or a
 * multicast group's (every member's buffer of the switch channel's type). */
bool hb_writes_into(const struct shunt_plan* p, uint32_t w, const struct shunt_plan_ref* e, uint32_t q);

#endif
