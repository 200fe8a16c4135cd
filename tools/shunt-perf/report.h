/* nccl-tests' output: table headers, rows and footers, plus shunt-perf's plan column. */
#ifndef SHUNT_PERF_REPORT_H
#define SHUNT_PERF_REPORT_H

#include <stddef.h>
#include <stdint.h>

struct perf_half {
  double us;           /* average over ranks */
  double algbw, busbw; /* GB/s */
  int64_t wrong;       /* max over ranks; -1 when not checked */
};

void perf_print_table_header(const char* coll);
void perf_print_row(size_t bytes, size_t count, const char* type, const char* op, int root,
                    const struct perf_half* oop, const struct perf_half* ip, const char* plan);
void perf_print_table_footer(int64_t wrong, double avg_busbw);

#endif
