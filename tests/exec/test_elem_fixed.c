/* shunt_elem_reduce's per-(type, op) loops (exec/ops/reduce_loop.h) give the same bits as the generic element
 * loop of exec/ops/reduce.h (shunt_reduce_buf), for every type and op, on random bit patterns (NaNs,
 * infinities, denormals, negative zeros and integer extremes included) and on odd lengths. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/check.h"
#include "exec/elem.h"
#include "exec/ops/reduce.h"
#include "exec/ops/reduce_loop.h"

#define N 4099 /* elements: odd, past any vector width */

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

/* Random bits, with every eighth element one of the special patterns of the type's width. */
static void fill(unsigned char* b, size_t es, size_t n) {
  static const uint64_t special[] = {0x0,
                                     0x8000000000000000ull,
                                     0x7ff0000000000000ull,
                                     0x7ff8000000000001ull,
                                     0x7f800000ull,
                                     0xff800001ull,
                                     0x80000000ull,
                                     0x7c00u,
                                     0xfe01u,
                                     0x7fu,
                                     0x80u,
                                     0xffu,
                                     0x1u,
                                     0x7fffffffffffffffull};
  for (size_t i = 0; i < n; i++) {
    uint64_t v = next();
    if (i % 8 == 3) v = special[next() % (sizeof(special) / sizeof(special[0]))];
    memcpy(b + i * es, &v, es);
  }
}

int main(void) {
  static unsigned char a[N * 8], b[N * 8], want[N * 8];
  static const enum shunt_redop kinds[] = {SHUNT_REDOP_SUM, SHUNT_REDOP_PROD, SHUNT_REDOP_MAX, SHUNT_REDOP_MIN};
  unsigned cases = 0;
  for (enum shunt_dtype ty = SHUNT_DT_INT8; ty < SHUNT_DT_COUNT; ty++) {
    size_t es = shunt_dtype_size(ty);
    for (unsigned k = 0; k < 4; k++) {
      for (size_t n = N; n >= N - 2; n--) {
        fill(a, es, n);
        fill(b, es, n);
        struct shunt_red r = {ty, kinds[k], 0};
        CHECK_EQ_INT(shunt_reduce_buf(want, a, b, n * es, &r), 0);
        shunt_elem_reduce(ty, kinds[k], a, b, n);
        size_t bad = 0, first = 0;
        for (size_t i = 0; i < n * es; i += es)
          if (memcmp(a + i, want + i, es)) first = bad++ ? first : i / es;
        CHECK_MSG(bad == 0, "type %s op %s, %zu elements: %zu differ, first at %zu", shunt_dtype_name(ty),
                  shunt_redop_name(kinds[k]), n, bad, first);
        cases++;
      }
    }
  }
  /* The one step-kind mapping: avg, PreMulSum and SUMPOSTDIV reduce as sums; the others are
   * themselves, on the host (shunt_elem_step_op) and in the kernel (shunt_red_step_kind). */
  for (enum shunt_redop op = SHUNT_REDOP_SUM; op <= SHUNT_REDOP_SUMPOSTDIV; op++) {
    enum shunt_redop want_kind = op <= SHUNT_REDOP_MIN ? op : SHUNT_REDOP_SUM;
    CHECK(shunt_red_step_kind(op) == want_kind);
    if (op != SHUNT_REDOP_SUMPOSTDIV) CHECK(shunt_elem_step_op(op) == want_kind);
  }
  /* An avg step on the host is the sum (its scaling is a step of its own). */
  fill(a, 4, 64);
  fill(b, 4, 64);
  struct shunt_red sum = {SHUNT_DT_INT32, SHUNT_REDOP_SUM, 0};
  CHECK_EQ_INT(shunt_reduce_buf(want, a, b, 64 * 4, &sum), 0);
  shunt_elem_reduce(SHUNT_DT_INT32, SHUNT_REDOP_AVG, a, b, 64);
  CHECK(memcmp(a, want, 64 * 4) == 0);
  printf("%u cases compared\n", cases);
  CHECK_DONE();
}
