/* Runs shunt-perf and reads its table (the row layout of tools/shunt-perf/report.c:
 * size count type redop root, then time algbw busbw #wrong out of place, the same in place,
 * then the plans "OUT|IN" or one name for both). */
#include "measure.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

volatile int tune_child_pid;

static int parse_row(const char* line, struct tune_row* r) {
  char f[16][160];
  int n = 0;
  const char* p = line;
  while (n < 16) {
    while (*p == ' ' || *p == '\t') p++;
    if (!*p || *p == '\n') break;
    int k = 0;
    while (*p && *p != ' ' && *p != '\t' && *p != '\n' && k < 159) f[n][k++] = *p++;
    f[n][k] = 0;
    while (*p && *p != ' ' && *p != '\t' && *p != '\n') p++;
    n++;
  }
  if (n < 14) return -1;
  char* end;
  r->bytes = strtoull(f[0], &end, 10);
  if (*end) return -1;
  r->us[0] = strtod(f[5], &end);
  if (*end) return -1;
  r->us[1] = strtod(f[9], &end);
  if (*end) return -1;
  const char* bar = strchr(f[13], '|');
  if (bar) {
    snprintf(r->plan[0], sizeof(r->plan[0]), "%.*s", (int)(bar - f[13]) & 127, f[13]);
    snprintf(r->plan[1], sizeof(r->plan[1]), "%.127s", bar + 1);
  } else {
    snprintf(r->plan[0], sizeof(r->plan[0]), "%.127s", f[13]);
    snprintf(r->plan[1], sizeof(r->plan[1]), "%.127s", f[13]);
  }
  return 0;
}

int tune_measure(const struct tune_perf* perf, const char* tuning, const char* force, struct tune_row* rows,
                 unsigned max_rows, char* head, size_t head_len, char* err, size_t len) {
  FILE* out = tmpfile();
  if (!out) {
    snprintf(err, len, "no temporary file: %s", strerror(errno));
    return -1;
  }
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    snprintf(err, len, "fork: %s", strerror(errno));
    fclose(out);
    return -1;
  }
  if (pid == 0) {
    dup2(fileno(out), 1);
    dup2(fileno(out), 2);
    if (tuning)
      setenv("SHUNT_TUNING", tuning, 1);
    else
      unsetenv("SHUNT_TUNING");
    if (force)
      setenv("SHUNT_FORCE_FALLBACK", force, 1);
    else
      unsetenv("SHUNT_FORCE_FALLBACK");
    unsigned n = 0;
    while (perf->args[n]) n++;
    char** argv = calloc(n + 2, sizeof(char*));
    if (!argv) _exit(127);
    argv[0] = (char*)perf->exe;
    for (unsigned i = 0; i < n; i++) argv[i + 1] = perf->args[i];
    execv(perf->exe, argv);
    fprintf(stderr, "shunt-tune: cannot run %s: %s\n", perf->exe, strerror(errno));
    _exit(127);
  }
  tune_child_pid = pid;
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  tune_child_pid = 0;
  rewind(out);
  char line[1024], last[1024] = "";
  int nrows = 0;
  if (head && head_len) head[0] = 0;
  size_t hat = 0;
  while (fgets(line, sizeof(line), out)) {
    if (line[0] == '#' && head && hat + strlen(line) < head_len) {
      memcpy(head + hat, line, strlen(line) + 1);
      hat += strlen(line);
    }
    struct tune_row r;
    if (line[0] != '#' && parse_row(line, &r) == 0 && (unsigned)nrows < max_rows) rows[nrows++] = r;
    if (line[0] && line[0] != '\n') snprintf(last, sizeof(last), "%s", line);
  }
  fclose(out);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    last[strcspn(last, "\n")] = 0;
    if (WIFSIGNALED(st))
      snprintf(err, len, "shunt-perf died of signal %d: %s", WTERMSIG(st), last);
    else
      snprintf(err, len, "shunt-perf failed (exit %d): %s", WEXITSTATUS(st), last);
    return -1;
  }
  return nrows; /* 0 on a rank other than 0 of a run over several machines */
}
