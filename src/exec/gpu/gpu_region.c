/* The region layout of the GPU backend (gpu_region.h). */
#include "exec/gpu/gpu_region.h"

#include <stddef.h>
#include <string.h>

static uint64_t align_up(uint64_t x) {
  return (x + SHUNT_GPU_ALIGN - 1) / SHUNT_GPU_ALIGN * SHUNT_GPU_ALIGN;
}

void shunt_gpu_region_layout(struct shunt_gpu_layout* L, uint32_t nranks, uint64_t scratch_bytes,
                             uint64_t input_bytes, uint64_t output_bytes) {
  uint64_t counters = (uint64_t)2 * nranks * SHUNT_GPU_ORDINALS * sizeof(uint64_t);
  uint64_t at = 0;
  L->ctrl = at;
  at += align_up(sizeof(struct shunt_gpu_ctrl));
  L->inbound = at;
  at += align_up(counters);
  L->expected = at;
  at += align_up(counters);
  L->peers = at;
  at += align_up((uint64_t)nranks * sizeof(uint64_t));
  L->scratch = at;
  L->scratch_bytes = align_up(scratch_bytes);
  at += L->scratch_bytes;
  L->input = at;
  at += align_up(input_bytes);
  L->output = at;
  at += align_up(output_bytes);
  L->total = at;
  L->input_bytes = input_bytes;
  L->output_bytes = output_bytes;
}

void shunt_gpu_kargs_world(struct shunt_gpu_kargs* k, char* region, const struct shunt_gpu_layout* lay,
                           struct shunt_gpu_fifo* fifo, uint64_t timeout_ns, uint32_t rank, uint32_t nranks) {
  k->region = region;
  k->peers = (const uint64_t*)(region + lay->peers);
  k->abort = (uint32_t*)(region + shunt_gpu_abort_offset(lay));
  k->fifo = fifo;
  k->lay = *lay;
  k->timeout_ns = timeout_ns;
  k->rank = rank;
  k->nranks = nranks;
  k->xout = NULL;
  k->xin = NULL;
  k->xin_data = NULL;
}
