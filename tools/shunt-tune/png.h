/* Writing an RGB image as a PNG file.
 *
 * Promises: tune_png_write writes width x height pixels (3 bytes each, rows top to bottom) to
 * path as an 8-bit RGB PNG, through a temporary file renamed at the end (an interrupted write
 * leaves no partial file). Compressed with zlib when the build has it, else stored. Returns 0,
 * or -1 with the reason in err. */
#ifndef SHUNT_TUNE_PNG_H
#define SHUNT_TUNE_PNG_H

#include <stddef.h>
#include <stdint.h>

int tune_png_write(const char* path, const uint8_t* rgb, uint32_t width, uint32_t height, char* err,
                   size_t len);

#endif
