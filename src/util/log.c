/* NCCL-shaped log lines with the SHUNT tag; see log.h for what is promised. */
#include "util/log.h"
#include "util/status.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "util/env.h"

/* Configuration is read once under pthread_once; afterwards it is only read. */
static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static int log_level;
static unsigned log_subsys;
static FILE* log_file;
static char log_host[64];
static struct timespec log_start;

/* The output stream and the last-error buffer are shared by all threads. */
static pthread_mutex_t log_mutex = PTHREAD_MUTEX_INITIALIZER;
static char last_error[1024];
static unsigned long last_error_seq;

static _Thread_local int log_dev = -1;

static const struct {
  const char* name;
  unsigned bit;
} subsys_names[] = {
    {"INIT", SHUNT_INIT}, {"ENV", SHUNT_ENV},       {"PLAN", SHUNT_PLAN},   {"EXEC", SHUNT_EXEC},
    {"COMM", SHUNT_COMM}, {"BOOTSTRAP", SHUNT_BOOTSTRAP}, {"CALL", SHUNT_CALL}, {"PROXY", SHUNT_PROXY},
    {"ALLOC", SHUNT_ALLOC}, {"FALLBACK", SHUNT_FALLBACK}, {"NET", SHUNT_NET}, {"TUNE", SHUNT_TUNE},
    {"ALL", SHUNT_ALL_SUBSYS},
};

/* Parses a comma list such as "INIT,CALL" or "^CALL"; returns 0 and sets *mask, or SHUNT_E_INVALID
 * on an unknown name (its text in bad). */
static int parse_subsys(const char* s, unsigned* mask, char* bad, size_t badlen) {
  int invert = 0;
  if (*s == '^') {
    invert = 1;
    s++;
  }
  unsigned m = 0;
  while (*s) {
    size_t n = strcspn(s, ",");
    int found = 0;
    for (size_t i = 0; i < sizeof(subsys_names) / sizeof(subsys_names[0]); i++) {
      if (strlen(subsys_names[i].name) == n && strncasecmp(s, subsys_names[i].name, n) == 0) {
        m |= subsys_names[i].bit;
        found = 1;
      }
    }
    if (!found && n > 0) {
      snprintf(bad, badlen, "%.*s", (int)n, s);
      return SHUNT_E_INVALID;
    }
    s += n;
    if (*s == ',') s++;
  }
  *mask = invert ? (SHUNT_ALL_SUBSYS & ~m) : m;
  return 0;
}

/* Expands %h (host) and %p (pid) as NCCL_DEBUG_FILE does. */
static void expand_path(const char* in, char* out, size_t len) {
  size_t o = 0;
  for (const char* p = in; *p && o + 1 < len; p++) {
    if (p[0] == '%' && (p[1] == 'h' || p[1] == 'p')) {
      int w = p[1] == 'h' ? snprintf(out + o, len - o, "%s", log_host)
                          : snprintf(out + o, len - o, "%d", (int)getpid());
      if (w < 0 || (size_t)w >= len - o) break;
      o += (size_t)w;
      p++;
    } else {
      out[o++] = *p;
    }
  }
  out[o] = '\0';
}

static void log_init(void) {
  clock_gettime(CLOCK_MONOTONIC, &log_start);
  if (gethostname(log_host, sizeof(log_host)) != 0) strcpy(log_host, "unknown");
  log_host[sizeof(log_host) - 1] = '\0';
  char* dot = strchr(log_host, '.');
  if (dot) *dot = '\0';

  log_file = stderr;
  log_subsys = SHUNT_INIT | SHUNT_ENV | SHUNT_PLAN | SHUNT_COMM | SHUNT_FALLBACK;
  /* Warnings about our own configuration are collected and printed once the sink is known. */
  char pending[3][256];
  int npending = 0;

  static const char* const levels[] = {"NONE", "WARN", "INFO", "TRACE"};
  log_level = SHUNT_LOG_WARN;
  const char* lv = shunt_env_str("SHUNT_DEBUG", NULL);
  if (lv) {
    int found = -1;
    for (int i = 0; i < 4; i++)
      if (strcasecmp(lv, levels[i]) == 0) found = i;
    if (strcasecmp(lv, "VERSION") == 0) found = SHUNT_LOG_WARN;
    if (found < 0)
      snprintf(pending[npending++], sizeof(pending[0]),
               "SHUNT_DEBUG=%.64s is not valid (accepted: NONE, VERSION, WARN, INFO, TRACE); using WARN", lv);
    else
      log_level = found;
  }
  const char* ss = shunt_env_str("SHUNT_DEBUG_SUBSYS", NULL);
  if (ss) {
    char bad[64];
    unsigned m;
    if (parse_subsys(ss, &m, bad, sizeof(bad)) == 0)
      log_subsys = m;
    else
      snprintf(pending[npending++], sizeof(pending[0]),
               "SHUNT_DEBUG_SUBSYS: unknown subsystem '%s' (accepted: INIT, ENV, PLAN, EXEC, COMM, "
               "BOOTSTRAP, CALL, PROXY, ALLOC, FALLBACK, NET, TUNE, ALL; ^ excludes); using the default",
               bad);
  }
  const char* df = shunt_env_str("SHUNT_DEBUG_FILE", NULL);
  if (df && log_level > SHUNT_LOG_NONE) {
    char path[4096];
    expand_path(df, path, sizeof(path));
    FILE* f = fopen(path, "a");
    if (f) {
      setvbuf(f, NULL, _IOLBF, 0);
      log_file = f;
    } else {
      snprintf(pending[npending++], sizeof(pending[0]), "SHUNT_DEBUG_FILE: cannot open %.160s: %s", path,
               strerror(errno));
    }
  }
  for (int i = 0; i < npending; i++) {
    pthread_mutex_lock(&log_mutex);
    snprintf(last_error, sizeof(last_error), "%s", pending[i]);
    last_error_seq++;
    pthread_mutex_unlock(&log_mutex);
    if (log_level >= SHUNT_LOG_WARN)
      fprintf(log_file, "\n%s:%d:%ld [%d] SHUNT WARN %s\n", log_host, (int)getpid(), (long)syscall(SYS_gettid),
              log_dev, pending[i]);
  }
}

int shunt_log_enabled(int level, unsigned subsys) {
  pthread_once(&log_once, log_init);
  return level <= log_level && (subsys & log_subsys) != 0;
}

void shunt_log_set_device(int dev) { log_dev = dev; }

static const char* base_name(const char* path) {
  const char* s = strrchr(path, '/');
  return s ? s + 1 : path;
}

static void record_error(const char* msg) {
  pthread_mutex_lock(&log_mutex);
  snprintf(last_error, sizeof(last_error), "%s", msg);
  last_error_seq++;
  pthread_mutex_unlock(&log_mutex);
}

void shunt_log(int level, unsigned subsys, const char* file, int line, const char* func, const char* fmt, ...) {
  pthread_once(&log_once, log_init);
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (level == SHUNT_LOG_WARN) record_error(msg);
  if (level > log_level || (level != SHUNT_LOG_WARN && !(subsys & log_subsys))) return;

  char head[256];
  long tid = (long)syscall(SYS_gettid);
  int pid = (int)getpid();
  if (level == SHUNT_LOG_WARN) {
    char ts[32];
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(ts, sizeof(ts), "%Y-%m-%d %H:%M:%S", &tm);
    snprintf(head, sizeof(head), "\n[%s] %s:%d:%ld [%d] %s:%d (%s) SHUNT WARN", ts, log_host, pid, tid, log_dev,
             base_name(file), line, func);
  } else if (level == SHUNT_LOG_INFO) {
    snprintf(head, sizeof(head), "%s:%d:%ld [%d] SHUNT %s", log_host, pid, tid, log_dev,
             subsys == SHUNT_CALL ? "CALL" : "INFO");
  } else {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    double ms = (double)(now.tv_sec - log_start.tv_sec) * 1e3 + (double)(now.tv_nsec - log_start.tv_nsec) / 1e6;
    snprintf(head, sizeof(head), "%s:%d:%ld [%d] %f %s:%d SHUNT TRACE", log_host, pid, tid, log_dev, ms, func,
             line);
  }
  pthread_mutex_lock(&log_mutex);
  fprintf(log_file, "%s %s\n", head, msg);
  fflush(log_file);
  pthread_mutex_unlock(&log_mutex);
}

void shunt_set_last_error(const char* fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  record_error(msg);
}

const char* shunt_last_error(char* buf, size_t len) {
  if (len == 0) return buf;
  pthread_mutex_lock(&log_mutex);
  snprintf(buf, len, "%s", last_error);
  pthread_mutex_unlock(&log_mutex);
  return buf;
}

unsigned long shunt_last_error_seq(void) {
  pthread_mutex_lock(&log_mutex);
  unsigned long s = last_error_seq;
  pthread_mutex_unlock(&log_mutex);
  return s;
}
