/* See cuda_driver.h. */
#include "cuda_driver.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

int tool_cuda_open(struct tool_cuda* d, char* missing, size_t len) {
  /* In the order of struct tool_cuda's fields; versioned names where the driver has them. */
  static const char* const names[] = {"cuInit",
                                      "cuDeviceGetCount",
                                      "cuDeviceGetName",
                                      "cuDevicePrimaryCtxRetain",
                                      "cuCtxSetCurrent",
                                      "cuMemAlloc_v2",
                                      "cuMemFree_v2",
                                      "cuMemcpyHtoD_v2",
                                      "cuMemcpyDtoH_v2",
                                      "cuMemsetD8Async",
                                      "cuMemcpyDtoDAsync_v2",
                                      "cuStreamCreate",
                                      "cuStreamDestroy_v2",
                                      "cuStreamSynchronize",
                                      "cuStreamBeginCapture_v2",
                                      "cuStreamEndCapture",
                                      "cuGraphInstantiateWithFlags",
                                      "cuGraphLaunch",
                                      "cuGraphDestroy",
                                      "cuGraphExecDestroy",
                                      "cuModuleLoadData",
                                      "cuModuleGetFunction",
                                      "cuLaunchKernel",
                                      "cuMemcpyHtoDAsync_v2",
                                      "cuMemcpyDtoHAsync_v2",
                                      "cuEventCreate",
                                      "cuEventRecord",
                                      "cuEventDestroy_v2"};
  _Static_assert(sizeof(names) / sizeof(names[0]) == sizeof(struct tool_cuda) / sizeof(void (*)(void)),
                 "one name per call of struct tool_cuda");
  memset(d, 0, sizeof(*d));
  if (missing && len) missing[0] = 0;
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!h) return 0;
  void** slots = (void**)d;
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
    if (!(slots[i] = dlsym(h, names[i]))) {
      if (missing && len) snprintf(missing, len, "%s", names[i]);
      memset(d, 0, sizeof(*d));
      return -1;
    }
  int n = 0;
  if (d->Init(0) != 0) {
    memset(d, 0, sizeof(*d));
    return -1;
  }
  if (d->DeviceGetCount(&n) != 0 || n < 1) {
    memset(d, 0, sizeof(*d));
    return 0;
  }
  return n;
}
