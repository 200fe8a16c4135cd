/* PlanSet: every plan of a folder, parsed and checked once, with effective size ranges, and
 * the lookup that picks a plan for a call.
 *
 * Loading promises:
 * - Only "*.json" files not starting with '.', in byte-wise sorted name order, so every
 *   rank sees the same set in the same order. Each file is read once (later changes on disk
 *   do not matter). A file that fails to parse or check is kept as a REJECTED entry with
 *   its first error as the reason (all its errors go to the error list); the others load.
 * - Duplicates: a plan with the same collective, name, rank count and in-place mode as an
 *   earlier file is rejected.
 * - Broadcast plans serve every root their placement allows (shunt_plan_entry.roots) and both
 *   in-place modes: only the root's buffers say whether a call is in place, and every rank
 *   must choose alike, so selection ignores the mode and the plan must be exact both ways.
 * - A tuning file (opts.tuning_path) overrides ranges or disables plans; each entry keeps
 *   its effective range and where it came from ("plan file" or "FILE:LINE").
 * - Overlapping effective ranges of plans that could serve the same call are reported with a
 *   WARN at load. The rule that resolves them: the plan with the narrowest range
 *   (max - min) wins, then the smaller file name.
 * - shunt_planset_hash is a stable 64-bit hash of file names, contents, status and
 *   effective ranges (FNV-1a over a fixed little-endian serialisation).
 * - With opts.nranks set, a file whose outline (plan/peek.h) shows a plan for another rank
 *   count is left out unparsed and unchecked (counted by shunt_planset_other_ranks; a tuning
 *   rule naming it is not reported as unknown): ranks of one rank count load the same set,
 *   and a process pays for the plans it can use. A file whose outline cannot be read is
 *   parsed as usual, so its error is reported.
 *
 * Selection promises (shunt_planset_select): allocates nothing, takes no lock, reads only
 * the immutable set; safe from any thread. */
#ifndef SHUNT_PLAN_PLANSET_H
#define SHUNT_PLAN_PLANSET_H

#include <stdbool.h>
#include <stdint.h>

#include "plan/error.h"
#include "plan/plan.h"

enum shunt_plan_status { SHUNT_PLAN_OK = 0, SHUNT_PLAN_REJECTED, SHUNT_PLAN_DISABLED };

struct shunt_plan_entry {
  const char* file;        /* base name, e.g. "allreduce_8r_ll.json" */
  const char* path;        /* folder + name */
  struct shunt_plan* plan; /* NULL when the file did not parse */
  enum shunt_plan_status status;
  const char* reason;            /* REJECTED/DISABLED: why; OK: "" */
  uint64_t min_bytes, max_bytes; /* effective inclusive range */
  const char* range_source;      /* "plan file" or "TUNING_FILE:LINE" */
  uint64_t content_hash;         /* FNV-1a of the file's bytes (0 when unreadable) */
  /* Broadcast plans that load: the entry serving each root r < plan->ngpus, the plan's own
   * root by this plan, every other by a copy of this entry whose plan has its ranks renamed
   * (plan/rotate.h), made at load so selection stays lock-free; plan NULL for a root no
   * renaming that keeps the plan's placement reaches. NULL otherwise. */
  const struct shunt_plan_entry* roots;
};

struct shunt_planset_opts {
  const char* tuning_path;   /* NULL: no tuning file */
  uint32_t max_threadblocks; /* backend limit passed to the checks; 0 = none */
  uint32_t nranks;           /* 0: every plan; else only plans for that many ranks */
};

struct shunt_planset;

/* Loads dir. Always sets *out to a usable set (possibly empty) unless memory runs out.
 * Returns 0 when the folder was read (some files may be rejected: see the entries and errs),
 * a SHUNT_E_* code (util/status.h) when the folder is missing or unreadable (one error in errs,
 * empty set) or memory ran out. */
int shunt_planset_load(const char* dir, const struct shunt_planset_opts* opts, struct shunt_planset** out,
                       struct shunt_plan_errors* errs);
void shunt_planset_free(struct shunt_planset* ps);

uint32_t shunt_planset_count(const struct shunt_planset* ps);
const struct shunt_plan_entry* shunt_planset_entry(const struct shunt_planset* ps, uint32_t i);
uint32_t shunt_planset_usable(const struct shunt_planset* ps);      /* entries with status OK */
uint32_t shunt_planset_other_ranks(const struct shunt_planset* ps); /* files left out (opts.nranks) */
uint64_t shunt_planset_hash(const struct shunt_planset* ps);

/* The plan files of dir: "*.json" names not starting with '.', in byte-wise sorted order (the
 * order every loader and every rank uses); the array and each name are malloc'ed for the caller.
 * The code of the failure (util/status.h) when the folder cannot be read (one error in errs). */
int shunt_plan_dir_names(const char* dir, char*** names, uint32_t* n, struct shunt_plan_errors* errs);

/* The folder the library reads: SHUNT_PLAN_DIR, else MSCCLPP_EXECUTION_PLAN_DIR, else NULL. */
const char* shunt_plan_dir_from_env(void);
/* The tuning file: SHUNT_TUNING, else NULL (also for the modes "auto" and "none"). */
const char* shunt_tuning_path_from_env(void);
/* Whether SHUNT_TUNING=auto: communicators tune plans on the job's own calls (api/tune.h). */
bool shunt_tuning_auto_from_env(void);

/* ---- selection ---- */

#define SHUNT_RPN_IRREGULAR UINT32_MAX

/* Whether a plan needing plan_rpn ranks per node (0: any placement) may serve a query of
 * nranks whose ranks per node is query_rpn (shunt_select_query's meaning). */
static inline bool shunt_rpn_matches(uint32_t plan_rpn, uint32_t nranks, uint32_t query_rpn) {
  return !plan_rpn || plan_rpn == (query_rpn ? query_rpn : nranks);
}

struct shunt_select_query {
  enum shunt_coll coll; /* ALLREDUCE, ALLGATHER, REDUCESCATTER, ALLTOALL or BROADCAST (others are never
                           selected) */
  uint32_t nranks;
  /* Ranks per host when every host holds that many consecutive ranks; 0: all on one host;
   * SHUNT_RPN_IRREGULAR: several hosts of other shapes (only plans free of placement match). */
  uint32_t ranks_per_node;
  bool inplace; /* see shunt_select_inplace; ignored for broadcast */
  enum shunt_dtype dtype;
  enum shunt_redop op; /* allreduce and reducescatter only */
  uint64_t bytes;      /* allreduce: count * size; allgather: total output bytes; reducescatter:
                          total input bytes (recvcount * size * ranks); alltoall: the send
                          buffer's bytes (count * size * ranks); broadcast: count * size */
  uint32_t root;       /* broadcast only: the root rank (< nranks) */
  const char* only;    /* NULL: any plan; else only the plan of that name may serve */
};

struct shunt_selection {
  const struct shunt_plan_entry* entry; /* NULL: no plan */
  bool scale;          /* floating AVG / PREMULSUM: each contribution is scaled once, then summed */
  const char* why_not; /* entry == NULL: a static string saying why (one naming a broadcast
                          root is this thread's, valid until its next selection) */
};

/* Picks the plan for a call: collective, rank count, ranks per node (a plan without a
 * constraint matches any), in-place mode (not for broadcast), broadcast's root (the entry
 * returned is then the one serving that root: shunt_plan_entry.roots), dtype/op support, min <= bytes <= max
 * (inclusive), chunk counts that some size splits into (any size then runs: exec/split.h), and the 32-bit
 * offsets of the device encoding. Among matches: a plan made for a placement (ranks per node)
 * before one free of placement, then narrowest range, then file name. With q->only, plans of
 * other names are passed over (one string comparison per candidate). */
struct shunt_selection shunt_planset_select(const struct shunt_planset* ps,
                                            const struct shunt_select_query* q);

/* Every plan that could serve q if its size range held q->bytes (in-job tuning's candidates):
 * the same rules as shunt_planset_select but the range, in selection's priority order, the
 * entry serving q's root for broadcast. Writes up to max entries; returns how many there are. */
uint32_t shunt_planset_candidates(const struct shunt_planset* ps, const struct shunt_select_query* q,
                                  const struct shunt_plan_entry** out, uint32_t max);

/* NCCL's in-place rule (docs/plan-format.md §4.4): allreduce send == recv; allgather
 * send == recv + rank * per-rank bytes; reducescatter recv == send + rank * per-rank bytes;
 * alltoall send == recv. */
bool shunt_select_inplace(enum shunt_coll coll, const void* send, const void* recv, uint32_t rank,
                          uint64_t per_rank_bytes);

#endif
