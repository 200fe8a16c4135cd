/* The executor backends as the API layer sees them: one small interface, no CUDA type.
 *
 * - host: plans run in the calling thread on host memory (exec/host, transport/world.h); a
 *   call is complete when run returns.
 * - gpu: plans run as kernels enqueued on the caller's stream on device memory (exec/gpu); a
 *   call is complete when the stream reaches it; run never waits for the device.
 *
 * Promises:
 * - A backend belongs to one rank of one communicator. prepare makes or grows its world so that
 *   both parts of a call of `plan` split as `s` fit (exec/split.h: the sizes `s` carries, never
 *   derived again from the plan); it is collective (every rank reaches it at the same call, as
 *   every rank selects the same plan) and does nothing when the world already fits.
 * - run runs one call (its head and tail parts); SHUNT_OK or a SHUNT_E_* code (util/status.h)
 *   with a message. After a failure the world is broken and later runs are refused. A root's
 *   partly overlapping buffers are handled here, alike for every backend: its input moved into
 *   its output first (the backend's own copy), then the call in place.
 * - check reports a failure that happened after run returned (a GPU kernel that gave up
 *   waiting): SHUNT_OK, or the code of why it gave up (SHUNT_E_TIMEOUT, SHUNT_E_PEER,
 *   SHUNT_E_ABORTED, a proxy's SHUNT_E_CUDA or SHUNT_E_NET) with a message. Safe at any time.
 * - abort makes every wait of this rank's runs give up; callable from any thread while a run
 *   is under way (host: while prepare replaces the world too, and the world it makes then
 *   starts aborted). release frees this rank's part without waiting on peers (teardown);
 *   destroy does it collectively. */
#ifndef SHUNT_EXEC_BACKEND_H
#define SHUNT_EXEC_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "exec/lower.h"
#include "exec/split.h"
#include "plan/plan.h"
#include "transport/world.h"

enum shunt_backend_kind { SHUNT_BACKEND_HOST = 0, SHUNT_BACKEND_GPU = 1 };

struct shunt_backend_call {
  const struct shunt_plan* plan;
  /* The call's shape (its real sizes, split and sizes of both parts), computed once where the
   * call was selected and given to prepare. */
  const struct shunt_split* split;
  const void* in;
  void* out; /* NULL: this rank has no output (a reduce's other ranks): the plan writes staging */
  /* Set by shunt_backend_run, never by its caller: a root whose buffers partly overlap
   * (util/coll_traits.h: shunt_coll_root_overlap) has its input here, which the backend moves
   * into `out` first, in order with the run; `in` is then `out` and the call runs in place. */
  const void* move_from;
  void* stream;          /* gpu: the caller's stream */
  const void* scalar;    /* PREMULSUM: one element of the dtype */
  bool scalar_on_device; /* scalar is device memory (ncclScalarDevice): the kernel reads it */
  uint64_t timeout_ms;   /* bound of every wait (0: the backend's default) */
};

struct shunt_backend;

/* A backend of `kind` for `rank` of `nranks` exchanging over `ex` (kept; must outlive it).
 * device: the CUDA device ordinal for gpu. NULL only when out of memory. */
struct shunt_backend* shunt_backend_new(enum shunt_backend_kind kind, uint32_t rank, uint32_t nranks,
                                        const struct shunt_world_exchange* ex, int device);
enum shunt_backend_kind shunt_backend_kind(const struct shunt_backend* b);

int shunt_backend_prepare(struct shunt_backend* b, const struct shunt_plan* plan, const struct shunt_split* s,
                          char* err, size_t len);
int shunt_backend_run(struct shunt_backend* b, const struct shunt_backend_call* call, char* err, size_t len);
int shunt_backend_check(struct shunt_backend* b, char* err, size_t len);
void shunt_backend_abort(struct shunt_backend* b);
/* Frees the lowered programs (they are made again on demand); the world stays. */
void shunt_backend_drop_programs(struct shunt_backend* b);
void shunt_backend_release(struct shunt_backend* b);
void shunt_backend_destroy(struct shunt_backend* b);

/* ---- GPU only ------------------------------------------------------------------------------ */

/* The calling thread's current CUDA device, or -1 (no driver in the process, no context). */
int shunt_gpu_current_device(void);
/* Whether `stream` is being captured into a CUDA graph (false without a driver). */
bool shunt_gpu_stream_capturing(void* stream);

/* Registers [buf, buf + bytes) of device memory for zero-copy on a GPU backend (local; every
 * call that could use it agrees with every rank whether it does: exec/gpu/gpu_reg.h). A handle,
 * or NULL with a message. Deregistering waits for nothing (peer mappings stay with the
 * backend). */
void* shunt_backend_register(struct shunt_backend* b, void* buf, size_t bytes, char* err, size_t len);
void shunt_backend_deregister(struct shunt_backend* b, void* handle);

/* Device memory shunt allocates itself (ncclMemAlloc): in the calling thread's current
 * context, exportable through CUDA IPC. 0, or SHUNT_E_CUDA (no driver or context, the driver
 * refused) or SHUNT_E_NOMEM, err saying which. free answers whether p was one of these
 * (0: it was, and is freed; -1: it was not). */
int shunt_gpu_mem_alloc(size_t bytes, void** out, char* err, size_t len);
int shunt_gpu_mem_free(void* p);

/* The self-check's verdict for one communicator (the same on every rank). */
struct shunt_gpu_verdict_info {
  bool ok;
  uint32_t runs;  /* plan runs made on this rank */
  uint32_t unfit; /* plans this GPU cannot run for this communicator (their blocks cannot all be resident) */
  double ms;      /* wall time of the whole check on this rank */
  uint32_t rank;  /* !ok: the first rank that failed */
  uint64_t bytes; /* !ok: the call size that failed (the collective's total bytes) */
  char plan[96];  /* !ok: the plan */
  char what[320]; /* !ok: what went wrong (mismatch, timeout, launch error) */
  bool busy;      /* !ok: inconclusive, the device was busy on every try (no fault of shunt's) */
  uint32_t tries; /* !ok: runs of the failing size (more than 1: retried, the device was busy) */
};

/* Collective over b's exchange (a GPU backend): runs every plan of `plans` on shunt's own
 * device buffers at the smallest size its chunk rule takes, that size plus one element (the
 * padded tail) and about 1 MiB, float sum for allreduce, exactly compared, every wait bounded
 * by timeout_ms; after each run the ranks vote, and the first failure ends the check. A plan
 * the GPU cannot run at all for this many ranks (SHUNT_E_UNFIT on any rank) is no failure:
 * unfit[i] (nplans entries) says so, the same on every rank, and its calls must go elsewhere. On
 * failure the backend's world is gone. Returns 0 when every rank passed. */
int shunt_gpu_selfcheck(struct shunt_backend* b, const struct shunt_plan* const* plans, uint32_t nplans,
                        uint64_t timeout_ms, bool* unfit, struct shunt_gpu_verdict_info* out);

/* The size a world section is made with for `x` bytes: a power of two from 4 KiB, so that
 * growing calls rebuild worlds rarely. */
uint64_t shunt_backend_round(uint64_t x);

/* What each backend implements (exec/host/host_backend.c, exec/gpu/gpu_backend.c). */
struct shunt_backend_ops {
  const char* name;
  int (*prepare)(struct shunt_backend* b, const struct shunt_plan* plan, const struct shunt_split* s,
                 char* err, size_t len);
  int (*run)(struct shunt_backend* b, const struct shunt_backend_call* call, char* err, size_t len);
  int (*check)(struct shunt_backend* b, char* err, size_t len);
  void (*abort)(struct shunt_backend* b);
  /* Frees the world: collective when `collective`, else without waiting on peers. */
  void (*free_world)(struct shunt_backend* b, bool collective);
  /* Frees what outlives worlds (registrations), after free_world. */
  void (*end)(struct shunt_backend* b);
};

/* The part every backend shares; each embeds it first. */
struct shunt_backend {
  const struct shunt_backend_ops* ops;
  enum shunt_backend_kind kind;
  uint32_t rank, nranks;
  struct shunt_world_exchange ex;
  int device;
  struct shunt_lower_cache* programs;
};

extern const struct shunt_backend_ops shunt_host_backend_ops;
extern const struct shunt_backend_ops shunt_gpu_backend_ops;
/* Each backend's state beyond the shared part (calloc'd, freed by free_world and the caller). */
struct shunt_backend* shunt_host_backend_alloc(void);
struct shunt_backend* shunt_gpu_backend_alloc(void);

#endif
