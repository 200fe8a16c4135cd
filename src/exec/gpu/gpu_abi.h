/* Plain data shared by the GPU backend's host code (C11) and its kernel (CUDA C): the layout of a
 * rank's device region, the trigger FIFO in mapped host memory, the error record and the kernel's
 * arguments.
 *
 * Promises:
 * - Every struct here has the same size and layout for gcc (C11) and nvcc (CUDA C), 64-bit
 *   fields naturally aligned, so host code fills what the kernel reads and the reverse.
 * - A rank's region (one device allocation) holds, at offsets that are the same on every rank
 *   of a world: control words, inbound channel counters, the counts of waits so far, the table
 *   of every rank's region base, scratch (both halves of a double scratch), and staging for the
 *   input and output buffers peers reach. Peers find each other's memory as region base +
 *   the same offset, whether the base is a plain pointer (ranks in one process) or a CUDA IPC
 *   mapping.
 * - Channel counters are indexed as in the host world (transport/world.h): my k-th channel of
 *   type T to peer P waits on my inbound[(T-1, P, k)], which P's k-th channel of type T back to
 *   me increments. */
#ifndef SHUNT_EXEC_GPU_ABI_H
#define SHUNT_EXEC_GPU_ABI_H

#include <stddef.h>
#include <stdint.h>

#include "exec/program.h"
#include "transport/gpu_fifo.h"
#include "transport/trigger.h"

#define SHUNT_GPU_BARRIERS 16u /* barrier ids (docs/plan-format.md §9) */
#define SHUNT_GPU_ORDINALS SHUNT_PROG_MAX_ORDINAL
#define SHUNT_GPU_ALIGN 256u        /* alignment of every section of a region */
#define SHUNT_GPU_MAX_THREADS 1024u /* the kernel's launch bound */

/* Index of the counter for channel (type MEMORY or PORT, peer, ordinal) in inbound/expected. */
#if defined(__CUDACC__)
#define SHUNT_GPU_HD __host__ __device__ static inline
#else
#define SHUNT_GPU_HD static inline
#endif
SHUNT_GPU_HD uint32_t shunt_gpu_sem_index(uint32_t nranks, unsigned type, uint32_t peer, uint32_t ordinal) {
  return ((uint32_t)(type - 1) * nranks + peer) * SHUNT_GPU_ORDINALS + ordinal;
}

/* Control words at offset lay.ctrl of every region (device memory). */
struct shunt_gpu_ctrl {
  /* Executions this rank has completed. Execution e uses LL flag shunt_pkt_flag_for_epoch(e)
   * and the scratch half that flag selects; the kernel's last finishing block advances it, so a
   * replayed CUDA graph sees a new value every time. */
  uint64_t epoch;
  uint64_t fifo_head;   /* next trigger position to reserve (device atomics only) */
  uint32_t done_blocks; /* blocks of the running execution that have finished */
  uint32_t abort;       /* nonzero once any rank gave up (or the host aborted): every rank's is raised */
  uint32_t err_claim;   /* 0 until a thread of this rank claims the error record */
  uint32_t pad_;
  uint64_t ended; /* executions that have ended (finished, or skipped by a broken world) */
  /* The FIFO's counters as this rank's kernel last read them across PCIe (device copies, so a
   * push reads the host's only when the FIFO looks full, and an execution's end pushes a SYNC
   * only when a trigger is still incomplete): positions below were consumed / complete. */
  uint64_t fifo_consumed;
  uint64_t fifo_synced;
  uint64_t bars[SHUNT_GPU_BARRIERS]; /* inter-block barrier arrivals of the running execution */
};

/* What a thread waited for when it gave up. */
enum shunt_gpu_wait_kind {
  SHUNT_GPU_WAIT_NONE = 0,
  SHUNT_GPU_WAIT_PACKET,    /* an LL packet's flag; where = packet offset in own scratch */
  SHUNT_GPU_WAIT_SIGNAL,    /* a channel counter; peer/ordinal name the channel */
  SHUNT_GPU_WAIT_BARRIER,   /* an inter-block barrier; ordinal = barrier id */
  SHUNT_GPU_WAIT_SEMAPHORE, /* a plan semaphore; ordinal = semaphore id */
  SHUNT_GPU_WAIT_FIFO,      /* room in the trigger FIFO; where = FIFO position */
  SHUNT_GPU_WAIT_FLUSH,     /* the proxy's completion of a FIFO position (where) */
  SHUNT_GPU_WAIT_COUNT
};

/* Byte offsets of the sections of a region (the same on every rank) and their sizes. */
struct shunt_gpu_layout {
  uint64_t ctrl, inbound, expected, peers, scratch, input, output, total;
  uint64_t scratch_bytes; /* both parts (exec/ops/packet.h: shunt_scratch_at), halves included */
  uint64_t input_bytes, output_bytes;
};

/* Where a rank's abort word (its ctrl.abort) lies in its region. */
SHUNT_GPU_HD uint64_t shunt_gpu_abort_offset(const struct shunt_gpu_layout* L) {
  return L->ctrl + offsetof(struct shunt_gpu_ctrl, abort);
}

/* The kernel's arguments (passed as a __grid_constant__ parameter). */
struct shunt_gpu_kargs {
  const struct shunt_program* prog; /* device copy */
  long long* sems;                  /* the program's live semaphores (device) */
  char* region;                     /* this rank's region */
  const uint64_t* peers;            /* device table: every rank's region base in this process */
  uint32_t* abort;                  /* this rank's abort word (its ctrl.abort) */
  struct shunt_gpu_fifo* fifo;      /* device view of this rank's FIFO */
  char* in;                         /* bound input of this execution */
  char* out;                        /* bound output */
  struct shunt_gpu_layout lay;
  uint64_t timeout_ns;
  uint32_t rank, nranks;
  uint32_t port_used; /* the program pushes triggers: drain them before the execution ends */
  /* In place: on every rank one buffer is a view into the other (exec/program.h): the input
   * into the output at SHUNT_PROG_IN_VIEW, or, where SHUNT_PROG_OUT_IN_INPUT, the output into
   * the input at SHUNT_PROG_OUT_VIEW. */
  uint32_t alias;
  /* Bytes of the program each block copies into its dynamic shared memory at its start (a
   * multiple of 16; 0: ops are read from prog in global memory). */
  uint32_t prog_smem;
  /* Nonzero for a launch captured into a graph: before anything else the kernel looks at the
   * host's abort word (one read of mapped host memory) and returns at once when it is raised,
   * so that a replay after the communicator was aborted or destroyed touches nothing but the
   * memory kept for it (gpu_world.h, shunt_gpu_world_end_held). Eager launches skip the read:
   * none can start once the communicator is gone. */
  uint32_t host_gate;
  /* Zero-copy (registered user buffers): every rank's address of this call's input / output as
   * this process sees it (device tables, each rank at its own offset in its own allocation),
   * plus an offset the backend leaves 0; NULL: peers reach that buffer in their staging
   * sections. */
  const uint64_t* zc_in;
  const uint64_t* zc_out;
  uint64_t zc_in_off, zc_out_off;
  /* Ranks of other hosts (transport/gpu_fifo.h): device views of the outgoing staging chunks
   * (NULL: the proxy reads the source itself), of the incoming channel words and records and
   * of the mirror arrivals land in (NULL: arrivals are written into the region, as verbs does). */
  char* xout;
  struct shunt_gpu_xin_chan* xin;
  const char* xin_data;
};

/* The largest program copied into shared memory: the default dynamic shared memory of a block,
 * needing no opt-in. */
#define SHUNT_GPU_PROG_SMEM_MAX 49152u

#endif
