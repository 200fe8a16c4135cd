/* shunt-perf's device (device.h): GPU memory through the CUDA driver when there is one, host
 * memory otherwise. The driver is opened at run time, so one binary serves both. */
#include "device.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_driver.h"

static struct tool_cuda D;
static int ndev; /* 0: host memory */
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void load(void) {
  const char* want = getenv("SHUNT_PERF_DEVICE");
  if (want && !strcmp(want, "host")) return;
  int n = tool_cuda_open(&D, NULL, 0); /* a driver without a call shunt-perf makes: host memory */
  ndev = n > 0 ? n : 0;
}

struct perf_dev {
  int index; /* -1: host memory */
  void* ctx;
  void* stream;
  void* event; /* recorded on the stream after every call, as PyTorch does */
};

int perf_dev_open(int rank, struct perf_dev** out, struct perf_device* info) {
  pthread_once(&once, load);
  struct perf_dev* d = calloc(1, sizeof(*d));
  *out = NULL;
  if (!d) {
    fprintf(stderr, "shunt-perf: rank %d: out of memory\n", rank);
    return -1;
  }
  d->index = -1;
  if (!ndev) {
    info->index = -1;
    snprintf(info->name, sizeof(info->name), "host backend");
    *out = d;
    return 0;
  }
  int n = rank % ndev;
  if (D.DevicePrimaryCtxRetain(&d->ctx, n) != 0 || D.CtxSetCurrent(d->ctx) != 0 ||
      D.StreamCreate(&d->stream, 1) != 0 || D.EventCreate(&d->event, 2 /* CU_EVENT_DISABLE_TIMING */) != 0) {
    fprintf(stderr, "shunt-perf: rank %d: cannot use CUDA device %d\n", rank, n);
    free(d);
    return -1;
  }
  d->index = n;
  info->index = n;
  if (D.DeviceGetName(info->name, (int)sizeof(info->name), n) != 0)
    snprintf(info->name, sizeof(info->name), "GPU");
  *out = d;
  return 0;
}

/* Every device call below is made with the rank's context current: one thread may drive
 * ranks on several devices. Setting a context is a thread-local store in the driver. */
static int on(struct perf_dev* d) {
  return d->index >= 0 && D.CtxSetCurrent(d->ctx) == 0;
}

void perf_dev_make_current(struct perf_dev* d) {
  if (d) (void)on(d);
}

void perf_dev_close(struct perf_dev* d) {
  if (!d) return;
  if (on(d) && d->event) D.EventDestroy(d->event);
  if (on(d) && d->stream) D.StreamDestroy(d->stream);
  free(d);
}

void* perf_dev_alloc(struct perf_dev* d, size_t bytes) {
  size_t n = (bytes + 63) & ~(size_t)63;
  if (d->index >= 0) {
    unsigned long long p = 0;
    return on(d) && D.MemAlloc(&p, n ? n : 64) == 0 ? (void*)(uintptr_t)p : NULL;
  }
  void* p = NULL;
  /* round up: aligned_alloc wants a multiple of the alignment, and a zero size may give NULL */
  if (posix_memalign(&p, 64, n ? n : 64) != 0) return NULL;
  return p;
}

void perf_dev_free(struct perf_dev* d, void* p) {
  if (!p) return;
  if (d->index < 0)
    free(p);
  else if (on(d))
    D.MemFree((uintptr_t)p);
}

/* Copies go on the rank's stream, ordered after its work, and are waited for. */
void perf_dev_upload(struct perf_dev* d, void* dst, const void* host_src, size_t bytes) {
  if (d->index < 0) {
    memcpy(dst, host_src, bytes);
    return;
  }
  /* On the rank's stream, never a synchronous copy: that waits for every stream of the context,
   * including another rank's kernel that waits for this rank's next call. */
  if (!on(d) || D.MemcpyHtoDAsync((uintptr_t)dst, host_src, bytes, d->stream) != 0 ||
      D.StreamSynchronize(d->stream) != 0)
    fprintf(stderr, "shunt-perf: copy to the device failed\n");
}

void perf_dev_download(struct perf_dev* d, void* host_dst, const void* src, size_t bytes) {
  if (d->index < 0) {
    memcpy(host_dst, src, bytes);
    return;
  }
  if (!on(d) || D.MemcpyDtoHAsync(host_dst, (uintptr_t)src, bytes, d->stream) != 0 ||
      D.StreamSynchronize(d->stream) != 0) {
    fprintf(stderr, "shunt-perf: copy from the device failed\n");
    memset(host_dst, 0xee, bytes); /* counted wrong, never taken for a result */
  }
}

/* PyTorch records an event on the stream after every collective (its work object waits on
 * it): that record sits behind the call's kernel in the stream's hardware queue, so work
 * another stream of that queue queues later cannot start before the kernel ends. */
int perf_dev_record(struct perf_dev* d) {
  return !on(d) || D.EventRecord(d->event, d->stream) == 0 ? 0 : -1;
}

cudaStream_t perf_dev_stream(struct perf_dev* d) {
  return (cudaStream_t)d->stream;
}

int perf_dev_sync(struct perf_dev* d) {
  if (d->index < 0) return 0;
  return on(d) && D.StreamSynchronize(d->stream) == 0 ? 0 : -1;
}

int perf_dev_graphs_supported(void) {
  pthread_once(&once, load);
  return ndev > 0;
}

int perf_dev_graph_begin(struct perf_dev* d) {
  /* Thread-local, as nccl-tests with several threads: another rank thread's synchronous calls
   * must not invalidate this capture. */
  return on(d) && D.StreamBeginCapture(d->stream, 1) == 0 ? 0 : -1;
}

int perf_dev_graph_end(struct perf_dev* d, void** exec) {
  void* g = NULL;
  *exec = NULL;
  if (!on(d) || D.StreamEndCapture(d->stream, &g) != 0 || !g) return -1;
  int rc = D.GraphInstantiate(exec, g, 0) == 0 ? 0 : -1;
  D.GraphDestroy(g);
  return rc;
}

int perf_dev_graph_launch(struct perf_dev* d, void* exec) {
  return on(d) && D.GraphLaunch(exec, d->stream) == 0 ? 0 : -1;
}

void perf_dev_graph_free(struct perf_dev* d, void* exec) {
  if (exec && on(d)) D.GraphExecDestroy(exec);
}
