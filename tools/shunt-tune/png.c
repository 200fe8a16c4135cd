/* PNG by the specification (RFC 2083): signature, IHDR, one IDAT holding a zlib stream of the
 * filtered rows (filter 0), IEND; each chunk with its CRC-32. */
#include "png.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef SHUNT_TUNE_ZLIB
#include <zlib.h>
#endif

static uint32_t crc_table[256];

static void crc_init(void) {
  for (uint32_t n = 0; n < 256; n++) {
    uint32_t c = n;
    for (int k = 0; k < 8; k++) c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
    crc_table[n] = c;
  }
}

static uint32_t crc_update(uint32_t c, const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; i++) c = crc_table[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c;
}

static void be32(uint8_t* p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

static int chunk(FILE* f, const char* type, const uint8_t* data, uint32_t n) {
  uint8_t head[8], tail[4];
  be32(head, n);
  memcpy(head + 4, type, 4);
  uint32_t c = crc_update(0xffffffffu, head + 4, 4);
  c = crc_update(c, data, n) ^ 0xffffffffu;
  be32(tail, c);
  return fwrite(head, 1, 8, f) == 8 && (n == 0 || fwrite(data, 1, n, f) == n) && fwrite(tail, 1, 4, f) == 4
             ? 0
             : -1;
}

/* The zlib stream of raw: compressed when zlib is there, else stored blocks. */
static uint8_t* deflate_all(const uint8_t* raw, size_t n, size_t* out_n) {
#ifdef SHUNT_TUNE_ZLIB
  uLongf cap = compressBound((uLong)n);
  uint8_t* out = malloc(cap);
  if (!out) return NULL;
  if (compress2(out, &cap, raw, (uLong)n, 9) != Z_OK) {
    free(out);
    return NULL;
  }
  *out_n = cap;
  return out;
#else
  size_t blocks = n / 65535 + 1;
  uint8_t* out = malloc(2 + n + blocks * 5 + 4);
  if (!out) return NULL;
  size_t o = 0;
  out[o++] = 0x78, out[o++] = 0x01;
  uint32_t a = 1, b = 0;
  size_t at = 0;
  do {
    size_t k = n - at > 65535 ? 65535 : n - at;
    out[o++] = at + k == n ? 1 : 0;
    out[o++] = (uint8_t)k, out[o++] = (uint8_t)(k >> 8);
    out[o++] = (uint8_t)~k, out[o++] = (uint8_t)(~k >> 8);
    memcpy(out + o, raw + at, k);
    for (size_t i = 0; i < k; i++) a = (a + raw[at + i]) % 65521, b = (b + a) % 65521;
    o += k, at += k;
  } while (at < n);
  be32(out + o, (b << 16) | a);
  *out_n = o + 4;
  return out;
#endif
}

int tune_png_write(const char* path, const uint8_t* rgb, uint32_t w, uint32_t h, char* err, size_t len) {
  crc_init();
  size_t row = (size_t)w * 3 + 1, n = row * h;
  uint8_t* raw = malloc(n);
  if (!raw) {
    snprintf(err, len, "out of memory");
    return -1;
  }
  for (uint32_t y = 0; y < h; y++) {
    raw[y * row] = 0;
    memcpy(raw + y * row + 1, rgb + (size_t)y * w * 3, (size_t)w * 3);
  }
  size_t zn = 0;
  uint8_t* z = deflate_all(raw, n, &zn);
  free(raw);
  if (!z) {
    snprintf(err, len, "out of memory compressing the image");
    return -1;
  }
  char tmp[4096];
  snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
  FILE* f = fopen(tmp, "wb");
  if (!f) {
    snprintf(err, len, "%s: %s", tmp, strerror(errno));
    free(z);
    return -1;
  }
  static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  uint8_t ihdr[13];
  be32(ihdr, w);
  be32(ihdr + 4, h);
  ihdr[8] = 8, ihdr[9] = 2, ihdr[10] = 0, ihdr[11] = 0, ihdr[12] = 0; /* 8-bit RGB, no interlace */
  int bad = fwrite(sig, 1, 8, f) != 8 || chunk(f, "IHDR", ihdr, 13) || chunk(f, "IDAT", z, (uint32_t)zn) ||
            chunk(f, "IEND", NULL, 0);
  free(z);
  if (fclose(f) != 0) bad = 1;
  if (bad || rename(tmp, path) != 0) {
    snprintf(err, len, "%s: %s", path, strerror(errno ? errno : EIO));
    unlink(tmp);
    return -1;
  }
  return 0;
}
