/* Tuning-file parsing: sizes, rules, precedence, and bad lines named by file:line. */
#include <string.h>

#include "common/check.h"
#include "plan/tuning.h"
#include "util/status.h"

static void test_sizes(void) {
  uint64_t v;
  CHECK(shunt_tuning_parse_size("0", &v) && v == 0);
  CHECK(shunt_tuning_parse_size("4096", &v) && v == 4096);
  CHECK(shunt_tuning_parse_size("64K", &v) && v == 65536);
  CHECK(shunt_tuning_parse_size("1m", &v) && v == 1048576);
  CHECK(shunt_tuning_parse_size("2G", &v) && v == 2147483648ull);
  CHECK(shunt_tuning_parse_size("1T", &v) && v == 1ull << 40);
  CHECK(shunt_tuning_parse_size("max", &v) && v == UINT64_MAX);
  CHECK(shunt_tuning_parse_size("18446744073709551615", &v) && v == UINT64_MAX);
  CHECK(!shunt_tuning_parse_size("18446744073709551616", &v));
  CHECK(!shunt_tuning_parse_size("16777216T", &v));
  CHECK(!shunt_tuning_parse_size("-1", &v));
  CHECK(!shunt_tuning_parse_size("1KB", &v));
  CHECK(!shunt_tuning_parse_size("", &v));
  CHECK(!shunt_tuning_parse_size("1.5M", &v));
}

static void test_rules(void) {
  const char* text =
      "# comment line\n"
      "\n"
      "   ar_ll   8   0   64K   # trailing comment\n"
      "ar_ll * 0 1M\n"
      "ag_big * disable\n"
      "ar_ll 8 4K\n"
      "ar_ll 8 1K 2K 3K\n"
      "ar_ll 0 1K 2K\n"
      "ar_ll 8 2K 1K\n"
      "ar_ll 8 1X 2K\n"
      "ag_big 4 1K max\r\n"
      "ar_ll 8 128 256\n";
  struct shunt_tuning t = {0};
  struct shunt_plan_errors e = {0};
  unsigned bad = shunt_tuning_parse(text, strlen(text), "cluster.tuning", &t, &e);
  CHECK_EQ_INT(bad, 5);
  CHECK_EQ_INT(e.n, 5);
  const char* lines[] = {"cluster.tuning:6", "cluster.tuning:7", "cluster.tuning:8", "cluster.tuning:9",
                         "cluster.tuning:10"};
  for (uint32_t i = 0; i < e.n && i < 5; i++) {
    char buf[1024];
    CHECK_STR_CONTAINS(e.v[i].file, lines[i]);
    CHECK_STR_CONTAINS(shunt_plan_error_format(&e.v[i], buf, sizeof(buf)), lines[i]);
    CHECK_STR_CONTAINS(e.v[i].reason, "skipped");
  }
  CHECK_EQ_INT(t.n, 5);
  /* Exact rank count beats '*'; among exact rules the last wins. */
  const struct shunt_tuning_rule* r = shunt_tuning_find(&t, "ar_ll", 8);
  CHECK(r && r->min == 128 && r->max == 256 && r->line == 12);
  r = shunt_tuning_find(&t, "ar_ll", 4);
  CHECK(r && r->max == 1048576 && r->line == 4);
  r = shunt_tuning_find(&t, "ag_big", 4);
  CHECK(r && !r->disable && r->max == UINT64_MAX);
  r = shunt_tuning_find(&t, "ag_big", 2);
  CHECK(r && r->disable);
  CHECK(shunt_tuning_find(&t, "other", 8) == NULL);
  shunt_tuning_free(&t);
  shunt_plan_errors_free(&e);

  /* A missing file is an error value, not a crash. */
  CHECK_EQ_INT(shunt_tuning_load("/nonexistent/x.tuning", &t, &e), SHUNT_E_SYSTEM);
  CHECK_EQ_INT(e.n, 1);
  shunt_tuning_free(&t);
  shunt_plan_errors_free(&e);
}

int main(void) {
  test_sizes();
  test_rules();
  CHECK_DONE();
}
