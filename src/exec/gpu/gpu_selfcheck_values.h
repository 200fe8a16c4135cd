/* The self-check's values (gpu_selfcheck.c fills inputs with them on the host; the check kernel
 * recomputes what a correct result holds on the device). Small integers: every float sum over
 * ranks is exact in any order. C11 and CUDA C. */
#ifndef SHUNT_EXEC_GPU_SELFCHECK_VALUES_H
#define SHUNT_EXEC_GPU_SELFCHECK_VALUES_H

#include <stdint.h>

#include "exec/gpu/gpu_abi.h"

/* Rank r's input element i. */
SHUNT_GPU_HD float shunt_selfcheck_value(uint32_t r, uint64_t i) {
  return (float)((r * 131u + i * 7u) % 251u);
}

/* What the check kernel compares with (its `kind`): the collective in the low three bits, and
 * above them a rank where that matters (reducescatter: the rank whose slice of the sum it is;
 * broadcast: the root). */
#define SHUNT_SELFCHECK_ALLREDUCE 0u
#define SHUNT_SELFCHECK_ALLGATHER 1u
#define SHUNT_SELFCHECK_REDUCESCATTER 2u
#define SHUNT_SELFCHECK_BROADCAST 3u
#define SHUNT_SELFCHECK_ALLTOALL 4u
#define SHUNT_SELFCHECK_KIND(coll, rank) ((coll) | ((uint32_t)(rank) << 3))

/* Element i of a correct result, per = elements of a rank's slice: allreduce (the sum over the
 * ranks, in rank order), allgather (rank i / per's element i % per), reducescatter of rank q
 * (the sum of the ranks' elements q x per + i), broadcast from root q (q's element i),
 * alltoall of rank q (block j = i / per is rank j's element q x per + i % per). */
SHUNT_GPU_HD float shunt_selfcheck_expected(uint32_t nranks, uint64_t per, uint32_t kind, uint64_t i) {
  if ((kind & 7u) == SHUNT_SELFCHECK_ALLGATHER) return shunt_selfcheck_value((uint32_t)(i / per), i % per);
  if ((kind & 7u) == SHUNT_SELFCHECK_BROADCAST) return shunt_selfcheck_value(kind >> 3, i);
  if ((kind & 7u) == SHUNT_SELFCHECK_ALLTOALL)
    return shunt_selfcheck_value((uint32_t)(i / per), (uint64_t)(kind >> 3) * per + i % per);
  if ((kind & 7u) == SHUNT_SELFCHECK_REDUCESCATTER) i += (uint64_t)(kind >> 3) * per;
  float want = 0;
  for (uint32_t r = 0; r < nranks; r++) want += shunt_selfcheck_value(r, i);
  return want;
}

#endif
