/* The in-job tuning cache (plan/tune_cache.c): decisions written and read back; another
 * fingerprint, a truncated file, a bad line, a missing file and a folder that is a file each give
 * no decisions; the rules written load as an ordinary tuning file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "plan/tune_cache.h"
#include "plan/tuning.h"

static int failures;
#define CHECK(c)                                                      \
  do {                                                                \
    if (!(c)) {                                                       \
      fprintf(stderr, "%s:%d: failed: %s\n", __FILE__, __LINE__, #c); \
      failures++;                                                     \
    }                                                                 \
  } while (0)

static const char* FP = "shunt=test nccl=0 device=host ranks=4 rpn=4 plans=0123456789abcdef";

static uint32_t read_n(const char* path, const char* fp, struct shunt_tune_saved** d) {
  uint32_t n = 99;
  shunt_tune_cache_read(path, fp, d, &n);
  return n;
}

int main(void) {
  char dir[] = "/tmp/shunt-cache-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  setenv("SHUNT_TUNING_CACHE", dir, 1);
  CHECK(shunt_tune_class(0) == 0 && shunt_tune_class(1) == 0 && shunt_tune_class(2) == 1);
  CHECK(shunt_tune_class(1048576) == 20 && shunt_tune_class(2097151) == 20);

  char path[4300], other[4300];
  CHECK(shunt_tune_cache_path(FP, path, sizeof(path)));
  CHECK(strncmp(path, dir, strlen(dir)) == 0);
  CHECK(shunt_tune_cache_path("another", other, sizeof(other)));
  CHECK(strcmp(path, other) != 0); /* another fingerprint: another file */

  struct shunt_tune_saved* d = NULL;
  CHECK(read_n(path, FP, &d) == 0); /* no file yet: nothing, no error */
  free(d);

  /* Device buckets are apart from host ones, and NCCL can win one (no rule gives it sizes). */
  struct shunt_tune_saved w[5] = {
      {{1, 0, 0, 0, 0, 20, 0},
       "allreduce_4r_simple_outofplace",
       2,
       {{"allreduce_4r_simple_outofplace", 812.5}, {"allreduce_4r_ll_outofplace", 1650.25}}},
      {{1, 0, 0, 0, 0, 21, 0}, "allreduce_4r_simple_outofplace", 0, {{"", 0}}},
      {{5, 0, 0, 0, 2, 10, 0}, "broadcast_4r_ll", 0, {{"", 0}}},
      {{1, 0, 0, 0, 0, 20, 1}, SHUNT_TUNE_NCCL_NAME, 0, {{"", 0}}},
      {{1, 0, 0, 0, 0, 12, 1}, "allreduce_4r_ll_outofplace", 0, {{"", 0}}},
  };
  CHECK(shunt_tune_cache_write(path, FP, 4, w, 5));
  uint32_t n = read_n(path, FP, &d);
  CHECK(n == 5);
  for (uint32_t i = 0; i < n && i < 5; i++) {
    CHECK(memcmp(&d[i].key, &w[i].key, sizeof(w[i].key)) == 0);
    CHECK(strcmp(d[i].winner, w[i].winner) == 0);
    CHECK(d[i].ntimes == w[i].ntimes); /* the times each decision was taken on */
    for (uint32_t k = 0; k < d[i].ntimes && k < w[i].ntimes; k++)
      CHECK(!strcmp(d[i].times[k].name, w[i].times[k].name) && d[i].times[k].us == w[i].times[k].us);
  }
  free(d);

  /* The rules load as a tuning file: the winner's range is classes 20-21. */
  struct shunt_tuning t;
  struct shunt_plan_errors errs = {0};
  CHECK(shunt_tuning_load(path, &t, &errs) == 0);
  const struct shunt_tuning_rule* r = shunt_tuning_find(&t, "allreduce_4r_simple_outofplace", 4);
  CHECK(r && !r->disable && r->min == 1048576 && r->max == 4194303);
  r = shunt_tuning_find(&t, "broadcast_4r_ll", 4);
  CHECK(r && r->min == 1024 && r->max == 2047);
  CHECK(shunt_tuning_find(&t, SHUNT_TUNE_NCCL_NAME, 4) == NULL); /* NCCL's sizes: no plan's rule */
  shunt_tuning_free(&t);
  shunt_plan_errors_free(&errs);

  /* Another fingerprint in the file (a collision): not read. */
  CHECK(read_n(path, "shunt=test nccl=1 device=host ranks=4 rpn=4 plans=0123456789abcdef", &d) == 0);
  free(d);

  /* Truncated: no decisions. */
  FILE* f = fopen(path, "r+");
  CHECK(f != NULL);
  if (f) {
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fclose(f);
    CHECK(truncate(path, len - 8) == 0);
  }
  CHECK(read_n(path, FP, &d) == 0);
  free(d);

  /* A bad decision line: no decisions. */
  f = fopen(path, "w");
  if (f) {
    fprintf(f, "# shunt\n# fingerprint: %s\n#@ bucket 1 0 0 0 0 nope allreduce_x\n# end\n", FP);
    fclose(f);
  }
  CHECK(read_n(path, FP, &d) == 0);
  free(d);

  /* A time before any decision, or one that is not a number: no decisions. */
  const char* bad_times[] = {"#= time allreduce_x 12.5\n#@ bucket 1 0 0 0 0 20 0 allreduce_x\n",
                             "#@ bucket 1 0 0 0 0 20 0 allreduce_x\n#= time allreduce_x -\n"};
  for (int k = 0; k < 2; k++) {
    f = fopen(path, "w");
    if (f) {
      fprintf(f, "# shunt\n# fingerprint: %s\n%s# end\n", FP, bad_times[k]);
      fclose(f);
    }
    CHECK(read_n(path, FP, &d) == 0);
    free(d);
  }

  /* Not a cache file at all. */
  f = fopen(path, "w");
  if (f) {
    fprintf(f, "allreduce_x 4 0 max\n");
    fclose(f);
  }
  CHECK(read_n(path, FP, &d) == 0);
  free(d);

  /* A folder that is a file: no path. */
  char file_dir[4200];
  snprintf(file_dir, sizeof(file_dir), "%s/plainfile", dir);
  f = fopen(file_dir, "w");
  if (f) fclose(f);
  setenv("SHUNT_TUNING_CACHE", file_dir, 1);
  CHECK(!shunt_tune_cache_path(FP, other, sizeof(other)));
  /* A folder that does not exist yet is made. */
  char fresh[4200];
  snprintf(fresh, sizeof(fresh), "%s/a/b", dir);
  setenv("SHUNT_TUNING_CACHE", fresh, 1);
  CHECK(shunt_tune_cache_path(FP, other, sizeof(other)));

  char cmd[4300];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  if (failures) return 1;
  printf("tuning cache: round trip, fingerprints, truncation, bad lines and folders checked\n");
  return 0;
}
