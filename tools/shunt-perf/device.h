/* Where shunt-perf's buffers live and how it waits for work: every allocation, copy and
 * synchronisation goes through here so that a CUDA variant (device_cuda.c, built with
 * SHUNT_PERF_CUDA) can replace the host one without touching the benchmark.
 *
 * The host variant serves shunt's host backend, where the NCCL API takes host pointers and
 * every call has completed when it returns. */
#ifndef SHUNT_PERF_DEVICE_H
#define SHUNT_PERF_DEVICE_H

#include <nccl.h>
#include <stddef.h>

struct perf_device {
  int index;     /* device number, -1 for host memory */
  char name[64]; /* e.g. "host backend" */
};

/* Selects this rank's device; must not run before the process forks into ranks. */
int perf_dev_init(int local_rank, struct perf_device* dev);
void* perf_dev_alloc(size_t bytes); /* 64-byte aligned; NULL on failure */
void perf_dev_free(void* p);
void perf_dev_upload(void* dst, const void* host_src, size_t bytes);
void perf_dev_download(void* host_dst, const void* src, size_t bytes);
cudaStream_t perf_dev_stream(void);
int perf_dev_sync(void); /* waits for the stream; 0 on success */
int perf_dev_graphs_supported(void);

#endif
