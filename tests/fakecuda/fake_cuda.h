/* A stand-in for the CUDA driver (soname libcuda.so.1) for tests without a GPU: the calls shunt
 * makes, with host memory as device memory, streams as in-order queues each served by a thread,
 * events, graph capture and replay, CUDA IPC between processes (memory is a memfd mapped by
 * the peer), and shunt's kernels run by the CPU build of their code (exec/kcpu). Internal
 * declarations shared by its files.
 *
 * What it models and what not:
 * - Devices: FAKECUDA_DEVICES per process (default 1). Each process's devices have bus ids of
 *   their own (the domain is the pid), so ranks in different processes sit on different GPUs;
 *   ranks as threads share device 0 unless a test gives them others. Peer access and native
 *   peer atomics exist between every pair.
 * - Occupancy: a device of FAKECUDA_SMS (default 8) multiprocessors, each holding 16 blocks of
 *   at most FAKECUDA_MAX_THREADS (default 32) threads, and none larger: the executor's blocks
 *   are host threads, so they stay few.
 * - The grid-stride scaling kernels run on a small grid whatever was asked, and the executor
 *   kernel runs its blocks as launched but each with at most FAKECUDA_RUN_THREADS (default 4)
 *   of the threads asked for: every op of the kernel strides over the block, so results do not
 *   depend on the block size (shunt-plan verify --backend kernel-cpu checks 1, 3 and 32), and a
 *   block of host threads costs a core's time on every wait.
 * - Capture: an operation on a capturing stream is recorded into its graph; a synchronizing
 *   call (allocation, free, stream synchronize) from a thread not in relaxed mode while any
 *   stream captures in global mode fails with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and
 *   invalidates that capture, as the driver does.
 * - Faults (FAKECUDA_FAULT, or fakecuda_fault()): "corrupt:N" flips a byte of the output of the
 *   Nth executor launch of the process; "skip:N" does not run the Nth executor launch at all
 *   (its signals never come). */
#ifndef FAKECUDA_FAKE_CUDA_H
#define FAKECUDA_FAKE_CUDA_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FC_EXPORT __attribute__((visibility("default")))

enum {
  FC_SUCCESS = 0,
  FC_ERROR_INVALID_VALUE = 1,
  FC_ERROR_OUT_OF_MEMORY = 2,
  FC_ERROR_NOT_INITIALIZED = 3,
  FC_ERROR_INVALID_DEVICE = 101,
  FC_ERROR_INVALID_IMAGE = 200,
  FC_ERROR_INVALID_CONTEXT = 201,
  FC_ERROR_INVALID_HANDLE = 400,
  FC_ERROR_ILLEGAL_STATE = 401,
  FC_ERROR_NOT_FOUND = 500,
  FC_ERROR_NOT_READY = 600,
  FC_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704,
  FC_ERROR_LAUNCH_FAILED = 719,
  FC_ERROR_NOT_SUPPORTED = 801,
  FC_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900,
  FC_ERROR_STREAM_CAPTURE_INVALIDATED = 901,
  FC_ERROR_STREAM_CAPTURE_WRONG_THREAD = 908
};

#define FC_MAX_DEVICES 8

struct fc_ctx {
  int device;
  int peer_enabled[FC_MAX_DEVICES];
};

struct fc_stream;
struct fc_graph;

/* fc_core.c */
int fc_devices(void);
struct fc_ctx* fc_ctx_of(int device);
struct fc_ctx* fc_current(void);
int fc_max_threads(void);
int fc_run_threads(void);
/* The fault for the n-th executor launch of the process (1-based): 0 none, 'c' corrupt, 's' skip. */
int fc_fault_for(long n);

/* Whether the test named this rule's leniency in FAKECUDA_LENIENT (a comma-separated list). */
bool fc_lenient(const char* rule);

/* fc_stream.c: the context lock (one per device's primary context, as the driver has). enter
 * takes it (a thread may take it again); with drain it also waits until every operation already
 * queued on the context's streams has run, as a lazy load or a synchronizing call does. gate
 * waits while another thread holds it: every other call of the context does. device < 0 or the
 * leniency "ctxlock": nothing. */
void fc_ctx_enter(int device, bool drain);
void fc_ctx_leave(int device);
void fc_ctx_gate(int device);

/* fc_mem.c */
/* Device of an allocation holding p, or -1. */
int fc_mem_device(const void* p);

/* fc_stream.c: whether a synchronizing call may proceed now (see capture above); invalidates
 * the global capture when not. */
bool fc_sync_allowed(void);

/* fc_module.c */
enum fc_kernel { FC_K_EXEC = 1, FC_K_PRE, FC_K_POST, FC_K_EMPTY /* a benchmark's empty kernel */, FC_K_CHECK };
struct fc_launch {
  enum fc_kernel kind;
  unsigned blocks, threads, smem;
  unsigned char args[512]; /* the kernel's arguments, packed in declaration order */
};
/* Loads f's kernel if it is not loaded yet (lazy loading: the context lock, held until the
 * context's queued work has run). */
void fc_func_load(void* f);
/* Packs params as the kernel declares them; 0 or an error. */
int fc_launch_pack(void* f, unsigned blocks, unsigned threads, unsigned smem, void** params,
                   struct fc_launch* out);
/* Runs it on the stream's own grid runner (created on first use); 0 or an error. */
int fc_launch_run(void** runner, const struct fc_launch* l, char* err, size_t len);
void fc_runner_free(void* runner);

#endif
