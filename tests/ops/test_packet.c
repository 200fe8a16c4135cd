/* LL packets of src/exec/ops/packet.h: layout, round trips, flag mismatches, sizes, flags and the
 * double-scratch half. */
#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/check.h"
#include "exec/ops/packet.h"
#include "ops/test_ops.h"

_Static_assert(sizeof(struct shunt_ll16) == 16 && alignof(struct shunt_ll16) == 16,
               "LL16 is 16 bytes, 16-aligned");
_Static_assert(sizeof(struct shunt_ll8) == 8 && alignof(struct shunt_ll8) == 8, "LL8 is 8 bytes, 8-aligned");

/* The packet as docs/plan-format.md §7.1 lays it out, read back as 32-bit words. */
static void words_of(const void* p, uint32_t* w, int n) {
  memcpy(w, p, (size_t)n * 4);
}

static void test_layout(void) {
  struct shunt_ll16 p16;
  shunt_ll16_put(&p16, 0x1122334455667788ull, 0xabcdef01u);
  uint32_t w[4];
  words_of(&p16, w, 4);
  CHECK_EQ_INT(w[0], 0x55667788u); /* data1: first data word */
  CHECK_EQ_INT(w[1], 0xabcdef01u); /* flag1 */
  CHECK_EQ_INT(w[2], 0x11223344u); /* data2 */
  CHECK_EQ_INT(w[3], 0xabcdef01u); /* flag2 */

  struct shunt_ll8 p8;
  shunt_ll8_put(&p8, 0xdeadbeefu, 7);
  words_of(&p8, w, 2);
  CHECK_EQ_INT(w[0], 0xdeadbeefu);
  CHECK_EQ_INT(w[1], 7);

  /* Data bytes land in memory order: bytes 0..3 in data1, 4..7 in data2. */
  unsigned char data[8] = {1, 2, 3, 4, 5, 6, 7, 8}, pk[16];
  struct shunt_ll16 q;
  CHECK_EQ_INT(shunt_pkt_write(SHUNT_LL16_BYTES, &q, data, 8, 3), 0);
  memcpy(pk, &q, 16);
  CHECK(memcmp(pk, data, 4) == 0 && memcmp(pk + 8, data + 4, 4) == 0);
  CHECK(pk[4] == 3 && pk[12] == 3);
}

static void test_single(void) {
  struct shunt_ll16 p;
  uint64_t v = 0;
  memset(&p, 0, sizeof p);
  CHECK_EQ_INT(shunt_ll16_try(&p, 1, &v), 0); /* zeroed memory holds no valid packet */
  shunt_ll16_put(&p, 42, 9);
  CHECK_EQ_INT(shunt_ll16_try(&p, 8, &v), 0);
  CHECK_EQ_INT(shunt_ll16_try(&p, 9, &v), 1);
  CHECK_EQ_INT(v, 42);
  /* Half-written packet: only one flag current. */
  uint32_t w[4];
  words_of(&p, w, 4);
  w[3] = 8;
  memcpy(&p, w, 16);
  CHECK_EQ_INT(shunt_ll16_try(&p, 9, &v), 0);
  CHECK_EQ_INT(shunt_ll16_wait(&p, 9, 100, &v), 0);
  CHECK_EQ_INT(shunt_ll16_wait(&p, 9, 0, &v), 0); /* looks once even with no budget */
  w[1] = 8;
  memcpy(&p, w, 16);
  CHECK_EQ_INT(shunt_ll16_wait(&p, 8, 1, &v), 1);

  struct shunt_ll8 q;
  uint32_t u = 0;
  memset(&q, 0, sizeof q);
  CHECK_EQ_INT(shunt_ll8_try(&q, 1, &u), 0);
  shunt_ll8_put(&q, 0xffffffffu, 5);
  CHECK_EQ_INT(shunt_ll8_wait(&q, 4, 10, &u), 0);
  CHECK_EQ_INT(shunt_ll8_wait(&q, 5, 10, &u), 1);
  CHECK_EQ_INT(u, 0xffffffffu);
  CHECK(shunt_ll16_complete(shunt_pkt_word(1, 2), shunt_pkt_word(3, 2), 2));
  CHECK(!shunt_ll16_complete(shunt_pkt_word(1, 2), shunt_pkt_word(3, 1), 2));
  CHECK_EQ_INT(shunt_ll16_payload(shunt_pkt_word(1, 2), shunt_pkt_word(3, 2)), 0x300000001ll);
}

static void test_ranges(int pkt) {
  enum { N = 1024 };
  unsigned char data[N], back[N];
  for (int i = 0; i < N; i++) data[i] = (unsigned char)(i * 13 + 5);
  void* pkts = aligned_alloc(16, shunt_pkt_bytes(N));
  memset(pkts, 0, shunt_pkt_bytes(N));
  uint64_t stuck = 99;
  CHECK_EQ_INT(shunt_pkt_read(pkt, back, pkts, N, 1, 3, &stuck), 1);
  CHECK_EQ_INT(stuck, 0);
  CHECK_EQ_INT(shunt_pkt_write(pkt, pkts, data, N, 0x12345u), 0);
  memset(back, 0, N);
  CHECK_EQ_INT(shunt_pkt_read(pkt, back, pkts, N, 0x12345u, 1, &stuck), 0);
  CHECK(memcmp(back, data, N) == 0);
  CHECK_EQ_INT(shunt_pkt_read(pkt, back, pkts, N, 0x12346u, 1, &stuck), 1); /* wrong flag */
  CHECK_EQ_INT(stuck, 0);
  /* A packet in the middle still carries the previous flag: the read stops there. */
  int pl = shunt_pkt_payload(pkt);
  CHECK_EQ_INT(shunt_pkt_write(pkt, (char*)pkts + 2 * 600, data + 600, (uint64_t)pl, 0x12344u), 0);
  memset(back, 0, N);
  CHECK_EQ_INT(shunt_pkt_read(pkt, back, pkts, N, 0x12345u, 5, &stuck), 1);
  CHECK_EQ_INT(stuck, 600);
  CHECK(memcmp(back, data, 600) == 0);
  CHECK_EQ_INT(shunt_pkt_read(pkt, back, pkts, N, 0x12345u, 5, NULL), 1);
  /* Sizes that are not whole payloads. */
  CHECK_EQ_INT(shunt_pkt_write(pkt, pkts, data, (uint64_t)pl + 2, 1), -1);
  CHECK_EQ_INT(shunt_pkt_read(pkt, back, pkts, (uint64_t)pl / 2, 1, 1, NULL), -1);
  free(pkts);
}

static void test_sizes_and_flags(void) {
  CHECK_EQ_INT(shunt_pkt_payload(SHUNT_LL16_BYTES), 8);
  CHECK_EQ_INT(shunt_pkt_payload(SHUNT_LL8_BYTES), 4);
  CHECK_EQ_INT(shunt_pkt_payload(12), 0);
  CHECK_EQ_INT(shunt_pkt_bytes(4096), 8192);
  CHECK_EQ_INT(shunt_pkt_offset(24), 48);
  CHECK(shunt_pkt_range_ok(SHUNT_LL16_BYTES, 16, 64));
  CHECK(!shunt_pkt_range_ok(SHUNT_LL16_BYTES, 4, 64));
  CHECK(!shunt_pkt_range_ok(SHUNT_LL16_BYTES, 8, 12));
  CHECK(shunt_pkt_range_ok(SHUNT_LL8_BYTES, 4, 12));
  CHECK(!shunt_pkt_range_ok(7, 0, 0));

  /* The first execution's flag is no small integer (a stale data word must not pass for it). */
  CHECK_EQ_INT(shunt_pkt_flag_for_epoch(0), SHUNT_PKT_FLAG_START);
  CHECK(shunt_pkt_flag_for_epoch(0) > 0xffffff);
  CHECK_EQ_INT(shunt_pkt_flag_next(0), 1);
  CHECK_EQ_INT(shunt_pkt_flag_next(1), 2);
  /* The last flag, then the wrap to the first value, one period after epoch 0 comes again. */
  const uint64_t last = 0xfffffffeull - SHUNT_PKT_FLAG_START; /* the epoch of flag 0xfffffffe */
  CHECK_EQ_INT(shunt_pkt_flag_for_epoch(last), 0xfffffffeu);
  CHECK_EQ_INT(shunt_pkt_flag_for_epoch(last + 1), 1);
  CHECK_EQ_INT(shunt_pkt_flag_for_epoch(0xfffffffeull), SHUNT_PKT_FLAG_START);
  CHECK_EQ_INT(shunt_pkt_flag_next(0xfffffffeu), 1);
  CHECK_EQ_INT(shunt_pkt_flag_next(0xffffffffu), 1);
  /* Around the start, the wrap and far beyond: never 0 or ~0, the stepping function agrees with
   * the epoch formula, and consecutive executions use different halves. */
  const uint64_t starts[] = {0, last - 16, 0xfffffffeull + last - 8, 0x123456789abcull};
  for (size_t s = 0; s < sizeof starts / sizeof starts[0]; s++) {
    uint32_t f = shunt_pkt_flag_for_epoch(starts[s]);
    for (uint64_t e = starts[s]; e < starts[s] + 32; e++) {
      uint32_t g = shunt_pkt_flag_for_epoch(e), h = shunt_pkt_flag_for_epoch(e + 1);
      CHECK(g == f);
      CHECK(g != 0 && g != 0xffffffffu);
      CHECK(shunt_pkt_half(g, 1 << 20, 1) != shunt_pkt_half(h, 1 << 20, 1));
      f = shunt_pkt_flag_next(f);
    }
  }
  CHECK_EQ_INT(shunt_pkt_half(1, 1 << 20, 1), 0); /* the first execution uses the lower half */
  CHECK_EQ_INT(shunt_pkt_half(2, 1 << 20, 1), 1 << 19);
  CHECK_EQ_INT(shunt_pkt_half(2, 1 << 20, 0), 0);
}

int test_packet(void) {
  test_layout();
  test_single();
  test_ranges(SHUNT_LL16_BYTES);
  test_ranges(SHUNT_LL8_BYTES);
  test_sizes_and_flags();
  return check_failures;
}
