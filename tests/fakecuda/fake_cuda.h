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
 *   peer atomics exist between every pair unless FAKECUDA_PEER_ACCESS / FAKECUDA_PEER_ATOMICS
 *   say otherwise; FAKECUDA_VISIBLE gives a process only some devices of one shared machine.
 *   The rules on contexts, capture, peers and images are in README.md.
 * - Occupancy: a device of FAKECUDA_SMS (default 8) multiprocessors, each holding 16 blocks of
 *   at most FAKECUDA_MAX_THREADS (default 32) threads, and none larger: the executor's blocks
 *   are host threads, so they stay few. Those slots are shared by every kernel running on the
 *   device; a launch waits for its blocks' slots before it runs (fc_resident.c, README.md).
 * - The grid-stride scaling kernels run on a small grid whatever was asked, and the executor
 *   kernel runs its blocks as launched but each with at most FAKECUDA_RUN_THREADS (default 4)
 *   of the threads asked for: every op of the kernel strides over the block, so results do not
 *   depend on the block size (shunt-plan verify --backend kernel-cpu checks 1, 3 and 32), and a
 *   block of host threads costs a core's time on every wait.
 * - Capture: an operation on a capturing stream is recorded into its graph; an unsafe call
 *   (allocation, free, stream/context/event synchronize, event query, synchronous copy or set)
 *   from a thread not in relaxed mode while any stream captures in global mode fails with
 *   CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates that capture, as the driver does;
 *   work on the legacy default stream while a blocking stream of its device captures fails
 *   with CUDA_ERROR_STREAM_CAPTURE_IMPLICIT and invalidates that capture, in any mode.
 * - Faults (FAKECUDA_FAULT, or fakecuda_fault()): "corrupt:N" flips a byte of the output of the
 *   Nth executor launch of the process; "skip:N" does not run the Nth executor launch at all
 *   (its signals never come); "late:N" starts the Nth executor launch only once its rank's
 *   abort word is up (its peers gave up waiting for it, as for a kernel whose blocks a busy
 *   device could not hold until then); "refuse:N" makes the Nth cuLaunchKernel call of the
 *   executor kernel of the process return CUDA_ERROR_LAUNCH_FAILED (nothing is enqueued). */
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
  FC_ERROR_STREAM_CAPTURE_IMPLICIT = 906,
  FC_ERROR_STREAM_CAPTURE_WRONG_THREAD = 908
};

#define FC_MAX_DEVICES 8

struct fc_ctx {
  int device;
  bool primary;
  /* The context's identity (cuCtxGetId): a primary context reset, or released by all its
   * retainers, comes back as a new context under the same handle, and what was made in the old
   * one (modules) is gone. */
  unsigned long long id;
  int peer_enabled[FC_MAX_DEVICES];
};

struct fc_stream;
struct fc_graph;

/* fc_core.c */
/* 0 once cuInit ran, else CUDA_ERROR_NOT_INITIALIZED: every other call checks it first. */
int fc_initialized(void);
/* fc_initialized(), then a current context (CUDA_ERROR_INVALID_CONTEXT without one). */
int fc_need_ctx(void);
#define FC_NEED_INIT()            \
  do {                            \
    int fc_e_ = fc_initialized(); \
    if (fc_e_ != 0) return fc_e_; \
  } while (0)
#define FC_NEED_CTX()             \
  do {                            \
    int fc_e_ = fc_need_ctx();    \
    if (fc_e_ != 0) return fc_e_; \
  } while (0)
/* Whether the test relaxes a rule: FAKECUDA_LENIENT=<rule>[,<rule>...]. */
bool fc_lenient(const char* rule);
/* Whether the devices support dma-buf export (FAKECUDA_DMA_BUF). */
bool fc_dma_buf(void);
int fc_devices(void);
struct fc_ctx* fc_ctx_of(int device);
struct fc_ctx* fc_current(void);
int fc_max_threads(void);
int fc_run_threads(void);
int fc_sms(void);
/* The blocks a multiprocessor holds at once (what cuOccupancyMaxActiveBlocksPerMultiprocessor
 * answers for a block the device accepts). */
#define FC_BLOCKS_PER_SM 16
/* fc_resident.c: a launch's blocks take `blocks` of its device's resident block slots before it
 * runs (waiting until that many are free: all kernels of the device, every stream) and give
 * them back when it ends. A grid larger than the device waits for the device to be empty. */
void fc_resident_enter(int device, unsigned blocks);
void fc_resident_leave(int device, unsigned blocks);
/* The fault for the n-th executor launch of the process (1-based): 0 none, 'c' corrupt, 's' skip. */
int fc_fault_for(long n);

/* fc_topo.c: the machine's physical devices. The bus id of physical device phys; the
 * physical device of a bus id (-1: none); whether a pair has peer access and native peer
 * atomics (FAKECUDA_PEER_ACCESS, FAKECUDA_PEER_ATOMICS). */
void fc_bus_id(int phys, char* buf, size_t len);
int fc_bus_physical(const char* id);
int fc_peer_access(int a, int b);
int fc_peer_atomics(int a, int b);

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
/* What the device-memory rules (fc_guard.c) know of an address: */
enum {
  FC_AT_NONE,
  FC_AT_DATA,  /* an allocation's pages */
  FC_AT_GUARD, /* a guard page around one */
  FC_AT_CLOSED /* VMM pages mapped without cuMemSetAccess for the device reaching them */
};
/* The kinds of memory in fc_mem.c's table. */
enum {
  FC_KIND_DEVICE = 1, /* cuMemAlloc */
  FC_KIND_IPC,        /* a peer's, through cuIpcOpenMemHandle */
  FC_KIND_HOST,       /* cuMemHostAlloc */
  FC_KIND_DECLARED,   /* a test's memory declared device memory */
  FC_KIND_VMM,        /* a cuMemMap mapping (fc_vmm.c) */
  FC_KIND_POOL,       /* cuMemAllocAsync */
  FC_KIND_MANAGED     /* cuMemAllocManaged */
};
/* For fc_vmm.c: records a mapping of `handle` at lo (closed to every device until granted);
 * removes the mappings inside [lo, hi), leaving holes of the reservation, and gives their
 * handles (at most max); sets device's access (flags) to those overlapping [lo, hi) (how many);
 * device's access to the mapping holding p (-1: no mapping there); the handle mapped at p, or
 * NULL; the protection of closed device pages. */
int fc_mem_track(uintptr_t lo, size_t bytes, int kind, int device, void* handle, unsigned types);
int fc_mem_untrack(uintptr_t lo, uintptr_t hi, void** handles, int max);
int fc_mem_grant(uintptr_t lo, uintptr_t hi, int device, int flags);
int fc_mem_access(uintptr_t p, int device, int* flags);
void* fc_mem_vmm_handle(uintptr_t p);
int fc_mem_closed_prot(void);
/* The mapping at lo gets another handle and a new buffer id; the old handle is returned. Its
 * size, or 0. */
void* fc_mem_rehandle(uintptr_t lo, void* handle);
size_t fc_mem_size_at(uintptr_t lo);
/* fc_vmm.c: fakecuda_replace for a VMM mapping. */
int fc_vmm_replace(uintptr_t p);
/* A memfd-backed allocation of kind (guarded, closed) and its free. */
int fc_mem_alloc_kind(size_t bytes, int device, int kind, unsigned long long* dptr);
int fc_mem_free_kind(unsigned long long dptr, int kind);
struct fc_window {
  uintptr_t lo, hi;      /* pages opened */
  unsigned long long id; /* of the allocation, so that a later one at its address is left alone */
  uintptr_t base, bytes; /* the allocation, for messages */
  int device;
};
/* Where a lies for `device` (-1: any device); for FC_AT_DATA with open, a window of the
 * allocation around a is made accessible and described in *w. */
int fc_mem_fault_open(uintptr_t a, int device, bool open, struct fc_window* w);
/* Makes the windows inaccessible again (those whose allocation still lives). */
void fc_mem_close(const struct fc_window* w, int n);

/* fc_copy.c: one copy as a copy engine lands it (no order, no whole words). */
void fc_copy(void* dst, const void* src, size_t n);

/* fc_guard.c: device memory's access rules. */
void fc_guard_install(void);
/* The calling host thread acts for `device` (a copy, a kernel; -1: whichever device owns what
 * it touches) until the matching leave, which closes what it opened. */
void fc_device_enter(int device);
void fc_device_leave(void);

/* fc_kept.c: memory its owner freed while others hold it. Every memfd of device memory is
 * sized by fc_kept_size (its `bytes`, then a trailer page counting importers). An importer's
 * mapping or handle counts itself with fc_kept_import (a token for fc_kept_unimport, or NULL).
 * fc_kept_on_release, at the owner's free or last release: true when importers (or, with
 * descriptors, other descriptors of the file in this process) still hold it: the pages are kept
 * and counted (fakecuda_pinned_bytes), or FAKECUDA_STRICT_IPC aborts, saying `what`. */
int fc_kept_size(int fd, size_t bytes);
size_t fc_kept_trailer_at(size_t bytes);
void* fc_kept_import(int fd, size_t bytes);
void fc_kept_unimport(void* token);
bool fc_kept_on_release(int fd, size_t bytes, bool descriptors, const char* what);

/* fc_stream.c: whether a synchronizing call may proceed now (see capture above); invalidates
 * the global capture when not. */
bool fc_sync_allowed(void);

/* fc_graph_obj.c: user objects held by graphs. copy: an instantiated graph takes the
 * references its graph holds; drop: a graph (or instantiated graph) going releases its own. */
void fc_graph_objs_copy(const void* from, const void* to);
void fc_graph_objs_drop(const void* g);

/* fc_module.c */
enum fc_kernel {
  FC_K_EXEC = 1,
  FC_K_PRE,
  FC_K_POST,
  FC_K_EMPTY /* a benchmark's empty kernel */,
  FC_K_CHECK
};
struct fc_launch {
  enum fc_kernel kind;
  unsigned blocks, threads, smem;
  unsigned char args[512]; /* the kernel's arguments, packed in declaration order */
};
/* Whether the current context may launch f (its module's context, still alive); 0 or
 * CUDA_ERROR_INVALID_HANDLE. */
int fc_func_usable(const void* f);
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
