/* The GPU backend's world: the device memory and proxy of one rank of a communicator, and
 * programs uploaded to the device. Host code (C11 and the CUDA runtime API).
 *
 * Promises:
 * - Creation and destruction are collective over the caller's exchange (allgather, barrier),
 *   like the host world (transport/world.h); sizes and rank counts must agree on every rank
 *   (checked). Everything is created once per world, never per call.
 * - Ranks sharing one GPU are threads of one process, or processes under MPS (refused
 *   otherwise: kernels of different processes are time-sliced and would wait on each other
 *   forever); pairs of devices without native peer atomics are refused.
 * - Each rank owns one device allocation (its region, gpu_abi.h): control words, channel
 *   counters, scratch, staging for input and output. Ranks that are threads of one process
 *   reach each other's regions through plain device pointers (peer access is enabled when
 *   they use different devices); ranks in other processes on the same host through CUDA IPC
 *   (cuIpcGetMemHandle / cuIpcOpenMemHandle). Ranks on other hosts are reached through the
 *   network table's chosen row (transport/net.h: verbs on this rank's region, registered for
 *   their writes, or TCP through host memory); no memory channel may join them (checked per
 *   plan: shunt_gpu_world_fits). The set-up is the one every world uses (transport/peers.h).
 * - Port channels to ranks of this host are the kernel's own copies and counter adds. Where the
 *   world spans hosts, each rank runs one proxy thread that serves the kernel's triggers to
 *   ranks of other hosts in FIFO order: RDMA writes of the data, then of the count, waited for
 *   before the next trigger (or the same through TCP and host memory), and a SYNC trigger
 *   publishes completion; every execution ends with its triggers complete. The proxy never
 *   blocks on anything but its own streams and transport, and is immune to other threads'
 *   stream capture. A world on one host has no proxy thread.
 * - Failures are reported through shunt_gpu_world_check, which reads the first failure the
 *   kernel recorded without any CUDA call; once a run failed the world is broken and every
 *   later launch is refused.
 * - Nothing here prints to stdout; errors are values with a message. */
#ifndef SHUNT_EXEC_GPU_WORLD_H
#define SHUNT_EXEC_GPU_WORLD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "exec/gpu/gpu_abi.h"
#include "exec/program.h"
#include "util/status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct shunt_gpu_world_config {
  uint64_t scratch_bytes; /* per rank: both parts (packet plans', the others'), halves included */
  uint64_t input_bytes;   /* staging capacity for a rank's input */
  uint64_t output_bytes;  /* staging capacity for a rank's output */
  /* Bound of every wait in the kernel. 0: SHUNT_GPU_TIMEOUT (seconds) from the environment,
   * and when it is unset or 0, none: like NCCL, a kernel waits for a late peer as long as it
   * takes (a checkpoint, data loading), and only shunt_gpu_world_abort ends the wait. */
  uint64_t timeout_ms;
  int device; /* CUDA device ordinal of this rank; -1: the calling thread's current context's */
};

struct shunt_gpu_world;
struct CUstream_st; /* a CUDA stream: cudaStream_t and CUstream are pointers to it */
struct CUctx_st;
struct shunt_cu;
struct shunt_gpu_kernels;
/* The caller's collective exchange, as for the host world (transport/world.h; not included
 * here because its C11 atomics do not compile as CUDA C++). */
struct shunt_world_exchange;

int shunt_gpu_world_create(uint32_t rank, uint32_t nranks, const struct shunt_gpu_world_config* cfg,
                           const struct shunt_world_exchange* bs, struct shunt_gpu_world** out, char* err,
                           size_t len);
/* Collective: waits for this rank's launches (eager ones; a captured graph still replaying is
 * the caller's to finish), then for every rank, then frees. */
void shunt_gpu_world_destroy(struct shunt_gpu_world* w);
/* Waits until this rank's last eager launch has completed (also while another thread captures
 * a graph): SHUNT_OK, or SHUNT_E_CUDA (one WARN) when the wait failed, after which the
 * world's device memory is never freed, since its kernels may still use it. */
int shunt_gpu_world_quiesce(struct shunt_gpu_world* w);
/* Whether this rank's last eager launch has completed, asked without waiting (a world with
 * nothing launched yet: true). */
bool shunt_gpu_world_drained(struct shunt_gpu_world* w);
/* Not collective (teardown, where one thread may end the ranks one after another): waits for
 * this rank's last launch to complete, then frees its part. */
void shunt_gpu_world_release(struct shunt_gpu_world* w);

/* What stays of a world that a captured graph may still replay after its communicator ended:
 * the memory a launch reads before it returns at its start, having found the host's abort word
 * raised (the kernel's arguments of a captured launch ask it to look: gpu_kernel.cuh), and the
 * memory its copy steps touch: the region, the FIFO, the programs. */
struct shunt_gpu_remains;
/* As shunt_gpu_world_destroy (collective) or shunt_gpu_world_release (not), for a world that a
 * graph of this rank may still replay: the world is aborted first, and its remains are
 * returned instead of freed (NULL when the world keeps everything anyway: a failed wait). */
struct shunt_gpu_remains* shunt_gpu_world_end_held(struct shunt_gpu_world* w, bool collective);
/* Frees the remains once no graph can replay on them (the driver dropped every graph holding
 * them). A region that peers may still write (a world ended without a collective step) stays
 * allocated until the process exits, as shunt_gpu_world_release keeps it. */
void shunt_gpu_remains_free(struct shunt_gpu_remains* r);

/* SHUNT_OK when no run failed; else why, with a message: the proxy's failure code (its CUDA
 * call, the network, a peer gone), or for a kernel thread that gave up SHUNT_E_TIMEOUT (its
 * wait ran out), SHUNT_E_ABORTED (this communicator was aborted) or SHUNT_E_PEER (another rank
 * gave up first), the message naming rank, block, thread, op (index and name when `p` is the
 * program that ran), what it waited on, the value awaited and the value seen. Reads host
 * memory only: safe while kernels run and inside stream capture. */
int shunt_gpu_world_check(struct shunt_gpu_world* w, const struct shunt_program* p, char* err, size_t len);
/* This rank's first kernel failure as its kernel recorded it (gpu_fifo.h): the code, 0 when none
 * (then *e is zeroed). A kernel that found the abort word already raised when it started (another
 * rank's wait ran out while this rank's blocks were not yet resident, as when another
 * application's kernels fill the device) records SHUNT_GPU_ERR_ABORTED waiting on
 * SHUNT_GPU_WAIT_NONE (gpu_kernel.cuh). Host memory only, as shunt_gpu_world_check. */
uint32_t shunt_gpu_world_failure(const struct shunt_gpu_world* w, struct shunt_gpu_error* e);
/* Aborts this rank from the host: a store into its FIFO's abort word (mapped host memory), no
 * CUDA call, so it lands whatever another thread holds the context lock for. Its running (or
 * next) kernel sees it within 256 polls of any wait and raises every rank's abort word: every
 * waiting kernel gives up and the world is broken. Thread-safe; for communicator abort; the
 * world must outlive the call. */
int shunt_gpu_world_abort(struct shunt_gpu_world* w);
bool shunt_gpu_world_broken(const struct shunt_gpu_world* w);
/* Whether ranks of this world sit on several hosts (joined by verbs). */
bool shunt_gpu_world_spans(const struct shunt_gpu_world* w);
/* Whether a plan's memory groups (rpn consecutive ranks; 0: none) each lie on one host; if not,
 * *a and *b are two ranks of a group apart. */
bool shunt_gpu_world_fits(const struct shunt_gpu_world* w, uint32_t rpn, uint32_t* a, uint32_t* b);

/* For the launcher: launches of one world are ordered as NCCL orders a communicator's work,
 * whatever stream they come on and whichever thread makes them. begin takes the world's launch
 * lock and makes `stream` wait for the previous launch; end records this launch (when
 * something was enqueued) and releases the lock. A stream being captured is not ordered
 * against eager launches (a graph's launches follow its own stream; replaying two graphs of
 * one world at once is not supported). 0, or SHUNT_E_CUDA naming the call (the lock is released then). */
int shunt_gpu_world_order_begin(struct shunt_gpu_world* w, struct CUstream_st* stream, char* err, size_t len);
int shunt_gpu_world_order_end(struct shunt_gpu_world* w, struct CUstream_st* stream, bool enqueued, char* err,
                              size_t len);

/* For the launcher: the world's part of the kernel arguments, this rank's staging sections
 * (0 input, 1 output), and the layout. */
void shunt_gpu_world_kargs(const struct shunt_gpu_world* w, struct shunt_gpu_kargs* k);
char* shunt_gpu_world_stage(const struct shunt_gpu_world* w, unsigned buf);
int shunt_gpu_world_device(const struct shunt_gpu_world* w);
/* For the launcher: the driver table, the kernels of the world's device and its context
 * (transport/cu.h, gpu_kernels.h; opaque here). */
const struct shunt_cu* shunt_gpu_world_cu(const struct shunt_gpu_world* w);
const struct shunt_gpu_kernels* shunt_gpu_world_fns(const struct shunt_gpu_world* w);
/* Called right before the exec kernel is launched on stream: the world's proxy stays awake until
 * that execution ends. Returns whether the launch is being captured (pass it to unexpect when
 * the launch fails). */
bool shunt_gpu_world_expect(struct shunt_gpu_world* w, struct CUstream_st* stream);
void shunt_gpu_world_unexpect(struct shunt_gpu_world* w, bool graph);
struct CUctx_st* shunt_gpu_world_ctx(const struct shunt_gpu_world* w);
/* The world's own stream (non-blocking, never captured): set-up copies. */
struct CUstream_st* shunt_gpu_world_stream(const struct shunt_gpu_world* w);

/* A program uploaded for one world: the device copy (the Program's bytes as they are,
 * followed by its live semaphores, set to their initial values) and how it is launched. */
struct shunt_gpu_prog {
  const struct shunt_program* host; /* the caller's program; must outlive this */
  struct shunt_gpu_world* world;
  struct shunt_program* dev; /* device copy */
  long long* sems;           /* device: the program's semaphores */
  char* pinned;              /* pinned host memory: the device copy's bytes, the upload's source */
  uint64_t bytes;            /* of the device copy (and of pinned) */
  uint32_t threads;          /* threads per block of the launch */
  uint32_t smem;             /* dynamic shared memory: the program's copy (gpu_steps.h) */
  bool port_used;            /* the program pushes port triggers */
  bool uploaded;             /* dev holds the program (set by its first launch) */
};

/* Allocates p's device copy and its image in pinned host memory (both freed with the world);
 * the first launch copies the image into it on the launch's own stream
 * (shunt_gpu_prog_upload), so that no thread of a rank waits for a stream of its own (which may
 * share a hardware queue with a peer's kernel that waits for this rank) before it launches.
 * The block size is the plan's,
 * capped by max_threads (0: no cap), and halved until the blocks of every rank of the world on
 * this GPU can be resident together (gpu_residency.h); a program that cannot be is refused,
 * as one that does not fit the world. */
int shunt_gpu_prog_create(struct shunt_gpu_world* w, const struct shunt_program* p, uint32_t max_threads,
                          struct shunt_gpu_prog** out, char* err, size_t len);
/* The program's bytes and its semaphores' initial values into its device copy, once, from
 * pinned memory (so that the call never waits on the host for the stream's earlier work): queued on
 * `stream` ahead of the launch; into a stream being captured, a copy on the world's own stream
 * waited for instead (a captured copy would read the host program at every replay). In the
 * world's context and relaxed capture mode; the world's launches are ordered, so no two
 * threads upload one program. SHUNT_OK, or SHUNT_E_CUDA with the call and its error in err. */
int shunt_gpu_prog_upload(struct shunt_gpu_prog* gp, struct CUstream_st* stream, bool capturing, char* err,
                          size_t len);
/* Its device memory is freed with the world, not now: cuMemFree waits for the device, where a
 * peer's kernel may be waiting on this rank. */
void shunt_gpu_prog_destroy(struct shunt_gpu_prog* gp);

#ifdef __cplusplus
}
#endif

#endif
