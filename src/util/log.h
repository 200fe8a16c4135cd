/* Logging in NCCL's shape with the SHUNT tag.
 *
 * Promises: nothing is written to stdout; output goes to stderr or SHUNT_DEBUG_FILE.
 * WARN lines are always kept as the process-wide "last error" (readable through
 * shunt_last_error) even when logging is off, so ncclGetLastError can report them.
 * All functions are thread-safe. Configuration is read once, at first use. */
#ifndef SHUNT_UTIL_LOG_H
#define SHUNT_UTIL_LOG_H

#include <stddef.h>

enum shunt_log_level { SHUNT_LOG_NONE = 0, SHUNT_LOG_WARN = 1, SHUNT_LOG_INFO = 2, SHUNT_LOG_TRACE = 3 };

/* Subsystems, selectable with SHUNT_DEBUG_SUBSYS (comma list, ^ to exclude, ALL). */
enum shunt_subsys {
  SHUNT_INIT = 1u << 0,
  SHUNT_ENV = 1u << 1,
  SHUNT_PLAN = 1u << 2,
  SHUNT_EXEC = 1u << 3,
  SHUNT_COMM = 1u << 4,
  SHUNT_BOOTSTRAP = 1u << 5,
  SHUNT_CALL = 1u << 6,
  SHUNT_PROXY = 1u << 7,
  SHUNT_ALLOC = 1u << 8,
  SHUNT_FALLBACK = 1u << 9,
  SHUNT_NET = 1u << 10,
  SHUNT_TUNE = 1u << 11,
  SHUNT_ALL_SUBSYS = 0xfffu,
};

#if defined(__GNUC__)
#define SHUNT_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define SHUNT_PRINTF(a, b)
#endif

void shunt_log(int level, unsigned subsys, const char* file, int line, const char* func, const char* fmt, ...)
    SHUNT_PRINTF(6, 7);

/* Whether a message of this level and subsystem would be printed (cheap after first call). */
int shunt_log_enabled(int level, unsigned subsys);

/* Copies the newest WARN text into buf (always NUL-terminated); returns buf. */
const char* shunt_last_error(char* buf, size_t len);
/* Sets the last-error text without printing (for errors reported only through return codes). */
void shunt_set_last_error(const char* fmt, ...) SHUNT_PRINTF(1, 2);
/* Monotonic sequence number of the last error, 0 if none yet. */
unsigned long shunt_last_error_seq(void);

/* The device shown in log lines of the calling thread (-1: unknown). */
void shunt_log_set_device(int dev);

#define SHUNT_WARN(...) shunt_log(SHUNT_LOG_WARN, SHUNT_ALL_SUBSYS, __FILE__, __LINE__, __func__, __VA_ARGS__)
#define SHUNT_INFO(sub, ...)                                                                    \
  do {                                                                                          \
    if (shunt_log_enabled(SHUNT_LOG_INFO, (sub)))                                               \
      shunt_log(SHUNT_LOG_INFO, (sub), __FILE__, __LINE__, __func__, __VA_ARGS__);             \
  } while (0)
#define SHUNT_TRACE(sub, ...)                                                                   \
  do {                                                                                          \
    if (shunt_log_enabled(SHUNT_LOG_TRACE, (sub)))                                              \
      shunt_log(SHUNT_LOG_TRACE, (sub), __FILE__, __LINE__, __func__, __VA_ARGS__);            \
  } while (0)

#endif
