/* Fibers (transport/fiber.h), the host backend's threadblocks: resumed in any order each runs
 * exactly its own steps on its own stack, yields come back to the resume that ran it, the
 * caller's floating-point rounding mode holds inside, a set grows and shrinks between runs and
 * runs again, and a fiber that returned is not run again. Built twice: with the switch of the
 * machine (x86-64's own) and with ucontext. */
#include <fenv.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/check.h"
#include "transport/fiber.h"

#define MAXF 40
#define STEPS 5

struct run {
  struct shunt_fibers* s;
  uint32_t n;
  uint32_t step[MAXF]; /* steps each fiber took */
  uint32_t log[MAXF * STEPS * 2];
  uint32_t nlog;
  int rounding[MAXF];
  uint64_t sums[MAXF];
};

/* Deep frames with live data across yields: a shared stack would mix them up. */
static uint64_t deep(struct run* r, uint32_t i, uint32_t depth) {
  volatile char pad[2048];
  memset((char*)pad, (int)(i + depth), sizeof(pad));
  if (depth == 0) {
    shunt_fibers_yield(r->s);
    uint64_t s = 0;
    for (size_t k = 0; k < sizeof(pad); k++) s += (unsigned char)pad[k];
    return s;
  }
  uint64_t below = deep(r, i, depth - 1);
  return below + (unsigned char)pad[7];
}

static void body(void* arg, uint32_t i) {
  struct run* r = arg;
  r->rounding[i] = fegetround();
  for (uint32_t k = 0; k < STEPS; k++) {
    r->log[r->nlog++] = i;
    r->step[i]++;
    r->sums[i] += deep(r, i, 8 + i % 5);
  }
}

static uint64_t want_sum(uint32_t i) {
  uint32_t depth = 8 + i % 5;
  uint64_t s = 2048ull * (uint8_t)i; /* the innermost frame: every byte is i + 0 */
  for (uint32_t d = 1; d <= depth; d++) s += (uint8_t)(i + d);
  return s * STEPS;
}

static void one_run(struct shunt_fibers* s, uint32_t n, int reverse) {
  static struct run r;
  memset(&r, 0, sizeof(r));
  r.s = s;
  r.n = n;
  CHECK_EQ_INT(shunt_fibers_start(s, n, body, &r), 0);
  uint32_t live = n, rounds = 0;
  uint8_t done[MAXF] = {0};
  while (live && rounds < 1000) {
    rounds++;
    for (uint32_t k = 0; k < n; k++) {
      uint32_t i = reverse ? n - 1 - k : k;
      if (done[i]) {
        CHECK(shunt_fibers_resume(s, i)); /* returned: stays returned, runs nothing */
        continue;
      }
      if (shunt_fibers_resume(s, i)) done[i] = 1, live--;
    }
  }
  CHECK_EQ_INT(live, 0);
  CHECK_EQ_INT(rounds, STEPS + 1); /* one yield per step, then the return */
  for (uint32_t i = 0; i < n; i++) {
    CHECK_EQ_INT(r.step[i], STEPS);
    CHECK_MSG(r.sums[i] == want_sum(i), "fiber %u: sum %llu, want %llu", i, (unsigned long long)r.sums[i],
              (unsigned long long)want_sum(i));
    CHECK_EQ_INT(r.rounding[i], FE_DOWNWARD);
  }
  /* Round-robin order: in each round every fiber logs once, in resume order. */
  for (uint32_t k = 0; k < r.nlog; k++) {
    uint32_t pos = k % n;
    CHECK_EQ_INT(r.log[k], reverse ? n - 1 - pos : pos);
  }
}

int main(void) {
  printf("fibers switch with: %s\n", shunt_fibers_kind());
  struct shunt_fibers* s = shunt_fibers_create();
  CHECK(s != NULL);
  fesetround(FE_DOWNWARD);
  one_run(s, 3, 0);
  one_run(s, MAXF, 1); /* grows */
  one_run(s, 1, 0);    /* shrinks, runs again */
  one_run(s, 17, 1);
  fesetround(FE_TONEAREST);
  shunt_fibers_free(s);
  shunt_fibers_free(NULL);
  CHECK_DONE();
}
