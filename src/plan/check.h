/* Static checks of a parsed plan. A plan with any error here must never reach selection.
 *
 * Promises: every error names the file, the JSON path and the reason; checks never stop at
 * the first error (up to SHUNT_PLAN_ERRORS_MAX are kept). Pure functions of the plan.
 *
 * shunt_plan_check covers:
 * - structure: gpus[i].id == i, threadblocks[k].id == k, at least one GPU and threadblock,
 *   min_message_size <= max_message_size, same chunk counts on every GPU and counts that fit
 *   the collective (allreduce/alltoall: input == output; allgather: output == input * ranks;
 *   reducescatter: input == output * ranks), not both input and output chunk counts zero;
 * - channels: peers in range and not the GPU itself, switch groups valid; threadblock channel
 *   and remote-buffer tables point at existing entries of the right access type; every
 *   remote buffer is reached through a channel of its access type to its rank;
 * - ops: operands of the kinds the op takes (docs/plan-format.md §5.3), channel ids and remote
 *   buffer ids within the threadblock's tables, chunk index + size within the buffer
 *   (input_chunks, output_chunks, scratch_chunks of the owning rank), packet ops only in LL
 *   plans and only on scratch packets, semaphore ids in range, one reduce_op per plan;
 * - encoding limits (shunt's, below; docs/plan-format.md §9 lists MSCCL++'s narrower ones): 64
 *   channels and 64 remote buffers per type per block, 64 channel ids and 64 src/dst entries
 *   per op, 256 ops per block (pipeline bodies included), 16 barrier ids, 16 semaphore ids per
 *   op, 1..1024 threads per block, pipeline unit sizes below 2^32, buffer_alignment a positive
 *   multiple of 16;
 * - balance per execution: for every channel pair (the k-th channel of a type from rank a to
 *   b pairs with the k-th from b to a) as many signals as waits; per semaphore as many
 *   acquires as releases; barriers joined by exactly num_threadblocks blocks. Ops inside a
 *   pipeline are counted per pipeline shape (unit_size, num_chunks).
 * - the threadblock count against opts->max_threadblocks (0: no limit).
 *
 * shunt_plan_check_races is separate: the hazards no local barrier can order, between blocks
 * of different ranks (a thread-block slice read across ranks before the signal of the peer
 * block that wrote it), and across calls back to back: a rank that can finish a call without
 * depending, directly or through others, on every other rank (so it could run calls ahead and
 * a later plan's packets land in a slower rank's live scratch half), that writes a peer's
 * input or output before depending on that peer in the call, or that writes a peer's single
 * scratch (no double scratch buffer) before depending on that peer while a read of those
 * chunks there comes before no op of the writer in the call (the writer's next call could
 * overwrite them mid-read).
 *
 * shunt_plan_block_syncs: hazards between the threads of one threadblock (docs/plan-format.md
 * §5.5), decided per element and thread: an op that reads or overwrites bytes an earlier op
 * wrote in another thread with no LL flag ordering them, a signal publishing other threads'
 * writes, a data op right after a wait, each with no nop or barrier in between. They are not
 * errors: the lowering adds the block barrier the plan left out before each such op. */
#ifndef SHUNT_PLAN_CHECK_H
#define SHUNT_PLAN_CHECK_H

#include "plan/error.h"
#include "plan/plan.h"

struct shunt_check_opts {
  uint32_t max_threadblocks; /* the backend's limit on blocks per plan; 0 = no limit */
};

/* Returns the number of errors found (also appended to errs). */
unsigned shunt_plan_check(const struct shunt_plan* p, const struct shunt_check_opts* opts,
                          struct shunt_plan_errors* errs);
unsigned shunt_plan_check_races(const struct shunt_plan* p, struct shunt_plan_errors* errs);

/* Calls fn for every op of gpus[r].threadblocks[b] before which a block barrier must run:
 * ops[i], or ops[i].ops[j] inside a pipeline (j = -1 outside), with why; returns how many. */
typedef void (*shunt_plan_sync_fn)(void* arg, uint32_t i, int32_t j, const char* why);
unsigned shunt_plan_block_syncs(const struct shunt_plan* p, uint32_t r, uint32_t b, shunt_plan_sync_fn fn,
                                void* arg);
/* The same for every block, each appended to notes with its JSON path; returns how many. */
unsigned shunt_plan_missing_barriers(const struct shunt_plan* p, struct shunt_plan_errors* notes);

/* Limits of shunt's executor (docs/plan-format.md §9 lists MSCCL++'s). The Program's encoding
 * holds up to 255 channels and entries per op and has no per-type table limit; these bounds
 * are set to take every plan MSCCL++'s DSL writes for up to 32 ranks (an op naming each of 31
 * peers, plus its local buffer) with room to spare, while keeping the checks linear in the
 * size of any input. Ops per block (pipeline bodies included): MSCCL++'s alltoall ring plans
 * take 6 x ranks - 1 (95 at 16 ranks, 191 at 32); the bound keeps the race checker's cost,
 * quadratic in a block's ops, small, and the JSON positions within 16 bits. */
#define SHUNT_PLAN_MAX_CHANNELS_PER_TYPE 64
#define SHUNT_PLAN_MAX_REMOTE_PER_TYPE 64
#define SHUNT_PLAN_MAX_CHANNELS_PER_OP 64
#define SHUNT_PLAN_MAX_ENTRIES_PER_OP 64
#define SHUNT_PLAN_MAX_OPS_PER_BLOCK 256
#define SHUNT_PLAN_MAX_BARRIERS 16
#define SHUNT_PLAN_MAX_SEMAPHORES_PER_OP 16
#define SHUNT_PLAN_MAX_THREADS 1024

#endif
