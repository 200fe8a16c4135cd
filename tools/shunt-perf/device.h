/* Where shunt-perf's buffers live and how it waits for work: every allocation, copy and
 * synchronisation goes through here, so the benchmark is the same on both.
 *
 * - gpu: when the CUDA driver can be loaded and has a device (unless SHUNT_PERF_DEVICE=host):
 *   rank r uses device r mod the device count, buffers in its memory, calls on a stream of the
 *   rank's own; graphs capture a loop of calls and replay it.
 * - host: host memory, no stream; every call on shunt's host backend has completed when it
 *   returns. SHUNT_PERF_DEVICE=host forces it.
 * State is per rank thread (ranks may be threads of one process). */
#ifndef SHUNT_PERF_DEVICE_H
#define SHUNT_PERF_DEVICE_H

#include <nccl.h>
#include <stddef.h>

struct perf_device {
  int index;     /* device number, -1 for host memory */
  char name[64]; /* e.g. "host backend" */
};

/* Selects this rank's device; must not run before the process forks into ranks. 0, or -1
 * with a message on stderr. */
int perf_dev_init(int rank, struct perf_device* dev);
/* Releases what init made (the stream). */
void perf_dev_fini(void);
void* perf_dev_alloc(size_t bytes); /* 64-byte aligned; NULL on failure */
void perf_dev_free(void* p);
void perf_dev_upload(void* dst, const void* host_src, size_t bytes);
void perf_dev_download(void* host_dst, const void* src, size_t bytes);
cudaStream_t perf_dev_stream(void);
int perf_dev_sync(void); /* waits for the stream; 0 on success */
int perf_dev_graphs_supported(void);
/* Graphs: begin capturing the stream, end into an executable graph, launch it, free it. */
int perf_dev_graph_begin(void);
int perf_dev_graph_end(void** exec);
int perf_dev_graph_launch(void* exec);
void perf_dev_graph_free(void* exec);

#endif
