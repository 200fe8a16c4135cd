/* PlanSet loading (bad files next to good ones, missing folders), selection rules, the
 * overlap rule, the set hash, and tuning overrides. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/check.h"
#include "plan/planset.h"
#include "util/status.h"
#include "plan_test_util.h"

static const struct shunt_plan_entry* find(const struct shunt_planset* ps, const char* file) {
  for (uint32_t i = 0; i < shunt_planset_count(ps); i++)
    if (strcmp(shunt_planset_entry(ps, i)->file, file) == 0) return shunt_planset_entry(ps, i);
  return NULL;
}

static bool has_error(const struct shunt_plan_errors* e, const char* file, const char* reason) {
  char buf[1200];
  for (uint32_t i = 0; i < e->n; i++)
    if (strstr(e->v[i].file, file) && strstr(shunt_plan_error_format(&e->v[i], buf, sizeof(buf)), reason))
      return true;
  return false;
}

static void expect_rejected(const struct shunt_planset* ps, const struct shunt_plan_errors* e,
                            const char* file, const char* reason) {
  const struct shunt_plan_entry* x = find(ps, file);
  CHECK_MSG(x != NULL, "%s not listed", file);
  if (!x) return;
  CHECK_MSG(x->status == SHUNT_PLAN_REJECTED, "%s not rejected", file);
  CHECK_STR_CONTAINS(x->reason, reason);
  CHECK_MSG(has_error(e, file, reason), "no error for %s containing %s", file, reason);
}

static void test_bad_files(void) {
  char* dir = temp_dir();
  char* good = base_plan(&(struct base_opts){.name = "good"});
  write_file(dir, "10_good.json", good);
  char* seed = NULL;
  {
    FILE* f = fopen(SEED_PLAN, "rb");
    CHECK(f != NULL);
    seed = calloc(1, 1 << 16);
    if (f) {
      size_t n = fread(seed, 1, (1 << 16) - 1, f);
      (void)n;
      fclose(f);
    }
  }
  write_file(dir, "11_seed.json", seed);
  write_file(dir, "20_empty.json", "");
  char* trunc = strdup(seed);
  trunc[strlen(trunc) / 3] = '\0';
  write_file(dir, "21_truncated.json", trunc);
  free(trunc);
  /* 100 MB: a sparse file, created at test time. */
  {
    char path[4200];
    snprintf(path, sizeof(path), "%s/22_huge.json", dir);
    int fd = open(path, O_CREAT | O_WRONLY, 0644);
    CHECK(fd >= 0 && ftruncate(fd, 100 << 20) == 0);
    if (fd >= 0) close(fd);
  }
  size_t depth = 50000;
  char* deep = malloc(2 * depth + 1);
  memset(deep, '{', 1);
  memset(deep, '[', depth);
  memset(deep + depth, ']', depth);
  deep[2 * depth] = '\0';
  write_file(dir, "23_deep.json", deep);
  free(deep);
  char* s = edit(strdup(good), "\"min_message_size\": 0", "\"min_message_size\": -5", 1);
  write_file(dir, "24_negative.json", s);
  free(s);
  s = edit(strdup(good), "\"max_message_size\": 18446744073709551615",
           "\"max_message_size\": 36893488147419103232", 1);
  write_file(dir, "25_over64.json", s);
  free(s);
  s = edit(strdup(good), "\"protocol\": \"Simple\"", "\"protocol\": \"Simple\", \"protocol\": \"LL\"", 1);
  write_file(dir, "26_dupkey.json", s);
  free(s);
  s = edit(strdup(good), "\"name\": \"good\"", "\"name\": \"unread\"", 1);
  write_file(dir, "27_unreadable.json", s);
  free(s);
  s = edit(strdup(good), "\"name\": \"good\"", "\"name\": \"broken\"", 1);
  s = edit(s, "\"connected_to\": [1]", "\"connected_to\": [3]", 1);
  write_file(dir, "28_failscheck.json", s);
  free(s);
  write_file(dir, "29_duplicate.json", good); /* same plan as 10_good */
  write_file(dir, "README.md", "not a plan");
  write_file(dir, ".hidden.json", "{");
  char sub[4200];
  snprintf(sub, sizeof(sub), "%s/30_folder.json", dir);
  CHECK(mkdir(sub, 0755) == 0);
  snprintf(sub, sizeof(sub), "%s/27_unreadable.json", dir);
  bool root = geteuid() == 0;
  if (!root) CHECK(chmod(sub, 0) == 0);

  struct shunt_plan_errors e = {0};
  struct shunt_planset* ps = NULL;
  CHECK_EQ_INT(shunt_planset_load(dir, NULL, &ps, &e), 0);
  CHECK(ps != NULL);
  if (ps) {
    CHECK_EQ_INT(shunt_planset_count(ps), 13);
    /* Sorted order. */
    CHECK_STR_CONTAINS(shunt_planset_entry(ps, 0)->file, "10_good.json");
    CHECK_STR_CONTAINS(shunt_planset_entry(ps, 12)->file, "30_folder.json");
    CHECK(find(ps, "10_good.json")->status == SHUNT_PLAN_OK);
    CHECK(find(ps, "11_seed.json")->status == SHUNT_PLAN_OK);
    CHECK_EQ_INT(shunt_planset_usable(ps), root ? 3 : 2);
    expect_rejected(ps, &e, "20_empty.json", "empty file");
    expect_rejected(ps, &e, "21_truncated.json", "invalid JSON");
    expect_rejected(ps, &e, "22_huge.json", "file too large");
    expect_rejected(ps, &e, "23_deep.json", "nesting");
    expect_rejected(ps, &e, "24_negative.json", "min_message_size: negative value -5");
    expect_rejected(ps, &e, "25_over64.json", "max_message_size: value 36893488147419103232 out of range");
    expect_rejected(ps, &e, "26_dupkey.json", "protocol: duplicate key");
    if (!root) expect_rejected(ps, &e, "27_unreadable.json", "cannot open");
    expect_rejected(ps, &e, "28_failscheck.json",
                    "gpus[0].channels[0].connected_to[0]: peer 3 is not a rank");
    expect_rejected(ps, &e, "29_duplicate.json", "duplicate plan 'good'");
    expect_rejected(ps, &e, "30_folder.json", "not a regular file");
    /* Each bad file gives exactly one error, except the check failure which may give more. */
    uint32_t n20 = 0;
    for (uint32_t i = 0; i < e.n; i++) n20 += strstr(e.v[i].file, "20_empty.json") != NULL;
    CHECK_EQ_INT(n20, 1);
  }
  shunt_planset_free(ps);
  shunt_plan_errors_free(&e);

  /* Missing and unreadable folders. */
  char missing[4200];
  snprintf(missing, sizeof(missing), "%s/no-such-folder", dir);
  CHECK_EQ_INT(shunt_planset_load(missing, NULL, &ps, &e), SHUNT_E_SYSTEM); /* opendir: ENOENT */
  CHECK(ps != NULL && shunt_planset_count(ps) == 0);
  CHECK_EQ_INT(e.n, 1);
  if (e.n) CHECK_STR_CONTAINS(e.v[0].reason, "cannot open plan folder");
  shunt_planset_free(ps);
  shunt_plan_errors_free(&e);
  if (!root) {
    CHECK(chmod(dir, 0) == 0);
    CHECK_EQ_INT(shunt_planset_load(dir, NULL, &ps, &e), SHUNT_E_SYSTEM); /* EACCES */
    CHECK_EQ_INT(e.n, 1);
    shunt_planset_free(ps);
    shunt_plan_errors_free(&e);
    CHECK(chmod(dir, 0755) == 0);
  }
  remove_tree(dir);
  free(dir);
  free(good);
  free(seed);
}

static struct shunt_selection sel(const struct shunt_planset* ps, enum shunt_coll c, bool inplace,
                                  uint64_t bytes, enum shunt_dtype dt, enum shunt_redop op) {
  struct shunt_select_query q = {
      .coll = c, .nranks = 2, .inplace = inplace, .dtype = dt, .op = op, .bytes = bytes};
  return shunt_planset_select(ps, &q);
}

static const char* chosen(struct shunt_selection s) {
  return s.entry ? s.entry->file : "(none)";
}

static void test_selection(void) {
  char* dir = temp_dir();
  struct {
    const char* file;
    struct base_opts o;
  } plans[] = {
      {"ar_small.json", {.name = "small", .min = "1024", .max = "65536"}},
      {"ar_wide.json", {.name = "wide"}},
      {"ar_twin.json", {.name = "twin", .min = "1048576", .max = "2097152"}},
      {"ar_twin0.json", {.name = "twin0", .min = "2097152", .max = "3145728"}},
      {"ar_inplace.json", {.name = "inplace", .inplace = true, .max = "1048576"}},
      {"ar_max.json", {.name = "maxonly", .min = "2048", .max = "4096", .reduce_op = "max"}},
  };
  for (size_t i = 0; i < sizeof(plans) / sizeof(plans[0]); i++) {
    char* s = base_plan(&plans[i].o);
    write_file(dir, plans[i].file, s);
    free(s);
  }
  FILE* f = fopen(SEED_PLAN, "rb");
  char seed[4096] = {0};
  if (f) {
    size_t n = fread(seed, 1, sizeof(seed) - 1, f);
    (void)n;
    fclose(f);
  }
  write_file(dir, "ag_seed.json", seed);

  struct shunt_plan_errors e = {0};
  struct shunt_planset* ps = NULL;
  CHECK_EQ_INT(shunt_planset_load(dir, NULL, &ps, &e), 0);
  CHECK_EQ_INT(e.n, 0);
  CHECK_EQ_INT(shunt_planset_usable(ps), 7);

  /* Narrowest range wins where ranges overlap; edges are inclusive. */
  CHECK_STR_CONTAINS(chosen(sel(ps, SHUNT_COLL_ALLREDUCE, false, 1024, SHUNT_DT_FLOAT32, SHUNT_REDOP_SUM)),
                     "ar_small");
  CHECK_STR_CONTAINS(chosen(sel(ps, SHUNT_COLL_ALLREDUCE, false, 65536, SHUNT_DT_FLOAT32, SHUNT_REDOP_SUM)),
                     "ar_small");
  CHECK_STR_CONTAINS(
      chosen(sel(ps, SHUNT_COLL_ALLREDUCE, false, 65536 + 32, SHUNT_DT_FLOAT32, SHUNT_REDOP_SUM)), "ar_wide");
  CHECK_STR_CONTAINS(
      chosen(sel(ps, SHUNT_COLL_ALLREDUCE, false, 1024 - 32, SHUNT_DT_FLOAT32, SHUNT_REDOP_SUM)), "ar_wide");
  /* Equal widths: the smaller file name wins (ar_twin.json < ar_twin0.json) at the shared edge. */
  CHECK_STR_CONTAINS(chosen(sel(ps, SHUNT_COLL_ALLREDUCE, false, 2097152, SHUNT_DT_FLOAT32, SHUNT_REDOP_SUM)),
                     "ar_twin.json");
  CHECK_STR_CONTAINS(
      chosen(sel(ps, SHUNT_COLL_ALLREDUCE, false, 2097152 + 32, SHUNT_DT_FLOAT32, SHUNT_REDOP_SUM)),
      "ar_twin0.json");
  /* In-place is a separate key. */
  CHECK_STR_CONTAINS(chosen(sel(ps, SHUNT_COLL_ALLREDUCE, true, 4096, SHUNT_DT_FLOAT32, SHUNT_REDOP_SUM)),
                     "ar_inplace");
  CHECK(sel(ps, SHUNT_COLL_ALLREDUCE, true, 1048576 + 32, SHUNT_DT_FLOAT32, SHUNT_REDOP_SUM).entry == NULL);
  CHECK(shunt_select_inplace(SHUNT_COLL_ALLREDUCE, (void*)0x1000, (void*)0x1000, 1, 64));
  CHECK(!shunt_select_inplace(SHUNT_COLL_ALLREDUCE, (void*)0x1000, (void*)0x2000, 1, 64));
  CHECK(shunt_select_inplace(SHUNT_COLL_ALLGATHER, (void*)0x1040, (void*)0x1000, 1, 64));
  CHECK(!shunt_select_inplace(SHUNT_COLL_ALLGATHER, (void*)0x1000, (void*)0x1000, 1, 64));
  CHECK(shunt_select_inplace(SHUNT_COLL_ALLGATHER, (void*)0x1000, (void*)0x1000, 0, 64));
  /* Ops: a sum plan serves sum, prod, min, max; floating avg and PreMulSum by scaling, integer
   * avg by dividing the sum. */
  struct shunt_selection s = sel(ps, SHUNT_COLL_ALLREDUCE, false, 1024, SHUNT_DT_INT32, SHUNT_REDOP_PROD);
  CHECK_STR_CONTAINS(chosen(s), "ar_small");
  CHECK(!s.scale);
  s = sel(ps, SHUNT_COLL_ALLREDUCE, false, 1024, SHUNT_DT_BFLOAT16, SHUNT_REDOP_AVG);
  CHECK_STR_CONTAINS(chosen(s), "ar_small");
  CHECK(s.scale);
  s = sel(ps, SHUNT_COLL_ALLREDUCE, false, 1024, SHUNT_DT_INT32, SHUNT_REDOP_AVG);
  CHECK_STR_CONTAINS(chosen(s), "ar_small");
  CHECK(!s.scale);
  s = sel(ps, SHUNT_COLL_ALLREDUCE, false, 1024, SHUNT_DT_INT64, SHUNT_REDOP_PREMULSUM);
  CHECK(s.entry != NULL && s.scale);
  CHECK(sel(ps, SHUNT_COLL_ALLREDUCE, false, 1024, SHUNT_DT_FLOAT32, SHUNT_REDOP_OTHER).entry == NULL);
  CHECK(sel(ps, SHUNT_COLL_ALLREDUCE, false, 1024, SHUNT_DT_COUNT, SHUNT_REDOP_SUM).entry == NULL);
  /* A plan naming reduce_op max serves max only, even where it is the narrowest. */
  CHECK_STR_CONTAINS(chosen(sel(ps, SHUNT_COLL_ALLREDUCE, false, 4096, SHUNT_DT_FLOAT32, SHUNT_REDOP_MAX)),
                     "ar_max");
  CHECK_STR_CONTAINS(chosen(sel(ps, SHUNT_COLL_ALLREDUCE, false, 4096, SHUNT_DT_FLOAT32, SHUNT_REDOP_SUM)),
                     "ar_small");
  CHECK_STR_CONTAINS(chosen(sel(ps, SHUNT_COLL_ALLREDUCE, false, 4096, SHUNT_DT_FLOAT32, SHUNT_REDOP_MIN)),
                     "ar_small");
  /* Sizes the chunk rule does not take are served all the same (a head and a padded tail,
   * exec/split.h): 1024 + 16 is no multiple of 2 chunks of 16-byte units. */
  s = sel(ps, SHUNT_COLL_ALLREDUCE, false, 1024 + 16, SHUNT_DT_FLOAT32, SHUNT_REDOP_SUM);
  CHECK_STR_CONTAINS(chosen(s), "ar_small");
  /* 32-bit device offsets: a chunk of 2^32 bytes does not fit. */
  CHECK(sel(ps, SHUNT_COLL_ALLREDUCE, false, 1ull << 34, SHUNT_DT_FLOAT32, SHUNT_REDOP_SUM).entry == NULL);
  /* Allgather: total output bytes, any dtype, op ignored. */
  CHECK_STR_CONTAINS(chosen(sel(ps, SHUNT_COLL_ALLGATHER, true, 64, SHUNT_DT_INT8, SHUNT_REDOP_OTHER)),
                     "ag_seed");
  CHECK_STR_CONTAINS(chosen(sel(ps, SHUNT_COLL_ALLGATHER, true, 66, SHUNT_DT_INT8, SHUNT_REDOP_SUM)),
                     "ag_seed");
  CHECK(sel(ps, SHUNT_COLL_ALLGATHER, false, 64, SHUNT_DT_INT8, SHUNT_REDOP_SUM).entry == NULL);
  /* Wrong rank count, other collectives. */
  struct shunt_select_query q = {
      .coll = SHUNT_COLL_ALLREDUCE, .nranks = 4, .dtype = SHUNT_DT_FLOAT32, .bytes = 1024};
  CHECK(shunt_planset_select(ps, &q).entry == NULL);
  q.coll = SHUNT_COLL_REDUCESCATTER;
  q.nranks = 2;
  CHECK(shunt_planset_select(ps, &q).entry == NULL);

  /* In-job tuning's candidates: every plan selection would take but for its range, in
   * selection's order, the untuned choice among them; op and dtype rules still apply. */
  {
    struct shunt_select_query cq = {.coll = SHUNT_COLL_ALLREDUCE,
                                    .nranks = 2,
                                    .dtype = SHUNT_DT_FLOAT32,
                                    .op = SHUNT_REDOP_SUM,
                                    .bytes = 4096};
    const struct shunt_plan_entry* cand[8];
    uint32_t nc = shunt_planset_candidates(ps, &cq, cand, 8);
    CHECK_EQ_INT(nc, 4); /* small, twin, twin0 and wide; not the in-place plan, not the max-only one */
    bool has_sel = false, has_max = false;
    for (uint32_t i = 0; i < nc && i < 8; i++) {
      has_sel |= cand[i] == shunt_planset_select(ps, &cq).entry;
      has_max |= strstr(cand[i]->file, "ar_max") != NULL;
      CHECK(cand[i]->plan->coll == SHUNT_COLL_ALLREDUCE && !cand[i]->plan->inplace);
    }
    CHECK(has_sel);
    CHECK(!has_max);                                             /* a max-only plan is no candidate for sum */
    CHECK_STR_CONTAINS(cand[nc - 1]->file, "ar_wide");           /* the widest range comes last */
    CHECK_EQ_INT(shunt_planset_candidates(ps, &cq, cand, 2), 4); /* the count, whatever fits */
    cq.op = SHUNT_REDOP_MAX;                                     /* the max-only plan joins */
    CHECK_EQ_INT(shunt_planset_candidates(ps, &cq, cand, 8), 5);
    cq.op = SHUNT_REDOP_OTHER;
    CHECK_EQ_INT(shunt_planset_candidates(ps, &cq, cand, 8), 0);
    cq.op = SHUNT_REDOP_SUM;
    cq.bytes = 1ull << 34; /* beyond the device encoding: no plan, whatever the ranges */
    CHECK_EQ_INT(shunt_planset_candidates(ps, &cq, cand, 8), 0);
  }

  /* Hash: stable across loads; changes with a tuning override. */
  uint64_t h1 = shunt_planset_hash(ps);
  struct shunt_planset* ps2 = NULL;
  CHECK_EQ_INT(shunt_planset_load(dir, NULL, &ps2, &e), 0);
  CHECK(shunt_planset_hash(ps2) == h1);
  shunt_planset_free(ps2);

  /* Tuning: override a range (exact rank count beats '*'), disable a plan, bad lines skipped. */
  write_file(dir, "tuning.txt",
             "# cluster thresholds\n"
             "wide * 0 1M\n"
             "wide 2 0 512K   # exact rank count wins\n"
             "small * disable\n"
             "small 2 1K\n"
             "twin 2 9 8\n"
             "twin two 1 2\n"
             "nosuchplan 2 0 1K\n");
  char tpath[4200];
  snprintf(tpath, sizeof(tpath), "%s/tuning.txt", dir);
  struct shunt_planset_opts opts = {.tuning_path = tpath};
  shunt_plan_errors_clear(&e);
  CHECK_EQ_INT(shunt_planset_load(dir, &opts, &ps2, &e), 0);
  CHECK_EQ_INT(e.n, 3);
  CHECK(has_error(&e, "tuning.txt", "expected MIN MAX or the word disable"));
  CHECK(has_error(&e, "tuning.txt", "MIN is greater than MAX"));
  CHECK(has_error(&e, "tuning.txt", "RANKS must be"));
  CHECK(has_error(&e, "tuning.txt:6", "MIN is greater than MAX"));
  CHECK(has_error(&e, "tuning.txt:5", "expected MIN MAX"));
  const struct shunt_plan_entry* w = find(ps2, "ar_wide.json");
  CHECK(w && w->min_bytes == 0 && w->max_bytes == 512 * 1024);
  if (w) CHECK_STR_CONTAINS(w->range_source, "tuning.txt:3");
  const struct shunt_plan_entry* sm = find(ps2, "ar_small.json");
  CHECK(sm && sm->status == SHUNT_PLAN_DISABLED);
  if (sm) CHECK_STR_CONTAINS(sm->reason, "tuning.txt:4");
  CHECK_STR_CONTAINS(find(ps2, "ar_twin.json")->range_source, "plan file");
  CHECK(shunt_planset_hash(ps2) != h1);
  /* ar_small is disabled: 1K goes to ar_wide; above 512K nothing (out-of-place). */
  CHECK_STR_CONTAINS(chosen(sel(ps2, SHUNT_COLL_ALLREDUCE, false, 1024, SHUNT_DT_FLOAT32, SHUNT_REDOP_SUM)),
                     "ar_wide");
  CHECK(sel(ps2, SHUNT_COLL_ALLREDUCE, false, 512 * 1024 + 32, SHUNT_DT_FLOAT32, SHUNT_REDOP_SUM).entry ==
        NULL);
  shunt_planset_free(ps2);

  /* A missing tuning file is one error; plans keep their own ranges. */
  opts.tuning_path = "/nonexistent/tuning.txt";
  shunt_plan_errors_clear(&e);
  CHECK_EQ_INT(shunt_planset_load(dir, &opts, &ps2, &e), 0);
  CHECK_EQ_INT(e.n, 1);
  CHECK(shunt_planset_hash(ps2) == h1);
  shunt_planset_free(ps2);

  shunt_planset_free(ps);
  shunt_plan_errors_free(&e);
  remove_tree(dir);
  free(dir);
}

int main(void) {
  test_bad_files();
  test_selection();
  CHECK_DONE();
}
