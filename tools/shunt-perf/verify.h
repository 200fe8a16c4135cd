/* Inputs and expected outputs for the correctness check. Inputs are small integers that
 * depend on rank and index and are chosen so that every result is exact in every type and
 * independent of reduction order:
 *   sum, avg, mulsum: 0 or 1, with at most 4 ones across ranks at any index
 *   prod: 1 or 2, with at most 4 twos (products up to 16)
 *   min, max: 0..4
 *   allgather: 0..7
 *   alltoall: 0..7, from the sender, the receiver and the position in the block
 * mulsum multiplies rank r's input by 1 + (r & 1), so its sums stay at most 8, which even
 * fp8 e5m2 holds exactly. Outputs compare bit for bit, except floating avg, where NCCL's
 * pre-multiplication by 1/n may be 2 ulp off (as nccl-tests allows). */
#ifndef SHUNT_PERF_VERIFY_H
#define SHUNT_PERF_VERIFY_H

#include <nccl.h>
#include <stddef.h>
#include <stdint.h>

#include "options.h"

struct perf_case {
  int coll; /* PERF_COLL_ALLREDUCE, _ALLGATHER, _REDUCESCATTER, _ALLTOALL, _BROADCAST or _REDUCE */
  ncclDataType_t type;
  int op; /* ncclRedOp_t or PERF_OP_MULSUM; unused for allgather */
  int rank, nranks;
  size_t count; /* NCCL's count argument: elements per rank for allgather and reducescatter, per
                   peer for alltoall */
  int root;     /* broadcast */
};

/* Elements of a rank's input and output. */
size_t perf_in_count(const struct perf_case* c);
size_t perf_out_count(const struct perf_case* c);
/* Whether the collective takes a reduction op. */
int perf_reduces(int coll);
/* Whether the collective takes a root (broadcast, reduce). */
int perf_rooted(int coll);
/* The collective's name as nccl-tests' tables give it. */
const char* perf_coll_name(int coll);
/* Writes rank's input (perf_in_count elements) into host memory. A reducescatter's input is
 * an allreduce's of ranks x count elements, of which rank r keeps slice r. A broadcast's is the
 * allgather's contribution of the rank: every rank's output must be the root's. */
void perf_fill_input(const struct perf_case* c, void* host);
/* The mulsum scalar of this rank, encoded in the case's type. */
uint64_t perf_mulsum_scalar(const struct perf_case* c);
/* Wrong elements in host, this rank's output (perf_out_count elements). */
int64_t perf_count_wrong(const struct perf_case* c, const void* host);

#endif
