/* The host variant of shunt-perf's device: plain 64-byte aligned memory and no stream,
 * since every call on the host backend is complete when it returns. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"

int perf_dev_init(int local_rank, struct perf_device* dev) {
  (void)local_rank;
  dev->index = -1;
  snprintf(dev->name, sizeof(dev->name), "host backend");
  return 0;
}

void* perf_dev_alloc(size_t bytes) {
  void* p = NULL;
  /* round up: aligned_alloc wants a multiple of the alignment, and a zero size may give NULL */
  size_t n = (bytes + 63) & ~(size_t)63;
  if (posix_memalign(&p, 64, n ? n : 64) != 0) return NULL;
  return p;
}

void perf_dev_free(void* p) {
  free(p);
}
void perf_dev_upload(void* dst, const void* host_src, size_t bytes) {
  memcpy(dst, host_src, bytes);
}
void perf_dev_download(void* host_dst, const void* src, size_t bytes) {
  memcpy(host_dst, src, bytes);
}
cudaStream_t perf_dev_stream(void) {
  return NULL;
}
int perf_dev_sync(void) {
  return 0;
}
int perf_dev_graphs_supported(void) {
  return 0;
}
