/* Device side of test_exec_gpu: the comparison that runs inside captured graphs, so every
 * replay is checked on the device, not only the last one. */
#include <cuda_runtime_api.h>
#include <stdint.h>

#include "gpu/test_exec_gpu.h"

extern "C" __global__ void shunt_test_cmp_kernel(const unsigned char* got, const unsigned char* want,
                                                 uint64_t n, unsigned long long* bad) {
  unsigned long long mine = 0;
  for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (uint64_t)gridDim.x * blockDim.x)
    mine += got[i] != want[i];
  if (mine) atomicAdd(bad, mine);
}

extern "C" int shunt_test_compare(const void* got, const void* want, uint64_t n, unsigned long long* bad,
                                  cudaStream_t s) {
  uint64_t g = (n + 255) / 256;
  unsigned grid = (unsigned)(g == 0 ? 1 : g > 512 ? 512 : g);
  shunt_test_cmp_kernel<<<grid, 256, 0, s>>>((const unsigned char*)got, (const unsigned char*)want, n, bad);
  return (int)cudaGetLastError();
}
