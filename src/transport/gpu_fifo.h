/* The trigger FIFO between a GPU kernel and its rank's proxy thread (transport/gpu_proxy.h),
 * in mapped pinned host memory, and the record of a rank's first failure that lives beside it.
 *
 * Promises: plain structs of fixed-width fields, the same size and layout for gcc (C11) and
 * nvcc (CUDA C), so the kernel writes slots and the error record and the proxy reads them (and
 * the reverse for the counters) without any CUDA call. */
#ifndef SHUNT_TRANSPORT_GPU_FIFO_H
#define SHUNT_TRANSPORT_GPU_FIFO_H

#include <stdbool.h>
#include <stdint.h>

#include "transport/trigger.h"

#define SHUNT_GPU_FIFO_SLOTS 1024u /* triggers in flight per rank */

/* The first failure of a rank, written once by the thread that claimed it (ctrl.err_claim).
 * Lives in mapped host memory, so the host reads it without a CUDA call. */
struct shunt_gpu_error {
  uint32_t code; /* 0: none; SHUNT_GPU_ERR_* (written last, after a system fence) */
  uint32_t what; /* enum shunt_gpu_wait_kind */
  uint32_t rank, block, thread, op;
  uint32_t chan_type, peer, ordinal, pad_;
  uint64_t awaited, seen, where;
};
#define SHUNT_GPU_ERR_TIMEOUT 1u /* this thread's wait ran past the timeout */
#define SHUNT_GPU_ERR_ABORTED 2u /* this thread gave up because another rank or block had */

/* One trigger in the FIFO. Addresses are absolute in the pushing process, computed on the
 * device (this execution's bound buffers, the peer's region), so the proxy needs no per-call
 * binding and a replayed graph works without the host. */
struct shunt_gpu_slot {
  struct shunt_trigger t;
  uint64_t src_addr; /* DATA: source */
  uint64_t dst_addr; /* DATA: destination */
  uint64_t seq;      /* pos + 1 once the slot holds the trigger at position pos */
  uint64_t pad_;
};

/* A rank's FIFO, in mapped pinned host memory: the kernel writes slots, the proxy the counters. */
struct shunt_gpu_fifo {
  uint64_t consumed; /* positions below have been read by the proxy: their slots are free */
  uint64_t pad0_[7];
  uint64_t done; /* positions below are complete (published at each SYNC trigger) */
  uint64_t pad1_[7];
  /* Positions below have been served (a trigger to another host flushed): their staging
   * chunks (the kernel arguments' xout) are free again. */
  uint64_t handled;
  uint64_t pad5_[7];
  /* Executions of the exec kernel that have ended, counted by the kernel (the block that
   * finishes an execution last, or block 0 of one that a broken world skipped): the proxy
   * compares it with the launches it was told of to know that no trigger can come. */
  uint64_t finished;
  uint64_t pad3_[7];
  /* Nonzero once the host aborted this rank (ncclCommAbort, a failed proxy): a plain store, no
   * CUDA call, so it lands whatever the driver is busy with; the kernel looks at it with its
   * own abort word (every 256 polls) and then raises every rank's abort word itself. */
  uint32_t abort;
  uint32_t pad4_[15];
  struct shunt_gpu_error error;
  uint64_t pad2_[1];
  struct shunt_gpu_slot slots[SHUNT_GPU_FIFO_SLOTS];
};

/* Data between a kernel and ranks of other hosts, through mapped pinned host memory, so that no
 * CUDA stream operation stands between a running kernel and the data it waits for (a copy on
 * the proxy's stream may share a hardware queue with work queued behind the kernel).
 *
 * Outgoing (the kernel arguments' xout: SHUNT_GPU_XOUT_SLOTS chunks of SHUNT_GPU_XOUT_CHUNK bytes):
 * the kernel cuts a put to a rank of another host into pieces of at most a chunk, each a
 * trigger of its own at FIFO position pos (the flag and SYNC ride on the last piece). Before
 * writing chunk pos % SLOTS it waits until handled > pos - SLOTS (the proxy has flushed the
 * piece that used it last), copies the piece into the chunk, fences at system scope, then
 * publishes the slot (seq, release). The proxy takes the slot (acquire), sends from the chunk
 * (a TCP send, a verbs post) with no CUDA call, flushes, and publishes handled = pos + 1
 * (release).
 *
 * Incoming over a row that hands arrivals to the proxy (TCP): the receiving thread copies the
 * bytes for region offset `off` into the mirror (the same offset of a mapped host buffer of
 * the region's size) and notes the extent as pending on its channel (peer, ordinal: a data
 * message carries its channel). At the channel's flag it writes the pending extents into the
 * record of that count (struct shunt_gpu_xin_rec, index count % SHUNT_GPU_XIN_RECS), then
 * stores the count into the channel's word with a release: one aligned 8-byte store from the
 * CPU, which lands whole (a copy engine's bytes may land in any order; see write_count in
 * gpu_proxy.c). The kernel's wait for count k on that channel polls the word with a system-scope
 * acquire, so the mirror's bytes and the record are visible once it sees k; it copies the
 * record's extents from the mirror into its region, fences, and only then is the wait complete,
 * so the plan's later ops (and, after their barriers, other blocks) read the data in place.
 * It then raises the channel's `copied` (a plain store; a racing lower value only makes the
 * receiver wait longer). The receiving thread reuses record k only once copied >= k - RECS, and
 * fails if a channel gathers more than SHUNT_GPU_XIN_EXT separate extents before a flag.
 * Several blocks may wait on one channel, each wait claiming the next count: each copies only
 * the record of its own count. That is enough: a block learns that another block's claim came
 * before its own only through that block's later ops, which follow its completed wait (and
 * copy), so a plan free of races where data land with their flags is free of them here.
 * Data that no later flag on the same channel follows never reach the region: a plan must
 * signal on the channel it put on (every shipped plan does). */
#define SHUNT_GPU_XOUT_SLOTS 64u
#define SHUNT_GPU_XOUT_CHUNK (64u << 10)
#define SHUNT_GPU_XIN_RECS 16u
#define SHUNT_GPU_XIN_EXT 7u

struct shunt_gpu_xin_rec {
  uint64_t n; /* extents */
  uint64_t pad_;
  uint64_t off[SHUNT_GPU_XIN_EXT], bytes[SHUNT_GPU_XIN_EXT];
};

/* One per (peer, ordinal) of port channels, [peer * SHUNT_GPU_ORDINALS + ordinal]. */
struct shunt_gpu_xin_chan {
  uint64_t count;  /* flags received (receiving thread, release) */
  uint64_t copied; /* the highest count whose extents the kernel has copied (kernel) */
  uint64_t pad_[6];
  struct shunt_gpu_xin_rec rec[SHUNT_GPU_XIN_RECS];
};

#ifndef __CUDACC__
#ifdef __cplusplus
extern "C" {
#endif
/* The proxy takes the trigger at FIFO position pos: false while the kernel has not published it
 * (its seq, acquire); else the slot is copied to *out and freed (consumed = pos + 1, release),
 * so the kernel may reuse it while the proxy serves the copy. */
bool shunt_gpu_fifo_take(struct shunt_gpu_fifo* f, uint64_t pos, struct shunt_gpu_slot* out);
#ifdef __cplusplus
}
#endif
#endif

#endif
