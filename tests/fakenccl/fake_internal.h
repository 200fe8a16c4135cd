/* Internals of the NCCL test double's computing half: communicators that meet in a POSIX
 * shared-memory segment, the collectives on host buffers, and the group queue. Only the
 * double's own files include this. */
#ifndef SHUNT_TEST_FAKE_INTERNAL_H
#define SHUNT_TEST_FAKE_INTERNAL_H

#include <nccl.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define FAKE_ID_BYTES 40 /* the part of ncclUniqueId the double owns; 40..127 belong to shunt */
#define FAKE_MAX_RANKS 4096
#define FAKE_MAX_USER_OPS 64
#define FAKE_SLOT_BYTES (1u << 20) /* staging space per rank in the segment */

/* A barrier for ranks in different processes or threads: futex on a shared generation. */
struct fake_barrier {
  _Atomic uint32_t count;
  _Atomic uint32_t gen;
  uint32_t n;
};

/* What a rank announces to its peers beside the staging slots (used by ncclCommSplit). */
struct fake_rank_info {
  int color;
  int key;
};

/* The head of a communicator's segment; rank infos and then nranks staging slots follow. */
struct fake_segment {
  _Atomic uint32_t ready; /* FAKE_SEGMENT_READY once the creator has set it up */
  int nranks;
  _Atomic int joined;
  struct fake_barrier barrier;
};
#define FAKE_SEGMENT_READY 0x6e63636cu

struct fake_user_op {
  int in_use;
  ncclDataType_t dtype;
  ncclScalarResidence_t residence;
  unsigned char scalar[8]; /* host-immediate value */
  const void* scalar_ptr;  /* ncclScalarDevice: a host pointer here, read at each call */
};

/* The double's communicator. ncclComm_t points at one of these. */
struct ncclComm {
  uint32_t magic;
  int rank, nranks;
  int ready;     /* 0 while an init queued in a group has not run yet */
  char name[96]; /* the segment's name */
  struct fake_segment* seg;
  size_t seg_bytes;
  int splits; /* how many splits this rank has made of this comm: names the children */
  int shrinks; /* likewise for shrinks */
  int blocking; /* config.blocking: 0 runs init, split and shrink in a thread of their own */
  _Atomic int async; /* ncclCommGetAsyncError's answer: ncclInProgress while such a job runs */
  struct fake_user_op ops[FAKE_MAX_USER_OPS];
};

/* Communicators (fake_comm.c). */
struct ncclComm* fake_comm_find(ncclComm_t comm); /* NULL unless comm is one of the double's */
ncclResult_t fake_comm_new(struct ncclComm** out, int nranks, int rank, const ncclUniqueId* id);
ncclResult_t fake_comm_connect(struct ncclComm* c); /* the rendezvous; blocks until all ranks join */
ncclResult_t fake_comm_split(struct ncclComm* parent, int color, int key, ncclComm_t* newcomm);
/* The ranks not excluded (sorted list) form a child in their old order; never waits on the
 * excluded ones. */
ncclResult_t fake_comm_shrink(struct ncclComm* parent, const int* exclude, int nexclude, ncclComm_t* newcomm);
/* config->blocking as NCCL reads it (1 when unset). */
int fake_config_blocking(const ncclConfig_t* config);
/* Runs an init (newcomm NULL), split or shrink of c in a thread of its own: c reports
 * ncclInProgress until it is done, and *newcomm is written at the end. */
ncclResult_t fake_async_start(struct ncclComm* c, int kind, int color, int key, const int* exclude, int nexclude,
                              ncclComm_t* newcomm);
enum { FAKE_ASYNC_INIT, FAKE_ASYNC_SPLIT, FAKE_ASYNC_SHRINK };
void fake_comm_free(struct ncclComm* c);
void fake_segment_unmap(struct ncclComm* c);
ncclResult_t fake_barrier_wait(struct fake_barrier* b);
unsigned char* fake_slot(struct ncclComm* c, int rank);
struct fake_rank_info* fake_info(struct ncclComm* c, int rank);

/* Reductions resolved from (op, dtype): what each rank stages and how slots combine. */
enum fake_combine { FAKE_SUM, FAKE_PROD, FAKE_MIN, FAKE_MAX };
struct fake_redop {
  enum fake_combine combine;
  int premul;        /* stage x * scalar instead of x (PreMulSum, floating avg) */
  double scalar_f;   /* the scalar for floating types */
  uint64_t scalar_u; /* the scalar for integer types */
  int post_div;      /* integer avg: divide the sum by nranks */
};
ncclResult_t fake_redop_resolve(struct ncclComm* c, ncclRedOp_t op, ncclDataType_t dtype,
                                struct fake_redop* out);

/* Element conversion (fake_dtype.c). Integers travel as uint64 (two's complement), floating
 * types as double. */
size_t fake_dtype_size(ncclDataType_t t); /* 0 for an unknown type */
int fake_dtype_is_float(ncclDataType_t t);
int fake_dtype_is_signed(ncclDataType_t t);
double fake_load_f(ncclDataType_t t, const void* p, size_t i);
void fake_store_f(ncclDataType_t t, void* p, size_t i, double v);
uint64_t fake_load_u(ncclDataType_t t, const void* p, size_t i);
void fake_store_u(ncclDataType_t t, void* p, size_t i, uint64_t v);

/* Collectives on host buffers (fake_coll.c), with arguments already checked. */
enum fake_coll_kind {
  FAKE_ALLREDUCE,
  FAKE_ALLGATHER,
  FAKE_BROADCAST,
  FAKE_REDUCESCATTER,
  FAKE_ALLTOALL,
  FAKE_REDUCE
};
struct fake_coll {
  enum fake_coll_kind kind;
  const void* send;
  void* recv;
  size_t count; /* NCCL's count argument */
  ncclDataType_t dtype;
  struct fake_redop op;
  int root;
  cudaStream_t stream; /* where a slowed collective spends its time (FAKE_NCCL_SLOW) */
};
ncclResult_t fake_coll_run(struct ncclComm* c, const struct fake_coll* a);
/* Brackets the double's work on user buffers, which may be device memory (begin 1, then 0). */
void fake_device_work(int begin);

/* Groups (fake_group.c). */
int fake_group_depth(void);
void fake_group_start(void);
ncclResult_t fake_group_end(void);
/* Queues work for the outermost ncclGroupEnd: a collective, the rendezvous of an init, or a split. */
ncclResult_t fake_group_add_coll(struct ncclComm* c, const struct fake_coll* a);
ncclResult_t fake_group_add_init(struct ncclComm* c);
ncclResult_t fake_group_add_split(struct ncclComm* c, int color, int key, ncclComm_t* newcomm);

#endif
