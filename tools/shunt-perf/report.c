/* Row layout as nccl-tests prints it (src/util.cu), so that tools reading its output can read
 * shunt-perf's; the plan column comes last, where nothing expects anything. */
#include "report.h"

#include <stdio.h>

void perf_print_table_header(const char* coll) {
  printf("#\n# %s\n#\n", coll);
  printf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n", "",
         "", "", "", "");
  printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s  %s\n", "size", "count", "type",
         "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong", "plan");
  printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "(B)", "(elements)", "", "",
         "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
}

static void print_half(const struct perf_half* h) {
  char t[32], w[32];
  if (h->us >= 10000.0)
    snprintf(t, sizeof(t), "%7.0f", h->us);
  else if (h->us >= 100.0)
    snprintf(t, sizeof(t), "%7.1f", h->us);
  else
    snprintf(t, sizeof(t), "%7.2f", h->us);
  if (h->wrong < 0)
    snprintf(w, sizeof(w), "N/A");
  else
    snprintf(w, sizeof(w), "%lld", (long long)h->wrong);
  printf("  %7s  %6.2f  %6.2f  %6s", t, h->algbw, h->busbw, w);
}

void perf_print_row(size_t bytes, size_t count, const char* type, const char* op, int root,
                    const struct perf_half* oop, const struct perf_half* ip, const char* plan) {
  printf("%12zu  %12zu  %8s  %6s  %6i", bytes, count, type, op, root);
  print_half(oop);
  print_half(ip);
  printf("  %s\n", plan);
  fflush(stdout);
}

void perf_print_table_footer(int64_t wrong, double avg_busbw) {
  printf("# Out of bounds values : %lld %s\n", (long long)wrong, wrong ? "FAILED" : "OK");
  printf("# Avg bus bandwidth    : %g \n", avg_busbw);
  fflush(stdout);
}
