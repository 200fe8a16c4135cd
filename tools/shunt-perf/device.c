/* shunt-perf's device (device.h): GPU memory through the CUDA driver when there is one, host
 * memory otherwise. The driver is opened at run time, so one binary serves both. */
#include "device.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The driver calls used here (cuda.h's ABI). */
struct drv {
  int (*Init)(unsigned);
  int (*DeviceGetCount)(int*);
  int (*DeviceGetName)(char*, int, int);
  int (*DevicePrimaryCtxRetain)(void**, int);
  int (*CtxSetCurrent)(void*);
  int (*MemAlloc)(unsigned long long*, size_t);
  int (*MemFree)(unsigned long long);
  int (*MemcpyHtoD)(unsigned long long, const void*, size_t);
  int (*MemcpyDtoH)(void*, unsigned long long, size_t);
  int (*StreamCreate)(void**, unsigned);
  int (*StreamDestroy)(void*);
  int (*StreamSynchronize)(void*);
  int (*StreamBeginCapture)(void*, int);
  int (*StreamEndCapture)(void*, void**);
  int (*GraphInstantiate)(void**, void*, unsigned long long);
  int (*GraphLaunch)(void*, void*);
  int (*GraphDestroy)(void*);
  int (*GraphExecDestroy)(void*);
};

static struct drv D;
static int ndev; /* 0: host memory */
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void load(void) {
  const char* want = getenv("SHUNT_PERF_DEVICE");
  if (want && !strcmp(want, "host")) return;
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!h) return;
  static const char* const names[] = {"cuInit",
                                      "cuDeviceGetCount",
                                      "cuDeviceGetName",
                                      "cuDevicePrimaryCtxRetain",
                                      "cuCtxSetCurrent",
                                      "cuMemAlloc_v2",
                                      "cuMemFree_v2",
                                      "cuMemcpyHtoD_v2",
                                      "cuMemcpyDtoH_v2",
                                      "cuStreamCreate",
                                      "cuStreamDestroy_v2",
                                      "cuStreamSynchronize",
                                      "cuStreamBeginCapture_v2",
                                      "cuStreamEndCapture",
                                      "cuGraphInstantiateWithFlags",
                                      "cuGraphLaunch",
                                      "cuGraphDestroy",
                                      "cuGraphExecDestroy"};
  void** slots = (void**)&D;
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
    if (!(slots[i] = dlsym(h, names[i]))) {
      memset(&D, 0, sizeof(D));
      return;
    }
  int n = 0;
  if (D.Init(0) != 0 || D.DeviceGetCount(&n) != 0 || n < 1) return;
  ndev = n;
}

/* This rank thread's stream (NULL on host memory). */
static _Thread_local void* stream;

int perf_dev_init(int rank, struct perf_device* dev) {
  pthread_once(&once, load);
  if (!ndev) {
    dev->index = -1;
    snprintf(dev->name, sizeof(dev->name), "host backend");
    return 0;
  }
  int d = rank % ndev;
  void* ctx = NULL;
  if (D.DevicePrimaryCtxRetain(&ctx, d) != 0 || D.CtxSetCurrent(ctx) != 0 || D.StreamCreate(&stream, 1) != 0) {
    fprintf(stderr, "shunt-perf: rank %d: cannot use CUDA device %d\n", rank, d);
    return -1;
  }
  dev->index = d;
  if (D.DeviceGetName(dev->name, (int)sizeof(dev->name), d) != 0) snprintf(dev->name, sizeof(dev->name), "GPU");
  return 0;
}

void perf_dev_fini(void) {
  if (ndev && stream) D.StreamDestroy(stream);
  stream = NULL;
}

void* perf_dev_alloc(size_t bytes) {
  size_t n = (bytes + 63) & ~(size_t)63;
  if (ndev) {
    unsigned long long d = 0;
    return D.MemAlloc(&d, n ? n : 64) == 0 ? (void*)(uintptr_t)d : NULL;
  }
  void* p = NULL;
  /* round up: aligned_alloc wants a multiple of the alignment, and a zero size may give NULL */
  if (posix_memalign(&p, 64, n ? n : 64) != 0) return NULL;
  return p;
}

void perf_dev_free(void* p) {
  if (!p) return;
  if (ndev)
    D.MemFree((uintptr_t)p);
  else
    free(p);
}

/* Copies happen with the stream drained, so a synchronous copy is ordered after its work. */
void perf_dev_upload(void* dst, const void* host_src, size_t bytes) {
  if (!ndev) {
    memcpy(dst, host_src, bytes);
    return;
  }
  if (D.StreamSynchronize(stream) != 0 || D.MemcpyHtoD((uintptr_t)dst, host_src, bytes) != 0)
    fprintf(stderr, "shunt-perf: copy to the device failed\n");
}

void perf_dev_download(void* host_dst, const void* src, size_t bytes) {
  if (!ndev) {
    memcpy(host_dst, src, bytes);
    return;
  }
  if (D.StreamSynchronize(stream) != 0 || D.MemcpyDtoH(host_dst, (uintptr_t)src, bytes) != 0) {
    fprintf(stderr, "shunt-perf: copy from the device failed\n");
    memset(host_dst, 0xee, bytes); /* counted wrong, never taken for a result */
  }
}

cudaStream_t perf_dev_stream(void) {
  return (cudaStream_t)stream;
}

int perf_dev_sync(void) {
  return ndev ? (D.StreamSynchronize(stream) == 0 ? 0 : -1) : 0;
}

int perf_dev_graphs_supported(void) {
  pthread_once(&once, load);
  return ndev > 0;
}

int perf_dev_graph_begin(void) {
  /* Thread-local, as nccl-tests with several threads: another rank thread's synchronous calls
   * must not invalidate this capture. */
  return ndev && D.StreamBeginCapture(stream, 1) == 0 ? 0 : -1;
}

int perf_dev_graph_end(void** exec) {
  void* g = NULL;
  *exec = NULL;
  if (!ndev || D.StreamEndCapture(stream, &g) != 0 || !g) return -1;
  int rc = D.GraphInstantiate(exec, g, 0) == 0 ? 0 : -1;
  D.GraphDestroy(g);
  return rc;
}

int perf_dev_graph_launch(void* exec) {
  return D.GraphLaunch(exec, stream) == 0 ? 0 : -1;
}

void perf_dev_graph_free(void* exec) {
  if (exec) D.GraphExecDestroy(exec);
}
