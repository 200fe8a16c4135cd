/* The salted input of the stand-in's zero-copy tests and the exact sum they check: rank r's
 * element i of call `salt` is (r + 1) x (salt + 2) + i % 17, small integers whose sum over any
 * rank count these tests use is exact in float, and which differ from call to call, so that a
 * call reading a stale or another call's buffer is seen. */
#ifndef SHUNT_TEST_STANDIN_SALTED_H
#define SHUNT_TEST_STANDIN_SALTED_H

#include <stddef.h>

static inline float salted_value(int rank, int salt, size_t i) {
  return (float)((rank + 1) * (salt + 2) + (int)(i % 17));
}

static inline void salted_fill(float* h, size_t n, int rank, int salt) {
  for (size_t i = 0; i < n; i++) h[i] = salted_value(rank, salt, i);
}

/* How many of h[0..n) differ from the sum over nranks ranks of their salted inputs. */
static inline size_t salted_sum_wrong(const float* h, size_t n, int nranks, int salt) {
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) {
    float want = 0;
    for (int r = 0; r < nranks; r++) want += salted_value(r, salt, i);
    bad += h[i] != want;
  }
  return bad;
}

#endif
