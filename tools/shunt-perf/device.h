/* Where shunt-perf's buffers live and how it waits for work: every allocation, copy and
 * synchronisation goes through here, so the benchmark is the same on both.
 *
 * - gpu: when the CUDA driver can be loaded and has a device (unless SHUNT_PERF_DEVICE=host):
 *   rank r uses device r mod the device count, buffers in its memory, calls on a stream of the
 *   rank's own; graphs capture a loop of calls and replay it.
 * - host: host memory, no stream; every call on shunt's host backend has completed when it
 *   returns. SHUNT_PERF_DEVICE=host forces it.
 * One perf_dev per rank; a thread may drive several ranks (-g), each on its own device handle:
 * every call here makes that rank's device current first. */
#ifndef SHUNT_PERF_DEVICE_H
#define SHUNT_PERF_DEVICE_H

#include <nccl.h>
#include <stddef.h>

struct perf_device {
  int index;     /* device number, -1 for host memory */
  char name[64]; /* e.g. "host backend" */
};

struct perf_dev;

/* Opens this rank's device (and stream); must not run before the process forks into ranks.
 * 0 with *out set, or -1 with a message on stderr. */
int perf_dev_open(int rank, struct perf_dev** out, struct perf_device* info);
/* Makes the rank's device the calling thread's current one (for NCCL calls that take it
 * from the thread, such as ncclCommInitRank). */
void perf_dev_make_current(struct perf_dev* d);
/* Releases what open made. */
void perf_dev_close(struct perf_dev* d);
void* perf_dev_alloc(struct perf_dev* d, size_t bytes); /* 64-byte aligned; NULL on failure */
void perf_dev_free(struct perf_dev* d, void* p);
void perf_dev_upload(struct perf_dev* d, void* dst, const void* host_src, size_t bytes);
void perf_dev_download(struct perf_dev* d, void* host_dst, const void* src, size_t bytes);
cudaStream_t perf_dev_stream(struct perf_dev* d);
int perf_dev_record(struct perf_dev* d); /* an event on the stream after a call; 0 on success */
int perf_dev_sync(struct perf_dev* d); /* waits for the stream; 0 on success */
int perf_dev_graphs_supported(void);
/* Graphs: begin capturing the stream, end into an executable graph, launch it, free it. */
int perf_dev_graph_begin(struct perf_dev* d);
int perf_dev_graph_end(struct perf_dev* d, void** exec);
int perf_dev_graph_launch(struct perf_dev* d, void* exec);
void perf_dev_graph_free(struct perf_dev* d, void* exec);

#endif
