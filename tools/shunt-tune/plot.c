/* The plot: one panel per group, time (log) against size (log), a line and points per
 * candidate, the winners' points filled, the range boundaries as dashed lines with their
 * sizes, a legend. Drawn into an RGB buffer with the 5x7 font, written by png.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "font.h"
#include "png.h"
#include "plan/tuning.h"
#include "tune.h"

#define PW 640 /* panel */
#define PH 420
#define ML 70 /* margins inside a panel */
#define MR 20
#define MT 34
#define MB 44

struct canvas {
  uint8_t* px;
  int w, h;
};

static const uint8_t palette[][3] = {{31, 119, 180},  {214, 39, 40},   {44, 160, 44},   {255, 127, 14},
                                     {148, 103, 189}, {140, 86, 75},   {227, 119, 194}, {23, 190, 207},
                                     {188, 189, 34},  {127, 127, 127}, {0, 0, 128},     {128, 0, 0},
                                     {0, 100, 0},     {184, 134, 11},  {75, 0, 130},    {0, 0, 0}};

static void put(struct canvas* cv, int x, int y, const uint8_t* c) {
  if (x < 0 || y < 0 || x >= cv->w || y >= cv->h) return;
  memcpy(cv->px + ((size_t)y * cv->w + x) * 3, c, 3);
}

static void rect(struct canvas* cv, int x0, int y0, int x1, int y1, const uint8_t* c) {
  for (int y = y0; y <= y1; y++)
    for (int x = x0; x <= x1; x++) put(cv, x, y, c);
}

/* A line `thick` pixels wide; dash > 0 draws `dash` pixels on, `dash` off. */
static void line(struct canvas* cv, int x0, int y0, int x1, int y1, const uint8_t* c, int thick, int dash) {
  int dx = abs(x1 - x0), dy = -abs(y1 - y0), sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1, e = dx + dy;
  for (int n = 0;; n++) {
    if (!dash || (n / dash) % 2 == 0)
      for (int k = 0; k < thick; k++) put(cv, x0 + (dx < -dy ? k : 0), y0 + (dx < -dy ? 0 : k), c);
    if (x0 == x1 && y0 == y1) break;
    int e2 = 2 * e;
    if (e2 >= dy) e += dy, x0 += sx;
    if (e2 <= dx) e += dx, y0 += sy;
  }
}

static void text(struct canvas* cv, int x, int y, const char* s, const uint8_t* c) {
  for (; *s; s++, x += TUNE_FONT_W + 1)
    for (unsigned gy = 0; gy < TUNE_FONT_H; gy++)
      for (unsigned gx = 0; gx < TUNE_FONT_W; gx++)
        if (tune_font_pixel(*s, gx, gy)) put(cv, x + (int)gx, y + (int)gy, c);
}

static int text_w(const char* s) {
  return (int)strlen(s) * (TUNE_FONT_W + 1);
}

static void panel(struct canvas* cv, int ox, int oy, const struct tune_group* g) {
  static const uint8_t black[3] = {0, 0, 0}, grid[3] = {225, 225, 225}, gray[3] = {110, 110, 110};
  char buf[160], a[32];
  snprintf(buf, sizeof(buf), "%s, %u ranks, %s", g->coll, g->nranks,
           g->inplace ? "in place" : "out of place");
  text(cv, ox + ML, oy + 12, buf, black);
  double tmin = INFINITY, tmax = 0;
  for (unsigned c = 0; c < g->ncand; c++)
    for (unsigned s = 0; s < g->nsizes; s++)
      if (g->med[c][s] > 0) tmin = fmin(tmin, g->med[c][s]), tmax = fmax(tmax, g->med[c][s]);
  if (!(tmax > 0) || g->nsizes == 0) {
    text(cv, ox + ML, oy + PH / 2, "no measurements", gray);
    return;
  }
  double y0 = floor(log10(tmin)), y1 = ceil(log10(tmax));
  if (y1 <= y0) y1 = y0 + 1;
  double x0 = log2((double)g->size[0]), x1 = log2((double)g->size[g->nsizes - 1]);
  if (x1 <= x0) x1 = x0 + 1;
  int L = ox + ML, R = ox + PW - MR, T = oy + MT, B = oy + PH - MB;
#define XP(sz) (L + (int)lround((log2((double)(sz)) - x0) / (x1 - x0) * (R - L)))
#define YP(t) (B - (int)lround((log10(t) - y0) / (y1 - y0) * (B - T)))
  /* Decades of time; powers of four of size. */
  for (double d = y0; d <= y1 + 1e-9; d++) {
    int y = B - (int)lround((d - y0) / (y1 - y0) * (B - T));
    line(cv, L, y, R, y, grid, 1, 0);
    double us = pow(10, d);
    if (us >= 1000)
      snprintf(buf, sizeof(buf), "%gms", us / 1000);
    else
      snprintf(buf, sizeof(buf), "%gus", us);
    text(cv, L - 6 - text_w(buf), y - 3, buf, black);
  }
  for (unsigned s = 0; s < g->nsizes; s++) {
    uint64_t v = g->size[s];
    if ((v & (v - 1)) || (__builtin_ctzll(v) % 2)) continue;
    int x = XP(v);
    line(cv, x, T, x, B, grid, 1, 0);
    shunt_tuning_format_size(v, a, sizeof(a));
    text(cv, x - text_w(a) / 2, B + 6, a, black);
  }
  text(cv, (L + R) / 2 - text_w("message size (bytes)") / 2, B + 22, "message size (bytes)", black);
  line(cv, L, T, L, B, black, 1, 0);
  line(cv, L, B, R, B, black, 1, 0);
  line(cv, R, T, R, B, black, 1, 0);
  line(cv, L, T, R, T, black, 1, 0);
  /* Boundaries between winners, between the two sizes, labelled with the last size served
   * by the one below. */
  for (unsigned s = 1; s < g->nsizes; s++) {
    if (g->winner[s] == g->winner[s - 1] || g->winner[s] < 0 || g->winner[s - 1] < 0) continue;
    int x = (XP(g->size[s - 1]) + XP(g->size[s])) / 2;
    line(cv, x, T, x, B, gray, 1, 4);
    shunt_tuning_format_size(g->size[s - 1], a, sizeof(a));
    text(cv, x + 3, B - 12, a, gray);
  }
  for (unsigned c = 0; c < g->ncand; c++) {
    const uint8_t* col = palette[c % 16];
    int px = -1, py = -1;
    for (unsigned s = 0; s < g->nsizes; s++) {
      if (!(g->med[c][s] > 0)) {
        px = -1;
        continue;
      }
      int x = XP(g->size[s]), y = YP(g->med[c][s]);
      if (px >= 0) line(cv, px, py, x, y, col, 2, 0);
      if (g->winner[s] == (int)c)
        rect(cv, x - 3, y - 3, x + 3, y + 3, col);
      else
        rect(cv, x - 2, y - 2, x + 2, y + 2, col);
      px = x, py = y;
    }
    /* Legend, top left inside the frame. */
    int ly = T + 8 + (int)c * 12;
    rect(cv, L + 8, ly + 1, L + 20, ly + 5, col);
    snprintf(buf, sizeof(buf), "%s%s", g->cand[c], g->has_range[c] ? "" : " (never chosen)");
    text(cv, L + 26, ly, buf, black);
  }
#undef XP
#undef YP
}

int tune_plot(const char* path, const struct tune_group* groups, unsigned n, char* err, size_t len) {
  unsigned cols = n > 1 ? 2 : 1, rows = (n + cols - 1) / cols;
  struct canvas cv = {NULL, (int)(cols * PW), (int)((rows ? rows : 1) * PH)};
  cv.px = malloc((size_t)cv.w * cv.h * 3);
  if (!cv.px) {
    snprintf(err, len, "out of memory for the plot");
    return -1;
  }
  memset(cv.px, 255, (size_t)cv.w * cv.h * 3);
  for (unsigned i = 0; i < n; i++) panel(&cv, (int)(i % cols) * PW, (int)(i / cols) * PH, &groups[i]);
  int rc = tune_png_write(path, cv.px, (uint32_t)cv.w, (uint32_t)cv.h, err, len);
  free(cv.px);
  return rc;
}
