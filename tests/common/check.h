/* Minimal assertions for the plain C test programs: a failed CHECK prints where and why,
 * counts the failure, and the program's exit status reports whether any failed. */
#ifndef SHUNT_TEST_CHECK_H
#define SHUNT_TEST_CHECK_H

#include <stdio.h>
#include <string.h>

static int check_failures;

#define CHECK(cond)                                                              \
  do {                                                                           \
    if (!(cond)) {                                                               \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);   \
      check_failures++;                                                          \
    }                                                                            \
  } while (0)

#define CHECK_MSG(cond, ...)                                                     \
  do {                                                                           \
    if (!(cond)) {                                                               \
      fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);    \
      fprintf(stderr, __VA_ARGS__);                                              \
      fputc('\n', stderr);                                                       \
      check_failures++;                                                          \
    }                                                                            \
  } while (0)

#define CHECK_EQ_INT(a, b)                                                                     \
  do {                                                                                         \
    long long check_a_ = (long long)(a), check_b_ = (long long)(b);                            \
    if (check_a_ != check_b_) {                                                                \
      fprintf(stderr, "%s:%d: CHECK failed: %s == %s (%lld vs %lld)\n", __FILE__, __LINE__, #a, \
              #b, check_a_, check_b_);                                                         \
      check_failures++;                                                                        \
    }                                                                                          \
  } while (0)

#define CHECK_STR_CONTAINS(hay, needle)                                                          \
  do {                                                                                           \
    const char* check_h_ = (hay);                                                                \
    if (!check_h_ || !strstr(check_h_, (needle))) {                                              \
      fprintf(stderr, "%s:%d: CHECK failed: \"%s\" does not contain \"%s\"\n", __FILE__, __LINE__, \
              check_h_ ? check_h_ : "(null)", (needle));                                         \
      check_failures++;                                                                          \
    }                                                                                            \
  } while (0)

#define CHECK_DONE()                                                             \
  do {                                                                           \
    if (check_failures) fprintf(stderr, "%d check(s) failed\n", check_failures); \
    return check_failures ? 1 : 0;                                               \
  } while (0)

#endif
