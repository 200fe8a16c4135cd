/* shunt-tune's decisions and their times, shared by its parts.
 *
 * A group is one collective in one placement (in place or out of place) on one rank count:
 * the plans that can serve it (and NCCL when there is one) are its candidates. The in-job
 * tuning engine decided each size's winner on the times it measured (api/tune.h); each
 * candidate then gets at most one size range (tune_ranges), which is what a tuning file can
 * say. */
#ifndef SHUNT_TUNE_TUNE_H
#define SHUNT_TUNE_TUNE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TUNE_MAX_CAND 16
#define TUNE_MAX_SIZES 48
#define TUNE_NCCL "nccl" /* the candidate that is NCCL */

struct tune_group {
  char coll[16];
  bool inplace;
  unsigned nranks;
  unsigned ncand;
  char cand[TUNE_MAX_CAND][128]; /* plan names, or TUNE_NCCL */
  unsigned nsizes;
  uint64_t size[TUNE_MAX_SIZES];
  double med[TUNE_MAX_CAND][TUNE_MAX_SIZES]; /* us per call, the engine's time; < 0: none */
  /* Decided: the candidate serving each size, and each candidate's range (has_range). */
  int winner[TUNE_MAX_SIZES];
  bool has_range[TUNE_MAX_CAND];
  uint64_t lo[TUNE_MAX_CAND], hi[TUNE_MAX_CAND]; /* UINT64_MAX: "max" */
};

/* winner[] holds each size's winner as decided (-1: none); each candidate then keeps one range:
 * a candidate winning two separate stretches keeps the longer, and the sizes of the other go to
 * the fastest of the rest there. Ranges are contiguous and cover every size: the first from 0,
 * the last to "max". */
void tune_ranges(struct tune_group* g);

/* The plot of every group (time against size per candidate, the boundaries marked) as a PNG. */
int tune_plot(const char* path, const struct tune_group* groups, unsigned ngroups, char* err, size_t len);

#endif
