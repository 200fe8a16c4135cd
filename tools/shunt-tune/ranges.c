/* From the winner of each size to one range per plan. */
#include <string.h>

#include "tune.h"

/* The fastest candidate at size s that is not banned there, or -1. */
static int best_at(const struct tune_group* g, unsigned s, const bool (*ban)[TUNE_MAX_SIZES]) {
  int best = -1;
  for (unsigned c = 0; c < g->ncand; c++)
    if (!ban[c][s] && g->med[c][s] >= 0 && (best < 0 || g->med[c][s] < g->med[best][s])) best = (int)c;
  return best;
}

void tune_ranges(struct tune_group* g) {
  static bool ban[TUNE_MAX_CAND][TUNE_MAX_SIZES];
  int decided[TUNE_MAX_SIZES];
  memcpy(decided, g->winner, sizeof(decided));
  memset(ban, 0, sizeof(ban));
  for (unsigned round = 0; round < TUNE_MAX_CAND * TUNE_MAX_SIZES; round++) {
    for (unsigned s = 0; s < g->nsizes; s++) {
      int w = decided[s];
      g->winner[s] = w >= 0 && !ban[w][s] ? w : best_at(g, s, (const bool(*)[TUNE_MAX_SIZES])ban);
    }
    /* A candidate winning two separate runs of sizes keeps its longest; it is banned from the
     * sizes of the others, which go to the fastest of the rest there. */
    bool changed = false;
    for (unsigned c = 0; c < g->ncand && !changed; c++) {
      unsigned best_start = 0, best_len = 0, runs = 0;
      for (unsigned s = 0; s < g->nsizes;) {
        if (g->winner[s] != (int)c) {
          s++;
          continue;
        }
        unsigned e = s;
        while (e < g->nsizes && g->winner[e] == (int)c) e++;
        runs++;
        if (e - s > best_len) best_start = s, best_len = e - s;
        s = e;
      }
      if (runs < 2) continue;
      for (unsigned s = 0; s < g->nsizes; s++)
        if (g->winner[s] == (int)c && (s < best_start || s >= best_start + best_len)) ban[c][s] = true;
      changed = true;
    }
    if (!changed) break;
  }
  memset(g->has_range, 0, sizeof(g->has_range));
  int prev = -1;
  for (unsigned s = 0; s < g->nsizes; s++) {
    int c = g->winner[s];
    if (c < 0) continue;
    if (c != prev) {
      g->has_range[c] = true;
      g->lo[c] = prev < 0 ? 0 : g->hi[prev] + 1;
    }
    g->hi[c] = g->size[s];
    prev = c;
  }
  if (prev >= 0) g->hi[prev] = UINT64_MAX;
}
