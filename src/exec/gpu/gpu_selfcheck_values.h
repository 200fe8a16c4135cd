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

/* Element i of a correct result: allreduce (sum over the ranks, in rank order) or allgather
 * (rank i / per's element i % per), per = elements per rank. */
SHUNT_GPU_HD float shunt_selfcheck_expected(uint32_t nranks, uint64_t per, int allgather, uint64_t i) {
  if (allgather) return shunt_selfcheck_value((uint32_t)(i / per), i % per);
  float want = 0;
  for (uint32_t r = 0; r < nranks; r++) want += shunt_selfcheck_value(r, i);
  return want;
}

#endif
