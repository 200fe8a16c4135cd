/* Medians and winners. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tune.h"

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

double tune_update_medians(struct tune_group* g) {
  double worst = 0;
  for (unsigned c = 0; c < g->ncand; c++)
    for (unsigned s = 0; s < g->nsizes; s++) {
      unsigned n = g->nsamp[c][s];
      double m = -1;
      if (n) {
        double v[TUNE_MAX_REPS];
        memcpy(v, g->samp[c][s], n * sizeof(double));
        qsort(v, n, sizeof(double), cmp_double);
        m = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
      }
      double old = g->med[c][s];
      double d = (old < 0) != (m < 0) ? 1.0 : (m < 0 ? 0 : fabs(m - old) / old);
      if (d > worst) worst = d;
      g->med[c][s] = m;
    }
  return worst;
}

static bool better(const struct tune_group* g, int c, int than, unsigned s, const bool* banned) {
  if (banned[c] || g->med[c][s] < 0) return false;
  return than < 0 || g->med[c][s] < g->med[than][s];
}

/* The best candidate at size s that is not banned there, or -1. */
static int best_at(const struct tune_group* g, unsigned s, const bool (*ban)[TUNE_MAX_SIZES]) {
  int best = -1;
  bool banned[TUNE_MAX_CAND];
  for (unsigned c = 0; c < g->ncand; c++) banned[c] = ban[c][s];
  for (unsigned c = 0; c < g->ncand; c++)
    if (better(g, (int)c, best, s, banned)) best = (int)c;
  return best;
}

static void pick(struct tune_group* g, double margin, const bool (*ban)[TUNE_MAX_SIZES]) {
  int cur = -1;
  for (unsigned s = 0; s < g->nsizes; s++) {
    int best = best_at(g, s, ban);
    /* Stay with the serving candidate unless the best beats it by more than the margin. */
    if (cur >= 0 && !ban[cur][s] && g->med[cur][s] >= 0 && best >= 0 &&
        g->med[cur][s] <= g->med[best][s] * (1 + margin))
      best = cur;
    g->winner[s] = best;
    if (best >= 0) cur = best;
  }
}

void tune_decide(struct tune_group* g, double margin) {
  static bool ban[TUNE_MAX_CAND][TUNE_MAX_SIZES];
  memset(ban, 0, sizeof(ban));
  for (unsigned round = 0; round < TUNE_MAX_CAND * TUNE_MAX_SIZES; round++) {
    pick(g, margin, (const bool(*)[TUNE_MAX_SIZES])ban);
    /* A candidate winning two separate runs of sizes keeps its longest; it is banned from the
     * sizes of the others, which go to the next best. */
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
