/* A plan's outline (plan/peek.h) against the full parse of every shipped plan; outlines it
 * must refuse; and a plan folder loaded for one rank count (shunt_planset_opts.nranks). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "plan/parse.h"
#include "plan/peek.h"
#include "plan/planset.h"
#include "plan_test_util.h"

static bool peek_str(const char* s, struct shunt_plan_peek* pk) {
  return shunt_plan_peek(s, strlen(s), pk);
}

/* Every shipped plan: the outline's rank count and name are the parsed plan's. */
static unsigned test_shipped(void) {
  DIR* d = opendir(PLAN_DIR);
  CHECK(d != NULL);
  if (!d) return 0;
  unsigned n = 0;
  struct dirent* de;
  while ((de = readdir(d))) {
    size_t l = strlen(de->d_name);
    if (l < 6 || strcmp(de->d_name + l - 5, ".json") != 0) continue;
    char path[4200];
    snprintf(path, sizeof(path), "%s/%s", PLAN_DIR, de->d_name);
    struct shunt_plan_errors errs = {0};
    size_t len;
    char* text = shunt_plan_read_file(path, &len, &errs);
    CHECK_MSG(text != NULL, "%s unreadable", path);
    struct shunt_plan* p = text ? shunt_plan_parse(text, len, path, &errs) : NULL;
    CHECK_MSG(p != NULL, "%s does not parse", path);
    struct shunt_plan_peek pk;
    bool ok = text && shunt_plan_peek(text, len, &pk);
    CHECK_MSG(ok, "%s: no outline", path);
    if (ok && p) {
      CHECK_MSG(pk.ngpus == p->ngpus, "%s: outline says %u ranks, the plan %u", path, pk.ngpus, p->ngpus);
      CHECK_MSG(strcmp(pk.name, p->name) == 0, "%s: outline names '%s', the plan '%s'", path, pk.name,
                p->name);
    }
    shunt_plan_free(p);
    shunt_plan_errors_free(&errs);
    free(text);
    n++;
  }
  closedir(d);
  CHECK_MSG(n > 10, "only %u shipped plans found in %s", n, PLAN_DIR);
  return n;
}

static void test_outlines(void) {
  struct shunt_plan_peek pk;
  /* Brackets and quotes inside strings, nested values, keys in any order. */
  CHECK(
      peek_str(" {\"x\": {\"a\": [1, \"]}\", {\"b\": \"\\\"[\"}]}, \"gpus\": [{\"id\": 0, \"t\": [[], {}]},"
               " {\"s\": \"{[\"}, 7], \"name\": \"a]}\", \"z\": -1.5e3, \"t\": true}\n",
               &pk));
  CHECK_EQ_INT(pk.ngpus, 3);
  CHECK(strcmp(pk.name, "a]}") == 0);
  CHECK(peek_str("{\"gpus\": []}", &pk));
  CHECK_EQ_INT(pk.ngpus, 0);
  CHECK(pk.name[0] == '\0');
  /* A "name" that is not a string is skipped, not taken. */
  CHECK(peek_str("{\"name\": 5, \"gpus\": [{}]}", &pk) && pk.name[0] == '\0' && pk.ngpus == 1);
  /* Refused: the parser must see these. */
  const char* bad[] = {
      "",
      "[]",
      "{}",
      "{\"name\": \"x\"}",                                /* no gpus */
      "{\"gpus\": {}}",                                   /* not an array */
      "{\"gpus\": [], \"gpus\": [{}]}",                   /* twice */
      "{\"name\": \"a\", \"name\": \"b\", \"gpus\": []}", /* twice */
      "{\"gp\\u0075s\": [{}]}",                           /* an escaped key */
      "{\"name\": \"a\\\"b\", \"gpus\": []}",             /* an escaped name */
      "{\"gpus\": [{}, {}]",                              /* truncated */
      "{\"gpus\": [{}, {]}",                              /* unbalanced */
      "{\"gpus\": [{}, ]}",                               /* empty element */
      "{\"gpus\": [{}]} x",                               /* trailing content */
      "{\"gpus\" [{}]}",                                  /* no colon */
      "{\"gpus\": [{}] \"name\": \"a\"}",                 /* no comma */
      "{\"gpus\": [\"unterminated]}",
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    CHECK_MSG(!peek_str(bad[i], &pk), "outline accepted: %s", bad[i]);
  char longname[300];
  memset(longname, 0, sizeof(longname));
  strcpy(longname, "{\"name\": \"");
  memset(longname + strlen(longname), 'n', 200);
  strcat(longname, "\", \"gpus\": []}");
  CHECK(!peek_str(longname, &pk));
}

static char* slurp(const char* path) {
  struct shunt_plan_errors errs = {0};
  size_t len;
  char* t = shunt_plan_read_file(path, &len, &errs);
  CHECK_MSG(t != NULL, "%s unreadable", path);
  shunt_plan_errors_free(&errs);
  return t;
}

static const struct shunt_plan_entry* find(const struct shunt_planset* ps, const char* file) {
  for (uint32_t i = 0; i < shunt_planset_count(ps); i++)
    if (strcmp(shunt_planset_entry(ps, i)->file, file) == 0) return shunt_planset_entry(ps, i);
  return NULL;
}

/* A folder of a 2-rank plan, a 4-rank plan, a broken file and a 4-rank plan that fails its
 * checks: loaded for 2 ranks, the 4-rank files are left out (the broken one is parsed, to
 * be reported); for 4 ranks the 2-rank plan is; without a rank count everything loads. */
static void test_planset_nranks(void) {
  char* dir = temp_dir();
  char* two = base_plan(&(struct base_opts){.name = "two"});
  write_file(dir, "a_two.json", two);
  char* four = slurp(PLAN_DIR "/allreduce_4r_ll_inplace.json");
  if (!four) return;
  write_file(dir, "b_four.json", four);
  write_file(dir, "c_broken.json", "{\"name\": \"broken\", \"gpus\": [");
  /* Fails its checks, not its outline: a 4-rank plan whose first op names an unknown op. */
  four = edit(four, "\"name\": \"allreduce_4r_ll_inplace\"", "\"name\": \"bad_four\"", 1);
  four = edit(four, "\"name\": \"ppkt\"", "\"name\": \"no_such_op\"", 1);
  write_file(dir, "d_bad_four.json", four);

  struct shunt_planset* ps = NULL;
  struct shunt_plan_errors errs = {0};
  CHECK_EQ_INT(shunt_planset_load(dir, &(struct shunt_planset_opts){.nranks = 2}, &ps, &errs), 0);
  CHECK_EQ_INT(shunt_planset_count(ps), 2);
  CHECK_EQ_INT(shunt_planset_other_ranks(ps), 2);
  CHECK(find(ps, "a_two.json") && find(ps, "a_two.json")->status == SHUNT_PLAN_OK);
  CHECK(find(ps, "c_broken.json") && find(ps, "c_broken.json")->status == SHUNT_PLAN_REJECTED);
  CHECK(!find(ps, "b_four.json") && !find(ps, "d_bad_four.json"));
  uint64_t h2 = shunt_planset_hash(ps);
  shunt_planset_free(ps);
  shunt_plan_errors_free(&errs);

  CHECK_EQ_INT(shunt_planset_load(dir, &(struct shunt_planset_opts){.nranks = 4}, &ps, &errs), 0);
  CHECK_EQ_INT(shunt_planset_count(ps), 3);
  CHECK_EQ_INT(shunt_planset_other_ranks(ps), 1);
  CHECK(find(ps, "b_four.json") && find(ps, "b_four.json")->status == SHUNT_PLAN_OK);
  CHECK(find(ps, "d_bad_four.json") && find(ps, "d_bad_four.json")->status == SHUNT_PLAN_REJECTED);
  CHECK(shunt_planset_hash(ps) != h2);
  shunt_planset_free(ps);
  shunt_plan_errors_free(&errs);

  CHECK_EQ_INT(shunt_planset_load(dir, &(struct shunt_planset_opts){0}, &ps, &errs), 0);
  CHECK_EQ_INT(shunt_planset_count(ps), 4);
  CHECK_EQ_INT(shunt_planset_other_ranks(ps), 0);
  CHECK_EQ_INT(shunt_planset_usable(ps), 2);
  shunt_planset_free(ps);
  shunt_plan_errors_free(&errs);

  /* The same folder loaded twice for one rank count gives the same set. */
  struct shunt_planset* again = NULL;
  CHECK_EQ_INT(shunt_planset_load(dir, &(struct shunt_planset_opts){.nranks = 2}, &again, &errs), 0);
  CHECK(shunt_planset_hash(again) == h2);
  shunt_planset_free(again);
  shunt_plan_errors_free(&errs);
  free(two);
  free(four);
  remove_tree(dir);
  free(dir);
}

int main(void) {
  unsigned n = test_shipped();
  test_outlines();
  test_planset_nranks();
  printf("%u shipped plans outlined\n", n);
  CHECK_DONE();
}
