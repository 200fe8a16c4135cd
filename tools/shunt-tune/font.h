/* The plot's 5x7 pixel font. tune_font_pixel says whether pixel (x, y) of character c is set
 * (x < TUNE_FONT_W, y < TUNE_FONT_H, y down); a character without a glyph draws as '?'. */
#ifndef SHUNT_TUNE_FONT_H
#define SHUNT_TUNE_FONT_H

#include <stdbool.h>

#define TUNE_FONT_W 5
#define TUNE_FONT_H 7

bool tune_font_pixel(char c, unsigned x, unsigned y);

#endif
