/* shunt-perf end to end on the computing NCCL test double: N ranks as processes, small sizes,
 * allreduce and allgather over several dtypes and ops. The output must hold both tables with
 * a row for every (type, op, size) and #wrong 0 everywhere; with the double corrupting one
 * element per call, shunt-perf must report #wrong > 0 and exit nonzero.
 *
 * Usage: test_perf SHUNT_PERF FAKE_NCCL_LIB NRANKS [corrupt] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/check.h"

#define NTYPES 4
#define NOPS 4
#define NSIZES 7 /* 8 B .. 32 KiB by a factor of 4 */
static const char* const types[NTYPES] = {"float", "int8", "bfloat16", "f8e4m3"};
static const char* const ops[NOPS] = {"sum", "prod", "max", "avg"};

static int index_of(const char* const* list, int n, const char* s) {
  for (int i = 0; i < n; i++)
    if (!strcmp(list[i], s)) return i;
  return -1;
}

struct tally {
  int rows_ar[NTYPES][NOPS], rows_ag[NTYPES];
  int tables_ar, tables_ag, footers_ok, wrong_rows, bad_rows;
};

/* A row: size count type redop root, then time algbw busbw #wrong twice, then the plan. */
static void parse_row(const char* line, const char* table, struct tally* t) {
  char type[32], op[32], w1[32], w2[32], plan[64];
  long size, count, root;
  double d[6];
  int n = sscanf(line, "%ld %ld %31s %31s %ld %lf %lf %lf %31s %lf %lf %lf %31s %63s", &size, &count, type,
                 op, &root, &d[0], &d[1], &d[2], w1, &d[3], &d[4], &d[5], w2, plan);
  int ti = index_of(types, NTYPES, type);
  if (n != 14 || ti < 0) {
    fprintf(stderr, "unparsable row: %s", line);
    t->bad_rows++;
    return;
  }
  if (strcmp(w1, "0") != 0 || strcmp(w2, "0") != 0) t->wrong_rows++;
  if (!strcmp(table, "allgather")) {
    CHECK_MSG(!strcmp(op, "none"), "allgather row with op %s", op);
    t->rows_ag[ti]++;
    return;
  }
  int oi = index_of(ops, NOPS, op);
  if (oi < 0) {
    t->bad_rows++;
    return;
  }
  t->rows_ar[ti][oi]++;
}

static int run(const char* perf, int nranks, struct tally* t) {
  char cmd[4096];
  snprintf(cmd, sizeof(cmd),
           "'%s' -np %d -b 8 -e 64K -f 4 -n 3 -w 1 -d float,int8,bfloat16,f8e4m3 -o sum,prod,max,avg", perf,
           nranks);
  FILE* p = popen(cmd, "r");
  if (!p) return -1;
  char line[1024], table[32] = "";
  while (fgets(line, sizeof(line), p)) {
    fputs(line, stdout); /* the log shows the run */
    if (!strcmp(line, "# allreduce\n") || !strcmp(line, "# allgather\n")) {
      sscanf(line, "# %31s", table);
      if (!strcmp(table, "allreduce"))
        t->tables_ar++;
      else
        t->tables_ag++;
    } else if (!strncmp(line, "# Out of bounds values : 0 OK", 29)) {
      t->footers_ok++;
    } else if (line[0] != '#' && table[0]) {
      parse_row(line, table, t);
    }
  }
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: test_perf SHUNT_PERF FAKE_NCCL_LIB NRANKS [corrupt]\n");
    return 2;
  }
  int corrupt = argc > 4 && !strcmp(argv[4], "corrupt");
  char plans[] = "/tmp/shunt-perf-plans-XXXXXX"; /* empty: every call goes to the double */
  if (!mkdtemp(plans)) return 2;
  setenv("SHUNT_NCCL_LIB", argv[2], 1);
  setenv("SHUNT_PLAN_DIR", plans, 1);
  setenv("FAKE_NCCL_TIMEOUT", "30", 1);
  if (corrupt) setenv("FAKE_NCCL_CORRUPT", "1", 1);
  struct tally t = {0};
  int rc = run(argv[1], atoi(argv[3]), &t);
  rmdir(plans);
  CHECK_EQ_INT(t.tables_ar, 1);
  CHECK_EQ_INT(t.tables_ag, 1);
  CHECK_EQ_INT(t.bad_rows, 0);
  for (int ti = 0; ti < NTYPES; ti++) {
    CHECK_MSG(t.rows_ag[ti] == NSIZES, "allgather %s: %d rows", types[ti], t.rows_ag[ti]);
    for (int oi = 0; oi < NOPS; oi++)
      CHECK_MSG(t.rows_ar[ti][oi] == NSIZES, "allreduce %s %s: %d rows", types[ti], ops[oi],
                t.rows_ar[ti][oi]);
  }
  if (corrupt) {
    CHECK_MSG(rc != 0, "shunt-perf must fail when results are wrong");
    CHECK_MSG(t.wrong_rows > 0, "rows must show #wrong > 0");
    CHECK_MSG(t.footers_ok == 0, "no table may claim 0 out-of-bounds values");
  } else {
    CHECK_EQ_INT(rc, 0);
    CHECK_EQ_INT(t.wrong_rows, 0);
    CHECK_EQ_INT(t.footers_ok, 2);
  }
  CHECK_DONE();
}
