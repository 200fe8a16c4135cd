#include "plan/tune_cache.h"

#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "plan/plan.h"
#include "util/env.h"
#include "util/log.h"

/* Lines of a decision: "#@ bucket COLL INPLACE NEED SCALE ROOT CLASS DEVICE WINNER", then one
 * "#= time NAME US" per candidate timed. Comments to the tuning-file parser, so the file also
 * loads as an ordinary tuning file. */
#define DECISION_TAG "#@ bucket"
#define FINGERPRINT_TAG "# fingerprint: "
#define TIME_TAG "#= time"

uint32_t shunt_tune_class(uint64_t bytes) {
  uint32_t c = 0;
  while (bytes > 1) {
    bytes >>= 1;
    c++;
  }
  return c;
}

static uint64_t fnv1a(const char* s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

/* mkdir -p for the folder's last two levels (~/.cache may not exist on a fresh account). */
static bool make_dir(const char* dir) {
  struct stat st;
  if (stat(dir, &st) == 0) {
    if (!S_ISDIR(st.st_mode)) errno = ENOTDIR;
    return S_ISDIR(st.st_mode);
  }
  char parent[4096];
  snprintf(parent, sizeof(parent), "%s", dir);
  char* slash = strrchr(parent, '/');
  if (slash && slash != parent) {
    *slash = '\0';
    if (stat(parent, &st) != 0) (void)mkdir(parent, 0755);
  }
  return mkdir(dir, 0755) == 0 || errno == EEXIST;
}

bool shunt_tune_cache_path(const char* fingerprint, char* path, size_t len) {
  char dir[4096];
  const char* set = shunt_env_str("SHUNT_TUNING_CACHE", NULL);
  const char* xdg = getenv("XDG_CACHE_HOME");
  const char* home = getenv("HOME");
  if (set)
    snprintf(dir, sizeof(dir), "%s", set);
  else if (xdg && *xdg)
    snprintf(dir, sizeof(dir), "%s/shunt", xdg);
  else if (home && *home)
    snprintf(dir, sizeof(dir), "%s/.cache/shunt", home);
  else {
    SHUNT_WARN("tuning cache: no SHUNT_TUNING_CACHE, XDG_CACHE_HOME or HOME; decisions are not kept");
    return false;
  }
  if (!make_dir(dir) || access(dir, R_OK | W_OK | X_OK) != 0) {
    SHUNT_WARN("tuning cache: cannot use the folder %s (%s); decisions are not kept", dir, strerror(errno));
    return false;
  }
  int n = snprintf(path, len, "%s/shunt-%016llx.tuning", dir, (unsigned long long)fnv1a(fingerprint));
  return n > 0 && (size_t)n < len;
}

static bool parse_decision(const char* line, struct shunt_tune_saved* d) {
  char winner[128], tail[2];
  unsigned v[7];
  int got = sscanf(line, DECISION_TAG " %u %u %u %u %u %u %u %127s %1s", &v[0], &v[1], &v[2], &v[3], &v[4],
                   &v[5], &v[6], winner, tail);
  if (got != 8 || v[0] >= SHUNT_COLL_COUNT || v[1] > 1 || v[3] > 1 || v[5] > 63 || v[6] > 1) return false;
  d->key = (struct shunt_tune_key){v[0], v[1], v[2], v[3], v[4], v[5], v[6]};
  snprintf(d->winner, sizeof(d->winner), "%s", winner);
  d->ntimes = 0;
  return true;
}

/* A candidate's time, under the decision before it. */
static bool parse_time(const char* line, struct shunt_tune_saved* d) {
  char name[128], tail[2];
  double us;
  if (d->ntimes >= SHUNT_TUNE_MAX_CAND || sscanf(line, TIME_TAG " %127s %lf %1s", name, &us, tail) != 2 ||
      !(us >= 0) || !isfinite(us))
    return false;
  snprintf(d->times[d->ntimes].name, sizeof(d->times[0].name), "%s", name);
  d->times[d->ntimes++].us = us;
  return true;
}

void shunt_tune_cache_read(const char* path, const char* fingerprint, struct shunt_tune_saved** out,
                           uint32_t* n) {
  *out = NULL;
  *n = 0;
  FILE* f = fopen(path, "r");
  if (!f) {
    if (errno != ENOENT)
      SHUNT_WARN("tuning cache: cannot read %s (%s); tuning afresh", path, strerror(errno));
    return;
  }
  char line[1024];
  bool matched = false, bad = false, ended = false;
  uint32_t cap = 0, lineno = 0;
  struct shunt_tune_saved* d = NULL;
  while (fgets(line, sizeof(line), f)) {
    lineno++;
    size_t l = strlen(line);
    if (l == 0 || line[l - 1] != '\n') {
      bad = true; /* a line cut short: the file is truncated or not ours */
      break;
    }
    line[l - 1] = '\0';
    if (lineno == 2) {
      if (strncmp(line, FINGERPRINT_TAG, strlen(FINGERPRINT_TAG)) != 0) {
        bad = true;
        break;
      }
      matched = !fingerprint || strcmp(line + strlen(FINGERPRINT_TAG), fingerprint) == 0;
      if (!matched) break;
      continue;
    }
    if (!strcmp(line, "# end")) {
      ended = true;
      break;
    }
    if (!strncmp(line, TIME_TAG, strlen(TIME_TAG))) {
      if (!*n || !parse_time(line, &d[*n - 1])) {
        bad = true;
        break;
      }
      continue;
    }
    if (strncmp(line, DECISION_TAG, strlen(DECISION_TAG)) != 0) continue;
    if (*n == cap) {
      cap = cap ? 2 * cap : 32;
      struct shunt_tune_saved* g = realloc(d, cap * sizeof(*d));
      if (!g) {
        bad = true;
        break;
      }
      d = g;
    }
    if (!parse_decision(line, &d[*n])) {
      bad = true;
      break;
    }
    (*n)++;
  }
  fclose(f);
  if (lineno >= 2 && !matched && !bad) {
    SHUNT_WARN("tuning cache: %s was made for another job (its fingerprint differs from '%s'); tuning afresh",
               path, fingerprint);
    bad = true;
  } else if (!bad && !ended) {
    SHUNT_WARN("tuning cache: %s is truncated (no end line); tuning afresh", path);
    bad = true;
  } else if (bad && matched) {
    SHUNT_WARN("tuning cache: %s: line %u is not valid; tuning afresh", path, lineno);
  } else if (bad) {
    SHUNT_WARN("tuning cache: %s is not a tuning cache file; tuning afresh", path);
  }
  if (bad) {
    free(d);
    *n = 0;
    return;
  }
  *out = d;
}

/* The ordinary tuning rules the decisions amount to: per plan name, the longest run of
 * consecutive size classes it won (a rule gives a plan one range). */
static void write_rules(FILE* f, uint32_t nranks, const struct shunt_tune_saved* d, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) {
    bool first = strcmp(d[i].winner, SHUNT_TUNE_NCCL_NAME) != 0; /* NCCL's sizes: no plan's rule */
    for (uint32_t j = 0; j < i; j++)
      if (!strcmp(d[j].winner, d[i].winner)) first = false;
    if (!first) continue;
    uint64_t won = 0;
    for (uint32_t j = 0; j < n; j++)
      if (!strcmp(d[j].winner, d[i].winner)) won |= 1ull << d[j].key.cls;
    uint32_t best_lo = 0, best_len = 0;
    for (uint32_t lo = 0; lo < 64;) {
      if (!(won >> lo & 1)) {
        lo++;
        continue;
      }
      uint32_t hi = lo;
      while (hi + 1 < 64 && (won >> (hi + 1) & 1)) hi++;
      if (hi - lo + 1 > best_len) best_lo = lo, best_len = hi - lo + 1;
      lo = hi + 1;
    }
    uint64_t min = best_lo ? 1ull << best_lo : 0;
    uint32_t top = best_lo + best_len;
    unsigned long long max = top >= 64 ? ~0ull : (1ull << top) - 1;
    fprintf(f, "%-40s %u %llu %llu\n", d[i].winner, nranks, (unsigned long long)min, max);
  }
}

bool shunt_tune_cache_write(const char* path, const char* fingerprint, uint32_t nranks,
                            const struct shunt_tune_saved* d, uint32_t n) {
  char tmp[4200];
  snprintf(tmp, sizeof(tmp), "%s.%ld.tmp", path, (long)getpid());
  FILE* f = fopen(tmp, "w");
  if (!f) {
    SHUNT_WARN("tuning cache: cannot write %s (%s); decisions are not kept", tmp, strerror(errno));
    return false;
  }
  fprintf(f, "# shunt: plans chosen by measuring this job's calls (SHUNT_TUNING=auto)\n");
  fprintf(f, FINGERPRINT_TAG "%s\n", fingerprint);
  fprintf(f,
          "# decisions: COLL INPLACE NEED SCALE ROOT CLASS DEVICE WINNER (class c: sizes 2^c to 2^(c+1)-1; "
          "DEVICE 1: device buffers; WINNER nccl: NCCL serves them), each followed by its candidates' "
          "times (us)\n");
  for (uint32_t i = 0; i < n; i++) {
    fprintf(f, DECISION_TAG " %u %u %u %u %u %u %u %s\n", d[i].key.coll, d[i].key.inplace, d[i].key.need,
            d[i].key.scale, d[i].key.root, d[i].key.cls, d[i].key.device, d[i].winner);
    for (uint32_t k = 0; k < d[i].ntimes && k < SHUNT_TUNE_MAX_CAND; k++)
      fprintf(f, TIME_TAG " %s %.3f\n", d[i].times[k].name, d[i].times[k].us);
  }
  fprintf(f, "# the same as tuning rules (NAME RANKS MIN MAX), each plan's longest stretch of classes won\n");
  write_rules(f, nranks, d, n);
  fprintf(f, "# end\n");
  bool ok = fflush(f) == 0 && fsync(fileno(f)) == 0;
  ok = fclose(f) == 0 && ok;
  if (ok && rename(tmp, path) != 0) ok = false;
  if (!ok) {
    SHUNT_WARN("tuning cache: cannot write %s (%s); decisions are not kept", path, strerror(errno));
    unlink(tmp);
  }
  return ok;
}
