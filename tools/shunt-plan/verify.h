/* What the parts of shunt-plan verify share: the options and the shapes (calls) every rank
 * runs, and the kernel-cpu runner (verify_kcpu.c). */
#ifndef SHUNT_TOOLS_PLAN_VERIFY_H
#define SHUNT_TOOLS_PLAN_VERIFY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "exec/ops/dtype.h"
#include "plan/plan.h"
#include "verify_ref.h"

#define MAX_SIZES 16
enum { VERIFY_BACKEND_HOST = 0, VERIFY_BACKEND_KCPU = 1 };

struct vopts {
  const char* file;
  uint32_t nranks;
  uint64_t sizes[MAX_SIZES];
  unsigned nsizes;
  enum shunt_dtype dtypes[SHUNT_DT_COUNT];
  unsigned ndtypes;
  enum shunt_redop ops[VERIFY_NOPS];
  unsigned nops;
  unsigned iters;
  int inplace; /* -1: as the plan says */
  uint64_t timeout_ms;
  uint64_t max_bytes; /* default size list cap */
  int any_size;       /* run sizes outside the plan's range */
  int edge_sizes;  /* default sizes: only the first, one element above it (head + tail), one element per rank
                      (tail alone) */
  int skip_checks; /* run even when the static checks fail */
  int pkt;         /* packet type of LL plans: SHUNT_PKT_LL16 (default) or SHUNT_PKT_LL8 */
  int backend;     /* VERIFY_BACKEND_* */
  unsigned threads[8]; /* kernel-cpu: threads per block, each run in turn */
  unsigned nthreads;
  unsigned skew_us; /* kernel-cpu: schedule perturbation (kcpu_kernel.h) */
  int net;          /* host: ranks on several hosts, port channels between them: 1 TCP (loopback), 2 verbs */
  uint32_t nodes;   /* with net: how many hosts (consecutive ranks each); 0: from the plan */
  int root;         /* broadcast: only this root; -1: every root */
};

/* One call: total bytes (allreduce buffer, allgather output), per-rank input and output. */
struct shape {
  uint64_t total, in, out;
  enum shunt_dtype dt;
  enum shunt_redop op;
};

/* What a world must hold to run every shape (both parts of each, exec/split.h), the largest
 * user buffers, and the largest tail staging. */
struct verify_needs {
  uint64_t scratch, stage_in, stage_out;
  uint64_t max_in, max_out, tail;
};
void verify_world_needs(const struct vopts* o, const struct shunt_plan* plan, const struct shape* shapes,
                        unsigned nshapes, struct verify_needs* n);

/* Results, as the host runner's: 0 pass, 1 mismatch, 2 timeout, 3 error. */
enum { VERIFY_PASS = 0, VERIFY_MISMATCH = 1, VERIFY_TIMEOUT = 2, VERIFY_ERROR = 3 };

/* Runs the shapes on the GPU backend's kernel compiled for the CPU, every rank a thread of
 * this process, once per thread count of o->threads: o->iters executions per shape back to
 * back on each rank (no barrier between them, as on a stream), each with new inputs, every
 * output compared with the reference afterwards. Progress on stderr; the first failure in msg. */
int verify_kcpu_plan(const struct vopts* o, const struct shunt_plan* plan, const struct shape* shapes,
                     unsigned nshapes, char* msg, size_t len);

#endif
