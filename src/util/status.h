/* One family of status codes, and one way to say why, for every layer under the NCCL API: the
 * backends, the worlds (host, CUDA, CPU-built kernel), lowering, the split, the transports, the
 * bootstrap, the TCP helpers.
 *
 * Promises:
 * - A function of these layers that can fail returns SHUNT_OK (0) or one of the negative
 *   SHUNT_E_* codes, each with one meaning everywhere; the code a failure started with travels
 *   up unchanged (SHUNT_TRY), so that the API sees what happened, not what a layer guessed.
 *   api/launch.h's shunt_nccl_result alone turns a code into an ncclResult_t.
 * - Where such a function takes `char* err, size_t len`, a failure leaves one line there (no
 *   trailing newline, lower-case start, naming the object and the value that failed); err may be
 *   NULL or len 0 when the caller does not want the words. A layer may put what it was doing
 *   in front of that line (SHUNT_TRY_AT), never replace it.
 * - Checks that answer yes or no (bool) write their reason the same way (SHUNT_REFUSE).
 * - What stays 0 / -1: thin wrappers of one system or library call (errno says why) and
 *   predicates; their callers turn -1 into a code where it becomes a failure.
 * - Nothing here depends on CUDA or on any other layer: any file may include it. */
#ifndef SHUNT_UTIL_STATUS_H
#define SHUNT_UTIL_STATUS_H

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

enum shunt_status {
  SHUNT_OK = 0,
  SHUNT_E_INVALID = -1, /* bad arguments, a program that does not fit the world, a broken world */
  SHUNT_E_TIMEOUT = -2, /* a wait gave up at its deadline; the world that waited is broken from
                           then on */
  SHUNT_E_NOMEM = -3,   /* host or device memory */
  SHUNT_E_UNFIT = -4,   /* this backend cannot run the plan here at all (its blocks cannot all be
                           resident on the device): not a failure of the call, a reason to pass */
  SHUNT_E_CUDA = -5,    /* a CUDA driver call failed: the words name the call and its error */
  SHUNT_E_SYSTEM = -6,  /* a system call failed (a socket, shared memory, a thread): the words
                           name the call and errno's text */
  SHUNT_E_PEER = -7,    /* a peer is gone or gave up first: its connection closed or reset, it
                           aborted or failed and told this rank so; the world is broken */
  SHUNT_E_NET = -8,     /* the network failed or is not there: no usable interface, a host
                           unreachable, a verbs work completion in error */
  SHUNT_E_ABORTED = -9  /* this rank's communicator was aborted (ncclCommAbort, teardown): its
                           waits gave up on request */
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
    case SHUNT_E_SYSTEM:
      return "system error";
    case SHUNT_E_PEER:
      return "peer gone";
    case SHUNT_E_NET:
      return "network error";
    case SHUNT_E_ABORTED:
      return "aborted";
    default:
      return "unknown";
  }
}

/* The code of a system call that failed with errno `e`: its own meaning where one fits (a
 * deadline, memory, a peer that closed or reset, the network), else SHUNT_E_SYSTEM. */
static inline int shunt_errno_status(int e) {
  switch (e) {
    case ETIMEDOUT:
      return SHUNT_E_TIMEOUT;
    case ENOMEM:
      return SHUNT_E_NOMEM;
    case ECONNREFUSED:
    case ECONNRESET:
    case ECONNABORTED:
    case EPIPE:
      return SHUNT_E_PEER;
    case ENETDOWN:
    case ENETUNREACH:
    case ENETRESET:
    case EHOSTUNREACH:
    case EHOSTDOWN:
      return SHUNT_E_NET;
    default:
      return SHUNT_E_SYSTEM;
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

/* Puts "<what this layer was doing>: " in front of the line already in err (cut at len). */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 3, 4)))
#endif
static inline void
shunt_prefixf(char* err, size_t len, const char* fmt, ...) {
  if (!err || !len) return;
  char pre[256];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(pre, sizeof(pre), fmt, ap);
  va_end(ap);
  if (n < 0) return;
  size_t p = (size_t)n < sizeof(pre) ? (size_t)n : sizeof(pre) - 1;
  if (p + 2 >= len) {
    shunt_setf(err, len, "%s", pre);
    return;
  }
  size_t had = 0, room = len - 1 - p - 2;
  while (had < room && err[had]) had++;
  memmove(err + p + 2, err, had);
  err[p + 2 + had] = 0;
  memcpy(err, pre, p);
  err[p] = ':';
  err[p + 1] = ' ';
}

/* In a function with `char* err, size_t len`: say why, return the code. */
#define SHUNT_FAIL(code, ...)          \
  do {                                 \
    shunt_setf(err, len, __VA_ARGS__); \
    return (code);                     \
  } while (0)

/* In a function that returns a SHUNT code: runs `expr` (a call returning one, that left its
 * line in err when it failed) and returns that code as it is when it is not SHUNT_OK: the first
 * failure's code and words reach the caller, no layer rewrites them. */
#define SHUNT_TRY(expr)                                  \
  do {                                                   \
    int shunt_try_rc_ = (expr);                          \
    if (shunt_try_rc_ != SHUNT_OK) return shunt_try_rc_; \
  } while (0)

/* SHUNT_TRY that also says what this layer was doing, in front of the failure's line
 * (shunt_prefixf); needs `char* err, size_t len` in scope. */
#define SHUNT_TRY_AT(expr, ...)             \
  do {                                      \
    int shunt_try_rc_ = (expr);             \
    if (shunt_try_rc_ != SHUNT_OK) {        \
      shunt_prefixf(err, len, __VA_ARGS__); \
      return shunt_try_rc_;                 \
    }                                       \
  } while (0)

/* In a bool check with `char* reason, size_t len`: say why, answer no. */
#define SHUNT_REFUSE(...)                 \
  do {                                    \
    shunt_setf(reason, len, __VA_ARGS__); \
    return false;                         \
  } while (0)

#endif
