/* Program: one rank's share of a plan, lowered for one call shape (sizes, dtype, op, packet
 * type). It is what both backends interpret.
 *
 * Promises:
 * - Plain data in one contiguous allocation: a header followed by arrays addressed by byte
 *   offsets from the header. No pointers, so the GPU backend copies it to device memory as is
 *   and the host backend shares it between threads read-only.
 * - Offsets and sizes are bytes, resolved from chunks (docs/plan-format.md §4.2), tbg slices and
 *   packet doubling (a packet-side reference holds 2 x its data offset). Not applied here, but
 *   by the executor at run time: the pipeline iteration offset (§5.4) and the double-scratch
 *   half, which is added to every scratch access, local, remote or multicast, packet or not.
 * - A remote reference names (peer rank, buffer type, offset); a local one (buffer type,
 *   offset) relative to the buffer's base; a multicast one (switch table index, offset).
 * - Fits the device encoding: every offset + size below 2^32 and pipeline iterations below
 *   2^16 (lowering refuses anything else, with a reason).
 * - The header's dtype, redop and coll are util/vocab.h's codes (shunt_*_code), the only
 *   encoding of these in a program: every executor reads them back through shunt_*_from_code.
 * - Compiles as C11 and as CUDA C. */
#ifndef SHUNT_EXEC_PROGRAM_H
#define SHUNT_EXEC_PROGRAM_H

#include <stdint.h>

#include "util/vocab.h"

#define SHUNT_PROG_MAGIC 0x73687072u /* "shpr" */

enum shunt_prog_ref_kind { SHUNT_PREF_LOCAL = 0, SHUNT_PREF_REMOTE = 1, SHUNT_PREF_SWITCH = 2 };

/* Packet types (docs/plan-format.md §7.1): the payload bytes per packet. */
enum shunt_pkt_type { SHUNT_PKT_LL16 = 16, SHUNT_PKT_LL8 = 8 };

/* Bits of shunt_program.remote_access: which of this rank's user buffers peers reach
 * (remote buffers or multicast groups), so they must live in shared, registered memory. */
#define SHUNT_PROG_REMOTE_INPUT 1u
#define SHUNT_PROG_REMOTE_OUTPUT 2u

/* Bits of shunt_program.view: how an in-place call's buffers nest, the collective's rule
 * (util/coll_traits.h) written down at lowering, so executors read it without the table. */
#define SHUNT_PROG_VIEW_OUT_IN_INPUT 1u /* the output is the view, the input its holder */
#define SHUNT_PROG_VIEW_AT_RANK 2u      /* the view lies at the rank's slice of its holder */

/* In an in-place call, where rank r's input lies inside its output (NCCL's in-place rule:
 * allreduce the same buffer, allgather the rank's slice); usable in host and device code.
 * Every rank of an in-place call binds its input there, so a rank also places its peers'. */
#define SHUNT_PROG_IN_VIEW(p, r)                                                                     \
  (((p)->view & (SHUNT_PROG_VIEW_AT_RANK | SHUNT_PROG_VIEW_OUT_IN_INPUT)) == SHUNT_PROG_VIEW_AT_RANK \
       ? (uint64_t)(r) * (p)->out_stride                                                             \
       : 0u)

/* Reducescatter is the mirror: in place, rank r's output lies inside its input (NCCL's rule:
 * recvbuff == sendbuff + rank x recvcount), at SHUNT_PROG_OUT_VIEW; every rank binds its
 * output there, so a rank also places its peers'. The input's rank slices lie out_stride
 * apart (the field is the stride of the collective's rank-sliced buffer). */
#define SHUNT_PROG_OUT_IN_INPUT(p) (((p)->view & SHUNT_PROG_VIEW_OUT_IN_INPUT) != 0)
#define SHUNT_PROG_OUT_VIEW(p, r) \
  (SHUNT_PROG_OUT_IN_INPUT(p) && ((p)->view & SHUNT_PROG_VIEW_AT_RANK) ? (uint64_t)(r) * (p)->out_stride : 0u)

/* Channel ordinals per (type, peer) that the transport provides counters for. */
#define SHUNT_PROG_MAX_ORDINAL 256

/* Bits of shunt_prog_ref.flags. */
#define SHUNT_PREF_PACKETS 1u /* the region holds packets: off is 2 x the data offset */

struct shunt_prog_ref {
  uint64_t off;   /* byte offset in the buffer (packet region: already doubled) */
  uint64_t bytes; /* data bytes (a packet region spans 2 x bytes) */
  uint16_t slot;  /* REMOTE: peer rank; SWITCH: index into the switch table; LOCAL: 0 */
  uint8_t kind;   /* enum shunt_prog_ref_kind */
  uint8_t buf;    /* enum shunt_buf_type (plan/plan.h): 0 input, 1 output, 2 scratch */
  uint8_t flags;  /* SHUNT_PREF_* */
  uint8_t pad_[3];
};

/* A channel end: my `ordinal`-th channel of `type` to `peer`. It pairs with the peer's
 * `ordinal`-th channel of the same type back to me (§6.2). */
struct shunt_prog_chan {
  uint16_t peer;
  uint16_t ordinal;
  uint8_t type; /* enum shunt_chan_type: MEMORY or PORT */
  uint8_t pad_[3];
};

/* A multicast group (switch channel): the bound buffer type and the member ranks. */
struct shunt_prog_switch {
  uint8_t buf;
  uint8_t pad_;
  uint16_t nranks;
  uint32_t first_rank; /* index into the u16 rank array */
};

struct shunt_prog_op {
  uint8_t type;      /* enum shunt_op_type */
  uint8_t chan_type; /* enum shunt_chan_type */
  uint8_t nsrc, ndst;
  uint8_t nchan; /* channels (chan array) */
  uint8_t nsem;  /* semaphore ids (u32 array) */
  uint8_t pad_[2];
  uint32_t ref;       /* first of nsrc + ndst refs: sources first */
  uint32_t chan;      /* first channel, or first semaphore id */
  uint32_t a;         /* barrier: barrier id; pipeline: iterations */
  uint32_t b;         /* barrier: number of blocks; pipeline: inner ops that follow */
  uint64_t unit;      /* pipeline: window bytes */
  uint16_t json_op;   /* position in the threadblock's ops */
  int16_t json_inner; /* position inside a pipeline body, -1 outside */
  uint32_t pad2_;
};

struct shunt_prog_block {
  uint32_t first_op, nops;
};

struct shunt_program {
  uint32_t magic;
  uint32_t total_bytes; /* of the whole allocation */
  uint32_t rank, nranks;
  uint32_t nblocks, nthreads; /* threads per block the plan asks for */
  uint32_t nops, nrefs, nchans, nu32, nswitch, nswitch_ranks, nsems;
  uint8_t dtype; /* shunt_dtype_code: the element type */
  uint8_t redop; /* shunt_redop_code: the call's op (avg and PreMulSum sum at reduce steps) */
  uint8_t pkt;   /* enum shunt_pkt_type */
  uint8_t ll;    /* packet plan */
  uint8_t double_scratch;
  uint8_t coll;          /* shunt_coll_code: the plan's collective */
  uint8_t remote_access; /* SHUNT_PROG_REMOTE_* */
  uint8_t view;          /* SHUNT_PROG_VIEW_* */
  uint64_t in_bytes, out_bytes;
  uint64_t out_stride;    /* allgather: bytes from one rank's slice of the output to the next;
                           reducescatter: of the input (the rank-sliced buffer); alltoall: from
                           one block to the next, in both buffers */
  uint64_t chunk_bytes;   /* the chunk unit */
  uint64_t scratch_bytes; /* one scratch half (packet doubling included) */
  /* Byte offsets of the arrays from the start of the program. */
  uint32_t off_blocks, off_ops, off_refs, off_chans, off_u32, off_switch, off_switch_ranks, off_sem_init;
};

/* Array accessors (host and device). */
#if defined(__CUDACC__)
#define SHUNT_PROG_HD __host__ __device__ static inline
#else
#define SHUNT_PROG_HD static inline
#endif

SHUNT_PROG_HD const struct shunt_prog_block* shunt_prog_blocks(const struct shunt_program* p) {
  return (const struct shunt_prog_block*)((const char*)p + p->off_blocks);
}
SHUNT_PROG_HD const struct shunt_prog_op* shunt_prog_ops(const struct shunt_program* p) {
  return (const struct shunt_prog_op*)((const char*)p + p->off_ops);
}
SHUNT_PROG_HD const struct shunt_prog_ref* shunt_prog_refs(const struct shunt_program* p) {
  return (const struct shunt_prog_ref*)((const char*)p + p->off_refs);
}
SHUNT_PROG_HD const struct shunt_prog_chan* shunt_prog_chans(const struct shunt_program* p) {
  return (const struct shunt_prog_chan*)((const char*)p + p->off_chans);
}
SHUNT_PROG_HD const uint32_t* shunt_prog_u32(const struct shunt_program* p) {
  return (const uint32_t*)((const char*)p + p->off_u32);
}
SHUNT_PROG_HD const struct shunt_prog_switch* shunt_prog_switches(const struct shunt_program* p) {
  return (const struct shunt_prog_switch*)((const char*)p + p->off_switch);
}
SHUNT_PROG_HD const uint16_t* shunt_prog_switch_ranks(const struct shunt_program* p) {
  return (const uint16_t*)((const char*)p + p->off_switch_ranks);
}
SHUNT_PROG_HD const int64_t* shunt_prog_sem_init(const struct shunt_program* p) {
  return (const int64_t*)((const char*)p + p->off_sem_init);
}

#endif
