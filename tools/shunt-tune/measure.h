/* One timed pass of shunt-perf over every size, with a tuning file that leaves one candidate
 * per placement, and its rows read back.
 *
 * Promises: tune_measure runs PERF (with the launch arguments given) as a child process with
 * SHUNT_TUNING=tuning (NULL: none) and SHUNT_FORCE_FALLBACK=force (NULL: unset), waits for it,
 * and fills rows from its table. Returns the number of rows (0: it printed no table, as ranks
 * other than 0 of a run over several machines do), or -1 with the reason in err (the child
 * failed or was interrupted). head gets its '#' lines. */
#ifndef SHUNT_TUNE_MEASURE_H
#define SHUNT_TUNE_MEASURE_H

#include <stddef.h>
#include <stdint.h>

struct tune_row {
  uint64_t bytes;
  double us[2];      /* out of place, in place */
  char plan[2][128]; /* what served each ("nccl" for NCCL) */
};

struct tune_perf {
  const char* exe;
  char* const* args; /* launch and size arguments, NULL-terminated, without the program name */
};

int tune_measure(const struct tune_perf* perf, const char* tuning, const char* force, struct tune_row* rows,
                 unsigned max_rows, char* head, size_t head_len, char* err, size_t len);

/* The child being run, for the interrupt handler (0: none). */
extern volatile int tune_child_pid;

#endif
