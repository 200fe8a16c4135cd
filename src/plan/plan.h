/* The parsed execution plan: an MSCCL++-format JSON plan (v0.8 and later) as plain C data.
 *
 * Promises:
 * - Every array keeps the order of the JSON, so an index here is the index in the file and
 *   error paths such as gpus[1].threadblocks[0].ops[3] can be rebuilt from the indices.
 * - Counts, indices and sizes are stored as written; nothing is clamped. Whether they are in
 *   range is the job of the static checks (plan/check.h). The only derived fields are marked
 *   "resolved": they are filled when the indices they come from are in range, else -1.
 * - A Plan owns all its memory (one arena); shunt_plan_free releases it. After parsing it is
 *   never modified, so it may be shared read-only between threads.
 * - Nothing here depends on CUDA.
 *
 * Units: chunk indices and sizes are in chunks of the plan's chunk unit (docs/plan-format.md §4.2);
 * message sizes and pipeline unit sizes are in bytes. */
#ifndef SHUNT_PLAN_PLAN_H
#define SHUNT_PLAN_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "util/coll_traits.h"
#include "util/vocab.h"

/* Every op name of the current format (docs/plan-format.md §5.3). `glre` is not here: it is a
 * DSL-internal op that no executor can run, and the parser rejects it by name. */
enum shunt_op_type {
  SHUNT_OP_NOP = 0,     /* block barrier */
  SHUNT_OP_BARRIER,     /* barrier_id, num_threadblocks */
  SHUNT_OP_SIGNAL,      /* channel_ids */
  SHUNT_OP_WAIT,        /* channel_ids */
  SHUNT_OP_RLXSIGNAL,   /* relaxed signal */
  SHUNT_OP_RLXWAIT,     /* relaxed wait */
  SHUNT_OP_FLUSH,       /* port channel_ids */
  SHUNT_OP_PUT,         /* local src -> remote dst */
  SHUNT_OP_PWS,         /* port put with signal */
  SHUNT_OP_PWSF,        /* port put with signal and flush */
  SHUNT_OP_GET,         /* remote src -> local dst */
  SHUNT_OP_COPY,        /* local -> local */
  SHUNT_OP_RE,          /* reduce: dst0 = src0 (+) src1.. */
  SHUNT_OP_RES,         /* reduce, then store to remote dst1.. */
  SHUNT_OP_RRE,         /* reduce with remote src1.. */
  SHUNT_OP_RRES,        /* rre, then store to remote dst1.. */
  SHUNT_OP_CPKT,        /* data -> local packets */
  SHUNT_OP_UPKT,        /* local packets -> data */
  SHUNT_OP_PPKT,        /* data -> remote packets */
  SHUNT_OP_RPPKT,       /* local packets -> remote packets */
  SHUNT_OP_REPKT,       /* reduce packets into data */
  SHUNT_OP_RESPKT,      /* repkt + send packets to remotes */
  SHUNT_OP_RECPKT,      /* repkt + local packets */
  SHUNT_OP_RECSPKT,     /* recpkt + send packets to remotes */
  SHUNT_OP_GLRES,       /* multicast load-reduce-store */
  SHUNT_OP_GSTORE,      /* multicast store */
  SHUNT_OP_GSTOREPKT,   /* multicast store of packets */
  SHUNT_OP_SEM_ACQUIRE, /* semaphore_ids */
  SHUNT_OP_SEM_RELEASE, /* semaphore_ids */
  SHUNT_OP_PIPELINE,    /* iter_context + nested ops */
  SHUNT_OP_COUNT
};

/* Channel types. NONE stands for an absent `channel_type` and for the literal "none". The
 * values MEMORY, PORT, SWITCH index per-type tables (SHUNT_CHAN_TYPES entries, slot 0 unused). */
enum shunt_chan_type {
  SHUNT_CHAN_NONE = 0,
  SHUNT_CHAN_MEMORY = 1,
  SHUNT_CHAN_PORT = 2,
  SHUNT_CHAN_SWITCH = 3
};
#define SHUNT_CHAN_TYPES 4

/* Local buffer kinds: "i", "o", "s". */
enum shunt_buf_type { SHUNT_BUF_INPUT = 0, SHUNT_BUF_OUTPUT = 1, SHUNT_BUF_SCRATCH = 2 };
#define SHUNT_BUF_TYPES 3

/* The `reduce_op` an op names; NONE when absent. The reference ignores it; shunt honours it.
 * Not a reduction op of a call (enum shunt_redop): it says what a plan's reductions compute,
 * where NONE and SUM both mean a plan that combines each contribution once and so serves every
 * call op (shunt_plan_redop_for). */
enum shunt_plan_redop {
  SHUNT_PLAN_REDOP_NONE = 0,
  SHUNT_PLAN_REDOP_SUM,
  SHUNT_PLAN_REDOP_PROD,
  SHUNT_PLAN_REDOP_MIN,
  SHUNT_PLAN_REDOP_MAX
};

/* How a buffer entry names its memory. */
enum shunt_ref_kind {
  SHUNT_REF_LOCAL = 0, /* {"type": "i"|"o"|"s", index, size} */
  SHUNT_REF_REMOTE,    /* {"buffer_id": b, index, size}: b indexes the threadblock's remote table
                          of the op's channel_type */
  SHUNT_REF_SWITCH     /* {"switch_channel_id": c, index, size}: c indexes the threadblock's
                          switch channel table */
};

/* One element of src_buff / dst_buff. */
struct shunt_plan_ref {
  enum shunt_ref_kind kind;
  enum shunt_buf_type type; /* LOCAL: as written. REMOTE/SWITCH: resolved buffer type, valid
                               when `global` >= 0 */
  uint32_t id;              /* REMOTE: buffer_id; SWITCH: switch_channel_id; LOCAL: 0 */
  uint32_t index;           /* first chunk */
  uint32_t size;            /* number of chunks */
  int32_t rank;             /* the optional "rank" key (gstore sources); -1 when absent */
  /* Resolved through the threadblock tables: REMOTE -> index into gpu.remote_buffers,
   * SWITCH -> index into gpu.channels[SWITCH]; -1 when out of range or LOCAL. */
  int32_t global;
  /* Resolved: REMOTE -> the peer rank owning the buffer; -1 otherwise. */
  int32_t peer;
};

struct shunt_plan_op {
  enum shunt_op_type type;
  uint32_t json_index; /* position in its `ops` array */
  enum shunt_chan_type channel_type;
  bool has_channel_type; /* the key was present (the literal "none" sets it too) */
  uint32_t nchannel_ids;
  uint32_t* channel_ids;   /* indices into the threadblock's table of channel_type */
  int32_t* channel_global; /* resolved: global channel index per entry (same length), -1 if out of range */
  uint32_t nsrc, ndst;
  struct shunt_plan_ref* src;
  struct shunt_plan_ref* dst;
  bool has_tbg;              /* tbg_info present */
  uint32_t tbg_id, tbg_size; /* slice tbg_id of tbg_size (docs/plan-format.md §4.2) */
  bool has_barrier;          /* barrier_id / num_threadblocks present */
  uint32_t barrier_id;
  uint32_t num_threadblocks;
  uint32_t nsemaphore_ids;
  uint32_t* semaphore_ids; /* indices into gpu.semaphores */
  enum shunt_plan_redop reduce_op;
  /* pipeline only (iter_context and the nested ops; nesting deeper than one is rejected) */
  uint64_t unit_size;  /* bytes per iteration window */
  uint32_t num_chunks; /* chunks covered by the pipeline */
  uint32_t nops;
  struct shunt_plan_op* ops;
};

/* A local channel table entry of a threadblock: {"channel_type": t, "channel_ids": [...]}.
 * Several entries of one type are concatenated into one table. */
struct shunt_plan_table {
  uint32_t n;
  uint32_t* ids; /* global indices (channels of that type, or remote buffers) */
};

struct shunt_plan_threadblock {
  uint32_t id;
  uint32_t nops;
  struct shunt_plan_op* ops;
  uint32_t nops_flat;                                    /* ops incl. pipeline bodies (the 64-op limit) */
  struct shunt_plan_table channels[SHUNT_CHAN_TYPES];    /* [MEMORY], [PORT], [SWITCH]; [NONE] empty */
  struct shunt_plan_table remote_refs[SHUNT_CHAN_TYPES]; /* [MEMORY], [PORT]; others empty */
};

/* One channel: one element of a `connected_to` list, or one `rank_groups` element. */
struct shunt_plan_channel {
  enum shunt_chan_type type;
  int32_t peer;                    /* MEMORY/PORT: the peer rank; SWITCH: -1 */
  uint32_t peer_ordinal;           /* MEMORY/PORT: k when this is this GPU's k-th channel of this
                                      type to `peer`; it pairs with the peer's k-th one back (§6.2) */
  enum shunt_buf_type buffer_type; /* SWITCH: the bound local buffer */
  uint32_t group_size;             /* SWITCH: the "size" key as written (unused by the format) */
  uint32_t nranks;                 /* SWITCH: multicast group */
  int32_t* ranks;
  uint32_t decl_index; /* position in gpu's `channels` array */
  uint32_t elem_index; /* position in `connected_to` / `rank_groups` */
};

struct shunt_plan_remote_buffer {
  int32_t rank;
  enum shunt_buf_type type;
  unsigned access;                      /* bit (1u << SHUNT_CHAN_MEMORY) | (1u << SHUNT_CHAN_PORT) */
  int32_t type_index[SHUNT_CHAN_TYPES]; /* per access type numbering (§3.3), -1 when not accessible */
};

struct shunt_plan_gpu {
  int32_t id;
  uint32_t input_chunks, output_chunks, scratch_chunks;
  /* Channels per type in global-index order (concatenation of the declarations of that type). */
  uint32_t nchannels[SHUNT_CHAN_TYPES];
  struct shunt_plan_channel* channels[SHUNT_CHAN_TYPES];
  uint32_t nremote_buffers;
  struct shunt_plan_remote_buffer* remote_buffers;
  uint32_t nsemaphores;
  int32_t* semaphores; /* init_value per semaphore */
  uint32_t nthreadblocks;
  struct shunt_plan_threadblock* threadblocks;
  bool has_threadblocks; /* the key was present */
};

struct shunt_plan {
  const char* file; /* path it was loaded from (or the label given to the parser) */
  const char* name;
  const char* collective; /* as written */
  enum shunt_coll coll;
  const char* protocol; /* as written */
  bool ll;              /* protocol == "LL": packet mode */
  bool inplace;
  bool reuse_resources;
  uint32_t num_threads_per_block; /* default 1024 */
  bool use_double_scratch_buffer;
  uint32_t buffer_alignment;       /* default 16 */
  uint64_t min_message_size;       /* inclusive, default 0 */
  uint64_t max_message_size;       /* inclusive, default UINT64_MAX */
  uint32_t ranks_per_node;         /* derived (the format has no such key): the size of the
                                      consecutive rank groups its memory and switch channels
                                      join, which must each share a host; 0: any placement */
  enum shunt_plan_redop reduce_op; /* the one non-sum reduce_op its ops name, else SUM or NONE */
  /* Broadcast: the rank whose input every rank receives. shunt's extension to the format: the
   * optional top-level "root" key (MSCCL++ has no broadcast plans), default 0. A plan serves
   * any root by renaming its ranks (plan/rotate.h). */
  uint32_t root;
  uint32_t ngpus;
  struct shunt_plan_gpu* gpus;
  uint64_t content_hash; /* FNV-1a 64 of the file's bytes */
  void* arena_;          /* owner of every allocation above */
};

/* The canonical spelling of an op / channel type / buffer type, as in the JSON. */
const char* shunt_op_name(enum shunt_op_type t);
const char* shunt_chan_type_name(enum shunt_chan_type t);
const char* shunt_buf_type_name(enum shunt_buf_type t); /* "i", "o", "s" */
const char* shunt_coll_name(enum shunt_coll c);
const char* shunt_plan_redop_name(enum shunt_plan_redop r);
/* The collective a plan's `collective` string names (compared literally; SHUNT_COLL_OTHER for
 * any other string). */
enum shunt_coll shunt_coll_of_name(const char* s);
/* The reduce_op a plan must name (or leave at sum) to serve a call's op: PROD, MIN or MAX for
 * those ops; SUM for sum, avg and PreMulSum, which sum each contribution once after scaling it;
 * NONE for an op no plan computes (SUMPOSTDIV, OTHER). */
enum shunt_plan_redop shunt_plan_redop_for(enum shunt_redop op);

/* Op classes used by checks and executors. */
bool shunt_op_is_packet(enum shunt_op_type t);    /* reads or writes LL packets */
bool shunt_op_is_sync(enum shunt_op_type t);      /* nop, barrier, signal/wait family, flush, semaphores */
bool shunt_op_is_pipelined(enum shunt_op_type t); /* honours the pipeline window (§5.4) */

/* Releases everything the plan owns; NULL is fine. */
void shunt_plan_free(struct shunt_plan* p);

#endif
