/* Device helpers of test_exec_gpu (test_exec_gpu_dev.cu), callable from C. */
#ifndef SHUNT_TESTS_GPU_TEST_EXEC_GPU_H
#define SHUNT_TESTS_GPU_TEST_EXEC_GPU_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Adds to *bad (device) the number of bytes where got and want (device) differ; a stream
 * operation, so it may be captured. Returns a cudaError_t. */
int shunt_test_compare(const void* got, const void* want, uint64_t n, unsigned long long* bad,
                       cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
