/* In-job tuning (SHUNT_TUNING=auto; docs/tuning.md, "Tuning inside the job"): a communicator
 * measures the plans that can serve each bucket of calls on the job's own calls and keeps the
 * fastest, every rank taking the same plan at the same call.
 *
 * A bucket is (collective, in-place or not, the reduction class the plans must serve, whether
 * the call scales its input, broadcast's root, the power-of-two class of the call's bytes); the
 * communicator's rank count and placement are fixed. Its candidates are every plan selection
 * could pick for the call if its size range held the size (plan/planset.h:
 * shunt_planset_candidates); the untuned choice is the baseline.
 *
 * Promises:
 * - The plan of a call depends only on its bucket and its index among the bucket's calls, both
 *   the same on every rank (ranks make the same calls in the same order), so no two ranks serve
 *   one call with different plans, grouped or not.
 * - The first calls of a bucket serve its candidates in turn (warm-up, then samples). Only calls
 *   outside a group are timed. At the call after the last sample the ranks swap their medians in
 *   one small exchange over the bootstrap (inside that call's job, where every rank runs it),
 *   and every rank computes the same winner from the same numbers: the candidate whose slowest
 *   rank is fastest, kept only when it beats the baseline by more than the margin.
 * - A candidate that failed on any rank is out of the decision on every rank; an exchange that
 *   fails ends tuning on the communicator: the untuned choices serve from then on.
 * - Calls on device memory, calls that name their plan, and calls of a communicator with a
 *   tuning file are not tuned.
 * - Decisions are kept in a cache file named by what makes them valid (plan/tune_cache.h). */
#ifndef SHUNT_API_TUNE_H
#define SHUNT_API_TUNE_H

#include <stdbool.h>
#include <stdint.h>

#include "comm/comm.h"
#include "plan/planset.h"

struct shunt_tune;
struct shunt_tune_bucket;

/* What one call carries from its selection to its run. */
struct shunt_tune_ticket {
  struct shunt_tune_bucket* bucket; /* NULL: the call is not tuned */
  uint32_t index;                   /* the call's index among its bucket's calls */
  uint32_t cand;                    /* the candidate serving it while sampling */
  bool sample;                      /* time the run */
  bool resolve;                     /* at the run: take the bucket's decision (made then, if agree) */
  bool agree;                       /* at the run, first: the ranks' exchange that decides */
};

/* At creation, on every rank: c->tune when SHUNT_TUNING=auto and plans serve c, with what the
 * cache already knows; nothing otherwise. */
void shunt_tune_init(struct shunt_comm* c);
/* At destruction: writes the cache (rank 0, unless aborting) and frees the state. */
void shunt_tune_fini(struct shunt_comm* c, bool abort);

/* At selection of a call on host memory whose untuned plan is `untuned`: the plan to serve it
 * (`untuned` when the call is not tuned), and its ticket. */
const struct shunt_plan_entry* shunt_tune_pick(struct shunt_tune* t, const struct shunt_select_query* q,
                                               const struct shunt_plan_entry* untuned, bool grouped,
                                               struct shunt_tune_ticket* tk);

/* At the run, before launching: the plan that serves the call (resolving a ticket that waits for
 * its bucket's decision; runs the exchange when tk->agree), `planned` otherwise. */
const struct shunt_plan_entry* shunt_tune_resolve(struct shunt_comm* c, const struct shunt_tune_ticket* tk,
                                                  const struct shunt_plan_entry* planned);

/* After the run: its time and whether it succeeded. */
void shunt_tune_record(struct shunt_tune* t, const struct shunt_tune_ticket* tk, double seconds, bool ok);

/* The candidate shunt_tune_pick named cannot take this exact call (its shape does not lower):
 * the untuned plan serves it, and it is no sample. */
void shunt_tune_unfit(struct shunt_tune_ticket* tk);
#endif
