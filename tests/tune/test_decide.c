/* shunt-tune's decisions on made-up medians: the margin keeps the serving plan while a rival
 * is within it, a plan winning two separate stretches keeps one (the longer) and the next best
 * takes the other, ranges cover every size from 0 to max without overlap, a plan never ahead
 * gets none, and a candidate that could not serve a size is never chosen there. */
#include <stdint.h>
#include <string.h>

#include "common/check.h"
#include "plan/tuning.h"
#include "tune.h"

static struct tune_group g;

static void setup(unsigned ncand, unsigned nsizes) {
  memset(&g, 0, sizeof(g));
  strcpy(g.coll, "allreduce");
  g.nranks = 4;
  g.ncand = ncand;
  g.nsizes = nsizes;
  for (unsigned c = 0; c < ncand; c++) snprintf(g.cand[c], sizeof(g.cand[c]), "plan%u", c);
  for (unsigned s = 0; s < nsizes; s++) g.size[s] = 1024ull << s;
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
  /* 1. A crossover, and a rival within the margin after it does not take over. */
  setup(3, 6);
  double a[3][6] = {{10, 20, 40, 80, 160, 320}, {30, 30, 30, 60, 100, 200}, {50, 50, 50, 59, 97, 198}};
  for (unsigned c = 0; c < 3; c++)
    for (unsigned s = 0; s < 6; s++) g.samp[c][s][0] = a[c][s], g.nsamp[c][s] = 1;
  for (unsigned c = 0; c < 3; c++)
    for (unsigned s = 0; s < 6; s++) g.med[c][s] = -1;
  CHECK(tune_update_medians(&g) == 1.0);
  tune_decide(&g, 0.05);
  int want1[6] = {0, 0, 1, 1, 1, 1}; /* plan2 is at most 3% faster than plan1 from 4: no switch */
  for (unsigned s = 0; s < 6; s++) CHECK_EQ_INT(g.winner[s], want1[s]);
  CHECK(!g.has_range[2]);
  CHECK(g.has_range[0] && g.lo[0] == 0 && g.hi[0] == 2048);
  CHECK(g.has_range[1] && g.lo[1] == 2049 && g.hi[1] == UINT64_MAX);
  check_cover();
  /* Without a margin plan2 takes over where it is faster. */
  tune_decide(&g, 0);
  CHECK_EQ_INT(g.winner[3], 2);
  check_cover();

  /* 2. plan0 wins sizes 0-1 and 4-5 (apart): it keeps 0-1; 4-5 go to the next best. */
  setup(2, 6);
  double b[2][6] = {{1, 1, 9, 9, 1, 1}, {5, 5, 1, 1, 2, 2}};
  for (unsigned c = 0; c < 2; c++)
    for (unsigned s = 0; s < 6; s++) g.med[c][s] = b[c][s];
  tune_decide(&g, 0.05);
  int want2[6] = {0, 0, 1, 1, 1, 1};
  for (unsigned s = 0; s < 6; s++) CHECK_EQ_INT(g.winner[s], want2[s]);
  check_cover();

  /* 3. A candidate with no time at a size (it did not serve it) is not chosen there. */
  setup(2, 3);
  double c3[2][3] = {{1, -1, 1}, {5, 5, 5}};
  for (unsigned c = 0; c < 2; c++)
    for (unsigned s = 0; s < 3; s++) g.med[c][s] = c3[c][s];
  tune_decide(&g, 0.05);
  CHECK_EQ_INT(g.winner[1], 1);
  CHECK_EQ_INT(g.winner[0], 0);
  CHECK_EQ_INT(g.winner[2], 1); /* plan0 again would make two stretches: the longer is kept */
  check_cover();

  /* 4. Medians: the middle of the samples; stable samples move nothing. */
  setup(1, 1);
  g.med[0][0] = -1;
  double v[] = {9, 1, 5, 7, 3};
  for (unsigned i = 0; i < 5; i++) g.samp[0][0][i] = v[i];
  g.nsamp[0][0] = 5;
  tune_update_medians(&g);
  CHECK(g.med[0][0] == 5);
  CHECK(tune_update_medians(&g) == 0);
  g.samp[0][0][5] = 6;
  g.nsamp[0][0] = 6;
  double moved = tune_update_medians(&g);
  CHECK(g.med[0][0] == 5.5 && moved > 0.09 && moved < 0.11);

  char buf[32];
  CHECK(!strcmp(shunt_tuning_format_size(65536, buf, sizeof(buf)), "64K"));
  CHECK(!strcmp(shunt_tuning_format_size(65537, buf, sizeof(buf)), "65537"));
  CHECK(!strcmp(shunt_tuning_format_size(UINT64_MAX, buf, sizeof(buf)), "max"));
  CHECK_DONE();
}
