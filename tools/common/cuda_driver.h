/* The CUDA driver calls shunt's tools and benchmarks make (shunt-perf's device layer,
 * bench/gpu/gpu_ratios), opened at run time so that one binary runs with or without a GPU.
 * The signatures are cuda.h's ABI, written out so that no CUDA header is needed to build. */
#ifndef SHUNT_TOOLS_CUDA_DRIVER_H
#define SHUNT_TOOLS_CUDA_DRIVER_H

#include <stddef.h>

struct tool_cuda {
  int (*Init)(unsigned);
  int (*DeviceGetCount)(int*);
  int (*DeviceGetName)(char*, int, int);
  int (*DevicePrimaryCtxRetain)(void**, int);
  int (*CtxSetCurrent)(void*);
  int (*MemAlloc)(unsigned long long*, size_t);
  int (*MemFree)(unsigned long long);
  int (*MemcpyHtoD)(unsigned long long, const void*, size_t);
  int (*MemcpyDtoH)(void*, unsigned long long, size_t);
  int (*MemsetD8Async)(unsigned long long, unsigned char, size_t, void*);
  int (*MemcpyDtoDAsync)(unsigned long long, unsigned long long, size_t, void*);
  int (*StreamCreate)(void**, unsigned);
  int (*StreamDestroy)(void*);
  int (*StreamSynchronize)(void*);
  int (*StreamBeginCapture)(void*, int);
  int (*StreamEndCapture)(void*, void**);
  int (*GraphInstantiate)(void**, void*, unsigned long long);
  int (*GraphLaunch)(void*, void*);
  int (*GraphDestroy)(void*);
  int (*GraphExecDestroy)(void*);
  int (*ModuleLoadData)(void**, const void*);
  int (*ModuleGetFunction)(void**, void*, const char*);
  int (*LaunchKernel)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*,
                      void**, void**);
  int (*MemcpyHtoDAsync)(unsigned long long, const void*, size_t, void*);
  int (*MemcpyDtoHAsync)(void*, unsigned long long, size_t, void*);
  int (*EventCreate)(void**, unsigned);
  int (*EventRecord)(void*, void*);
  int (*EventDestroy)(void*);
};

/* Opens libcuda.so.1, finds every call and initialises the driver. Returns the device count
 * (> 0) with *d filled; 0 when there is no driver or no device; -1 when the driver lacks a call
 * (its name in missing) or cuInit failed. *d is zeroed unless the result is > 0. */
int tool_cuda_open(struct tool_cuda* d, char* missing, size_t len);

#endif
