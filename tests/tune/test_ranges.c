/* shunt-tune's ranges from the winners the tuning engine decided, on made-up times: the engine's
 * winner keeps each size; a plan winning two separate stretches keeps one (the longer) and the
 * fastest of the rest takes the other; ranges cover every size from 0 to max without overlap; a
 * plan that never wins gets none; a candidate with no time at a size is never moved there. */
#include <stdint.h>
#include <string.h>

#include "common/check.h"
#include "plan/tuning.h"
#include "tune.h"

static struct tune_group g;

static void setup(unsigned ncand, unsigned nsizes, const double* med, const int* winner) {
  memset(&g, 0, sizeof(g));
  strcpy(g.coll, "allreduce");
  g.nranks = 4;
  g.ncand = ncand;
  g.nsizes = nsizes;
  for (unsigned c = 0; c < ncand; c++) snprintf(g.cand[c], sizeof(g.cand[c]), "plan%u", c);
  for (unsigned s = 0; s < nsizes; s++) {
    g.size[s] = 1024ull << s;
    g.winner[s] = winner[s];
    for (unsigned c = 0; c < ncand; c++) g.med[c][s] = med[c * nsizes + s];
  }
}

static void check_cover(void) {
  /* Every size falls in exactly one range, the range of its winner. */
  for (unsigned s = 0; s < g.nsizes; s++) {
    unsigned in = 0;
    for (unsigned c = 0; c < g.ncand; c++)
      if (g.has_range[c] && g.lo[c] <= g.size[s] && g.size[s] <= g.hi[c]) {
        in++;
        CHECK_EQ_INT(g.winner[s], (int)c);
      }
    CHECK_EQ_INT(in, 1);
  }
  unsigned first = 0, last = 0;
  for (unsigned c = 0; c < g.ncand; c++)
    if (g.has_range[c]) first += g.lo[c] == 0, last += g.hi[c] == UINT64_MAX;
  CHECK_EQ_INT(first, 1);
  CHECK_EQ_INT(last, 1);
}

int main(void) {
  /* 1. The engine's winners stand as they are, even where another time is lower (the engine
   * kept its baseline within the margin); plan2 never won: no range. */
  double a[3 * 6] = {10, 20, 40, 80, 160, 320, 30, 30, 30, 60, 100, 200, 50, 50, 50, 59, 97, 198};
  int w1[6] = {0, 0, 1, 1, 1, 1};
  setup(3, 6, a, w1);
  tune_ranges(&g);
  for (unsigned s = 0; s < 6; s++) CHECK_EQ_INT(g.winner[s], w1[s]);
  CHECK(!g.has_range[2]);
  CHECK(g.has_range[0] && g.lo[0] == 0 && g.hi[0] == 2048);
  CHECK(g.has_range[1] && g.lo[1] == 2049 && g.hi[1] == UINT64_MAX);
  check_cover();

  /* 2. plan0 won sizes 0-1 and 4-5 (apart): it keeps 0-1; 4-5 go to the fastest of the rest. */
  double b[3 * 6] = {1, 1, 9, 9, 1, 1, 5, 5, 1, 1, 3, 3, 6, 6, 6, 6, 2, 2};
  int w2[6] = {0, 0, 1, 1, 0, 0};
  setup(3, 6, b, w2);
  tune_ranges(&g);
  int want2[6] = {0, 0, 1, 1, 2, 2};
  for (unsigned s = 0; s < 6; s++) CHECK_EQ_INT(g.winner[s], want2[s]);
  check_cover();

  /* 3. A candidate with no time at a size is not moved there, and a size the engine left
   * undecided goes to the fastest timed there. */
  double c3[2 * 3] = {1, -1, 1, 5, 5, 5};
  int w3[3] = {0, -1, 0};
  setup(2, 3, c3, w3);
  tune_ranges(&g);
  CHECK_EQ_INT(g.winner[0], 0);
  CHECK_EQ_INT(g.winner[1], 1);
  CHECK_EQ_INT(g.winner[2], 1); /* plan0 again would make two stretches: the longer is kept */
  check_cover();

  char buf[32];
  CHECK(!strcmp(shunt_tuning_format_size(65536, buf, sizeof(buf)), "64K"));
  CHECK(!strcmp(shunt_tuning_format_size(65537, buf, sizeof(buf)), "65537"));
  CHECK(!strcmp(shunt_tuning_format_size(UINT64_MAX, buf, sizeof(buf)), "max"));
  CHECK_DONE();
}
