/* shunt-tune's measurements and decisions, shared by its parts.
 *
 * A group is one collective in one placement (in place or out of place) on one rank count:
 * the plans that can serve it (and NCCL when there is one) are its candidates, each timed at
 * every size. From the medians, each candidate gets at most one size range where it wins
 * (tune_decide), which is what a tuning file can say. */
#ifndef SHUNT_TUNE_TUNE_H
#define SHUNT_TUNE_TUNE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TUNE_MAX_CAND 16
#define TUNE_MAX_SIZES 48
#define TUNE_MAX_REPS 32
#define TUNE_NCCL "nccl" /* the candidate that is NCCL */

struct tune_group {
  char coll[16];
  bool inplace;
  unsigned nranks;
  unsigned ncand;
  char cand[TUNE_MAX_CAND][128]; /* plan names, or TUNE_NCCL */
  unsigned nsizes;
  uint64_t size[TUNE_MAX_SIZES];
  unsigned nsamp[TUNE_MAX_CAND][TUNE_MAX_SIZES];
  double samp[TUNE_MAX_CAND][TUNE_MAX_SIZES][TUNE_MAX_REPS]; /* microseconds per call */
  double med[TUNE_MAX_CAND][TUNE_MAX_SIZES];                 /* median; < 0: never served */
  /* Decided: the candidate serving each size, and each candidate's range (has_range). */
  int winner[TUNE_MAX_SIZES];
  bool has_range[TUNE_MAX_CAND];
  uint64_t lo[TUNE_MAX_CAND], hi[TUNE_MAX_CAND]; /* UINT64_MAX: "max" */
};

/* Medians of the samples so far. Returns the largest relative change of any median against
 * the previous values in g->med (1.0 when one appears or disappears). */
double tune_update_medians(struct tune_group* g);

/* Winners with a margin: the serving candidate changes only for one faster by more than
 * margin (0.05: 5%); then each candidate keeps one range (a second range it would win goes to
 * the next best there). Ranges are contiguous and cover every size: the first from 0, the last
 * to "max". */
void tune_decide(struct tune_group* g, double margin);

/* The plot of every group (time against size per candidate, the boundaries marked) as a PNG. */
int tune_plot(const char* path, const struct tune_group* groups, unsigned ngroups, char* err, size_t len);

#endif
