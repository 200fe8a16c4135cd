/* Block size for co-residency (gpu_residency.h). */
#include "exec/gpu/gpu_residency.h"

#include <stdio.h>

#include "exec/gpu/gpu_abi.h"

uint32_t shunt_gpu_pick_threads(uint32_t nblocks, uint32_t sharing, uint32_t plan_threads,
                                uint32_t max_threads, shunt_gpu_capacity_fn capacity, void* ctx, char* err,
                                size_t len) {
  if (err && len) err[0] = 0;
  uint32_t t = plan_threads ? plan_threads : SHUNT_GPU_MAX_THREADS;
  if (max_threads && t > max_threads) t = max_threads;
  if (t > SHUNT_GPU_MAX_THREADS) t = SHUNT_GPU_MAX_THREADS;
  if (t > 32) t &= ~31u; /* whole warps */
  if (sharing == 0) sharing = 1;
  uint64_t need = (uint64_t)(nblocks ? nblocks : 1) * sharing;
  uint32_t cap = 0, tried = t;
  while (t > 0) {
    if (capacity(ctx, t, &cap) != 0) {
      if (err && len) snprintf(err, len, "cannot query the device's occupancy at %u threads per block", t);
      return 0;
    }
    if (need <= cap) return t;
    tried = t;
    if (t <= 32) break;
    t = t / 2 > 32 ? (t / 2) & ~31u : 32;
  }
  if (err && len)
    snprintf(err, len,
             "%u block(s) x %u rank(s) sharing the GPU cannot all be resident at once: at most %u blocks "
             "of %u threads fit",
             nblocks, sharing, cap, tried);
  return 0;
}
