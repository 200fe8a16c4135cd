/* The GPU backend's block size for co-residency (exec/gpu/gpu_residency.h), against a model
 * device: 132 SMs holding 2048 threads and 32 blocks each. */
#include <stdio.h>
#include <string.h>

#include "exec/gpu/gpu_residency.h"

static int model(void* ctx, uint32_t threads, uint32_t* blocks) {
  unsigned sms = *(unsigned*)ctx;
  uint32_t per = 2048 / threads;
  if (per > 32) per = 32;
  *blocks = per * sms;
  return 0;
}

static int failing(void* ctx, uint32_t threads, uint32_t* blocks) {
  (void)ctx, (void)threads, (void)blocks;
  return -1;
}

static int fails;
#define EXPECT(cond, ...)           \
  do {                              \
    if (!(cond)) {                  \
      printf("FAIL: " __VA_ARGS__); \
      printf("\n");                 \
      fails++;                      \
    }                               \
  } while (0)

int main(void) {
  unsigned sms = 132;
  char err[256];
  /* One rank, 8 blocks of 1024: fits at once. */
  uint32_t t = shunt_gpu_pick_threads(8, 1, 1024, 0, model, &sms, err, sizeof(err));
  EXPECT(t == 1024, "8 blocks, 1 rank: %u threads (%s)", t, err);
  /* 8 ranks x 32 blocks = 256 blocks: 264 fit at 1024 threads (2 per SM). */
  t = shunt_gpu_pick_threads(32, 8, 1024, 0, model, &sms, err, sizeof(err));
  EXPECT(t == 1024, "32 blocks x 8 ranks: %u (%s)", t, err);
  /* 8 ranks x 40 blocks = 320: needs 512 threads (4 per SM, 528). */
  t = shunt_gpu_pick_threads(40, 8, 1024, 0, model, &sms, err, sizeof(err));
  EXPECT(t == 512, "40 blocks x 8 ranks: %u (%s)", t, err);
  /* A cap from the caller and an odd plan size round to whole warps. */
  t = shunt_gpu_pick_threads(4, 2, 1000, 300, model, &sms, err, sizeof(err));
  EXPECT(t == 288, "cap 300 of 1000: %u", t);
  t = shunt_gpu_pick_threads(4, 2, 20, 0, model, &sms, err, sizeof(err));
  EXPECT(t == 20, "a block of 20: %u", t);
  /* 8 ranks x 600 blocks = 4800 > 32 x 132 = 4224 even at 32 threads: refused, with the figures. */
  t = shunt_gpu_pick_threads(600, 8, 1024, 0, model, &sms, err, sizeof(err));
  EXPECT(t == 0, "600 blocks x 8 ranks fitted at %u threads", t);
  EXPECT(strstr(err, "600 block(s) x 8 rank(s)") && strstr(err, "at most 4224 blocks of 32 threads"),
         "refusal says: %s", err);
  /* A device that cannot be asked: refused, never guessed. */
  t = shunt_gpu_pick_threads(1, 1, 256, 0, failing, NULL, err, sizeof(err));
  EXPECT(t == 0 && strstr(err, "occupancy"), "failing query: %u (%s)", t, err);
  if (!fails) printf("ok: block sizes for co-residency\n");
  return fails != 0;
}
