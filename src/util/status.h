/* One family of status codes, and one way to say why, for every layer under the NCCL API: the
 * backends, the worlds (host, CUDA, CPU-built kernel), lowering, the split, the transports.
 *
 * Promises:
 * - A function of these layers returns SHUNT_OK (0) or one of the negative SHUNT_E_* codes, each
 *   with one meaning everywhere; api/launch.c alone turns them into ncclResult_t.
 * - Where such a function takes `char* err, size_t len`, a failure leaves one line there (no
 *   trailing newline, lower-case start, naming the object and the value that failed); err may be
 *   NULL or len 0 when the caller does not want the words.
 * - Checks that answer yes or no (bool) write their reason the same way.
 * - Nothing here depends on CUDA or on any other layer: any file may include it. */
#ifndef SHUNT_UTIL_STATUS_H
#define SHUNT_UTIL_STATUS_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

enum shunt_status {
  SHUNT_OK = 0,
  SHUNT_E_INVALID = -1, /* bad arguments, a program that does not fit the world, a broken world */
  SHUNT_E_TIMEOUT = -2, /* a wait gave up; the world that waited is broken from then on */
  SHUNT_E_NOMEM = -3,
  SHUNT_E_UNFIT = -4, /* this backend cannot run the plan here at all (its blocks cannot all be
                         resident on the device): not a failure of the call, a reason to pass */
  SHUNT_E_CUDA = -5   /* a CUDA driver call failed */
};

/* The code's name ("invalid", "timeout", ...), for messages. */
static inline const char* shunt_status_name(int code) {
  switch (code) {
    case SHUNT_OK:
      return "ok";
    case SHUNT_E_INVALID:
      return "invalid";
    case SHUNT_E_TIMEOUT:
      return "timeout";
    case SHUNT_E_NOMEM:
      return "out of memory";
    case SHUNT_E_UNFIT:
      return "unfit";
    case SHUNT_E_CUDA:
      return "CUDA error";
    default:
      return "unknown";
  }
}

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 3, 4)))
#endif
static inline void
shunt_setf(char* err, size_t len, const char* fmt, ...) {
  if (!err || !len) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, len, fmt, ap);
  va_end(ap);
}

/* In a function with `char* err, size_t len`: say why, return the code. */
#define SHUNT_FAIL(code, ...)          \
  do {                                 \
    shunt_setf(err, len, __VA_ARGS__); \
    return (code);                     \
  } while (0)

/* In a bool check with `char* reason, size_t len`: say why, answer no. */
#define SHUNT_REFUSE(...)                 \
  do {                                    \
    shunt_setf(reason, len, __VA_ARGS__); \
    return false;                         \
  } while (0)

#endif
