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
 * - Candidates are the plans whose range ends at most SHUNT_TUNING_REACH size classes below the
 *   call's, a plan ranged above it always (the untuned plan always). The first calls of a
 *   bucket screen them, each candidate's calls in a row (its warm-up calls, then one more), the
 *   least of each candidate's times on a rank counting; at the next call the ranks swap those
 *   times in one small exchange over the bootstrap (inside that call's job, where every rank
 *   runs it) and keep the candidates within SHUNT_TUNING_CUT of the fastest on the slowest
 *   rank's figure or on the fastest rank's, and the untuned one whenever another screened
 *   faster; those serve the next calls, each SHUNT_TUNING_SAMPLES in a row, and a second
 *   exchange decides: every rank computes the same winner from the same numbers, the candidate
 *   whose slowest rank's median is least, kept only when it beats the untuned plan by more than
 *   the margin and by more than the samples' spread (its samples faster than the untuned
 *   plan's in enough of their pairs; a second round of samples for the two where the margin
 *   holds and the pairs do not). Only calls outside a group are timed.
 * - A candidate that failed on any rank is out of the decision on every rank; an exchange that
 *   fails ends tuning on the communicator: the untuned choices serve from then on.
 * - Device calls are timed by two events on the call's stream, read only once they have
 *   completed (a swap finds a rank whose samples are still running: every rank serves the
 *   untuned choice and tries the swap again at the bucket's next call); NCCL is a candidate,
 *   and the baseline, where a real NCCL runs behind shunt. A call captured into a graph takes
 *   the bucket's decision or the untuned choice and is no sample.
 * - Calls that name their plan, and calls of a communicator with a tuning file, are not tuned.
 * - Decisions are kept in a cache file named by what makes them valid (plan/tune_cache.h). */
#ifndef SHUNT_API_TUNE_H
#define SHUNT_API_TUNE_H

#include <stdbool.h>
#include <stdint.h>

#include "comm/comm.h"
#include "plan/planset.h"

struct shunt_tune;
struct shunt_tune_bucket;
struct CUevent_st;

/* What shunt_tune_pick and shunt_tune_resolve return when NCCL serves the call (a candidate
 * for device calls where a real NCCL runs behind shunt); no plan. */
extern const struct shunt_plan_entry shunt_tune_nccl;

/* What one call carries from its selection to its run. */
struct shunt_tune_ticket {
  struct shunt_tune_bucket* bucket; /* NULL: the call is not tuned */
  uint32_t index;                   /* the call's index among its bucket's calls */
  uint32_t cand;                    /* the candidate serving it; UINT32_MAX: none (a decision) */
  bool sample;                      /* time the run */
  bool resolve;                     /* at the run: the plan follows from the phase the bucket is in */
  bool grouped;                     /* inside ncclGroupStart/End: never timed */
  bool device;                      /* device buffers: timed by events on the call's stream */
  void* stream;                     /* a device sample's stream */
  struct CUevent_st* ev[2];         /* a device sample's events, before and after */
};

/* At creation, on every rank: c->tune when SHUNT_TUNING=auto and plans serve c, with what the
 * cache already knows; nothing otherwise. */
void shunt_tune_init(struct shunt_comm* c);
/* At destruction: writes the cache (rank 0, unless aborting) and frees the state. */
void shunt_tune_fini(struct shunt_comm* c, bool abort);

/* At selection of a call whose untuned choice is `untuned` (NULL: NCCL, for a device call): what
 * serves it (a plan, or &shunt_tune_nccl; `untuned` when the call is not tuned), and its ticket.
 * A device call is tuned only where the driver can time it, and a call being captured into a
 * graph only takes a decision already made. */
const struct shunt_plan_entry* shunt_tune_pick(struct shunt_tune* t, const struct shunt_select_query* q,
                                               const struct shunt_plan_entry* untuned,
                                               const struct shunt_call* call, bool grouped,
                                               struct shunt_tune_ticket* tk);

/* At the run, before launching: the plan that serves the call, `planned` when it is not
 * resolved here. A resolved ticket runs the exchange its index calls for and is filled in (the
 * candidate, whether it is a sample). */
const struct shunt_plan_entry* shunt_tune_resolve(struct shunt_comm* c, struct shunt_tune_ticket* tk,
                                                  const struct shunt_plan_entry* planned);

/* Just before the call is launched or forwarded (after shunt_tune_resolve): a device sample's
 * first event, on `stream`. */
void shunt_tune_start(struct shunt_tune* t, struct shunt_tune_ticket* tk, void* stream);
/* After the run: its time (host calls; a device call's comes from its events, read when they
 * have completed) and whether it succeeded. */
void shunt_tune_record(struct shunt_tune* t, struct shunt_tune_ticket* tk, double seconds, bool ok);

/* The candidate shunt_tune_pick or shunt_tune_resolve named cannot take this exact call (its
 * shape does not lower): the plan lowered before serves it, and it is no sample. */
void shunt_tune_unfit(struct shunt_tune_ticket* tk);
#endif
