/* Logging and configuration: line shapes, SHUNT_DEBUG_FILE expansion, warnings for invalid
 * values, the last-error text, and that nothing reaches stdout.
 * Usage: test_log MODE (file | badlevel | env); each mode is its own process because the
 * logging configuration is read once. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/check.h"
#include "util/env.h"
#include "util/log.h"

static char* slurp(const char* path) {
  FILE* f = fopen(path, "r");
  if (!f) return NULL;
  static char buf[65536];
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

static char tmpdir[] = "/tmp/shunt-test-log-XXXXXX";

/* Redirects stdout to a file so the test can prove the library never writes there. */
static void capture_stdout(char* path, size_t len) {
  snprintf(path, len, "%s/stdout", tmpdir);
  CHECK(freopen(path, "w", stdout) != NULL);
}

static int mode_file(void) {
  char pattern[256], expect[512], outpath[256];
  snprintf(pattern, sizeof(pattern), "%s/log.%%h.%%p", tmpdir);
  setenv("SHUNT_DEBUG_FILE", pattern, 1);
  setenv("SHUNT_DEBUG", "TRACE", 1);
  setenv("SHUNT_DEBUG_SUBSYS", "INIT,BOGUS", 1);
  capture_stdout(outpath, sizeof(outpath));

  SHUNT_INFO(SHUNT_INIT, "hello %d", 42);
  SHUNT_INFO(SHUNT_CALL, "not shown: CALL is not selected");
  SHUNT_TRACE(SHUNT_INIT, "traced");
  SHUNT_WARN("something failed: %s", "reason");
  char host[64];
  gethostname(host, sizeof(host));
  host[sizeof(host) - 1] = '\0';
  char* dot = strchr(host, '.');
  if (dot) *dot = '\0';
  snprintf(expect, sizeof(expect), "%s/log.%s.%d", tmpdir, host, (int)getpid());
  const char* log = slurp(expect);
  CHECK_MSG(log != NULL, "log file %s was not written", expect);
  if (!log) CHECK_DONE();
  CHECK_STR_CONTAINS(log, "SHUNT_DEBUG_SUBSYS");
  CHECK_STR_CONTAINS(log, "BOGUS");
  CHECK_STR_CONTAINS(log, "accepted:");
  CHECK_STR_CONTAINS(log, "SHUNT INFO hello 42");
  CHECK(strstr(log, "not shown") == NULL);
  CHECK_STR_CONTAINS(log, "SHUNT TRACE traced");
  CHECK_STR_CONTAINS(log, "SHUNT WARN something failed: reason");
  CHECK_STR_CONTAINS(log, "test_log.c:");
  char who[128];
  snprintf(who, sizeof(who), "%s:%d:", host, (int)getpid());
  CHECK_STR_CONTAINS(log, who);

  char buf[256];
  CHECK(strcmp(shunt_last_error(buf, sizeof(buf)), "something failed: reason") == 0);
  unsigned long s = shunt_last_error_seq();
  shunt_set_last_error("quiet %d", 7);
  CHECK(shunt_last_error_seq() == s + 1);
  CHECK(strcmp(shunt_last_error(buf, sizeof(buf)), "quiet 7") == 0);

  fflush(stdout);
  struct stat st;
  CHECK(stat(outpath, &st) == 0 && st.st_size == 0);
  CHECK_DONE();
}

static int mode_badlevel(void) {
  char errpath[256];
  snprintf(errpath, sizeof(errpath), "%s/stderr", tmpdir);
  CHECK(freopen(errpath, "w", stderr) != NULL);
  setenv("SHUNT_DEBUG", "LOUD", 1);
  SHUNT_INFO(SHUNT_INIT, "info is off at the default level");
  fflush(stderr);
  const char* err = slurp(errpath);
  CHECK_STR_CONTAINS(err, "SHUNT_DEBUG=LOUD is not valid");
  CHECK_STR_CONTAINS(err, "WARN, INFO, TRACE");
  CHECK(strstr(err, "info is off") == NULL);
  CHECK_DONE();
}

static int mode_env(void) {
  char errpath[256];
  snprintf(errpath, sizeof(errpath), "%s/stderr", tmpdir);
  CHECK(freopen(errpath, "w", stderr) != NULL);
  static const char* const choices[] = {"auto", "gpu", "host"};
  unsetenv("SHUNT_X_CHOICE");
  CHECK_EQ_INT(shunt_env_choice("SHUNT_X_CHOICE", NULL, choices, 3, 0), 0);
  setenv("SHUNT_X_ALIAS", "HOST", 1);
  CHECK_EQ_INT(shunt_env_choice("SHUNT_X_CHOICE", "SHUNT_X_ALIAS", choices, 3, 0), 2);
  setenv("SHUNT_X_CHOICE", "tpu", 1);
  CHECK_EQ_INT(shunt_env_choice("SHUNT_X_CHOICE", NULL, choices, 3, 1), 1);
  char buf[512];
  CHECK_STR_CONTAINS(shunt_last_error(buf, sizeof(buf)), "SHUNT_X_CHOICE=tpu is not valid (accepted: auto, gpu, host)");
  setenv("SHUNT_X_INT", "12x", 1);
  CHECK_EQ_INT(shunt_env_int("SHUNT_X_INT", 5, 0, 100), 5);
  CHECK_STR_CONTAINS(shunt_last_error(buf, sizeof(buf)), "SHUNT_X_INT");
  setenv("SHUNT_X_INT", "101", 1);
  CHECK_EQ_INT(shunt_env_int("SHUNT_X_INT", 5, 0, 100), 5);
  setenv("SHUNT_X_INT", "100", 1);
  CHECK_EQ_INT(shunt_env_int("SHUNT_X_INT", 5, 0, 100), 100);
  setenv("SHUNT_X_BOOL", "On", 1);
  CHECK_EQ_INT(shunt_env_bool("SHUNT_X_BOOL", 0), 1);
  setenv("SHUNT_X_BOOL", "maybe", 1);
  CHECK_EQ_INT(shunt_env_bool("SHUNT_X_BOOL", 0), 0);
  CHECK_STR_CONTAINS(shunt_last_error(buf, sizeof(buf)), "SHUNT_X_BOOL=maybe is not valid");
  setenv("SHUNT_X_EMPTY", "", 1);
  CHECK(shunt_env_str("SHUNT_X_EMPTY", NULL) == NULL);
  fflush(stderr);
  CHECK_STR_CONTAINS(slurp(errpath), "SHUNT WARN SHUNT_X_CHOICE=tpu");
  CHECK_DONE();
}

int main(int argc, char** argv) {
  if (!mkdtemp(tmpdir)) return 2;
  const char* mode = argc > 1 ? argv[1] : "file";
  int rc = 2;
  if (!strcmp(mode, "file")) rc = mode_file();
  if (!strcmp(mode, "badlevel")) rc = mode_badlevel();
  if (!strcmp(mode, "env")) rc = mode_env();
  char cmd[300];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
  if (system(cmd) != 0) rc = rc ? rc : 1;
  return rc;
}
