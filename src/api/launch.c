#include "api/launch.h"

#include <stdlib.h>

#include "comm/bootstrap.h"
#include "exec/host/host_call.h"
#include "exec/host/host_run.h"
#include "exec/lower.h"
#include "util/log.h"

#define PROGRAM_CACHE 64

static int world_allgather(void* ctx, void* buf, size_t bytes) {
  char err[256];
  return shunt_bootstrap_allgather(ctx, buf, bytes, err, sizeof(err));
}

static int world_barrier(void* ctx) {
  char err[256];
  return shunt_bootstrap_barrier(ctx, err, sizeof(err));
}

static uint64_t round_up_pow2(uint64_t x) {
  uint64_t p = 4096;
  while (p < x) p <<= 1;
  return p;
}

/* Makes or grows the world so that both parts of this call fit (exec/split.h). Collective:
 * every rank splits the call the same way. */
static ncclResult_t ensure_world(struct shunt_comm* c, const struct shunt_plan* plan,
                                 const struct shunt_split* s) {
  uint64_t scratch, in_need, out_need;
  shunt_split_needs(plan, s, &scratch, &in_need, &out_need);
  struct shunt_world* w = c->world;
  if (w && w->cfg.scratch_bytes >= scratch && w->cfg.input_bytes >= in_need &&
      w->cfg.output_bytes >= out_need)
    return ncclSuccess;
  struct shunt_world_config cfg = {round_up_pow2(scratch), round_up_pow2(in_need), round_up_pow2(out_need)};
  if (w) {
    if (w->cfg.scratch_bytes > cfg.scratch_bytes) cfg.scratch_bytes = w->cfg.scratch_bytes;
    if (w->cfg.input_bytes > cfg.input_bytes) cfg.input_bytes = w->cfg.input_bytes;
    if (w->cfg.output_bytes > cfg.output_bytes) cfg.output_bytes = w->cfg.output_bytes;
    __atomic_store_n(&c->world, NULL, __ATOMIC_RELEASE);
    shunt_world_destroy(w);
  }
  struct shunt_world_exchange ex = {c->boot, world_allgather, world_barrier};
  char err[512];
  /* Published whole: a teardown in another thread reads it to abort waits on it. */
  struct shunt_world* made = NULL;
  int failed = shunt_world_create((uint32_t)c->rank, (uint32_t)c->nranks, &cfg, &ex, &made, err, sizeof(err));
  __atomic_store_n(&c->world, made, __ATOMIC_RELEASE);
  if (failed) {
    SHUNT_WARN("rank %d: the host backend could not map its shared memory: %s", c->rank, err);
    return ncclSystemError;
  }
  return ncclSuccess;
}

ncclResult_t shunt_launch(struct shunt_comm* c, const struct shunt_call* call) {
  const struct shunt_plan* plan = call->entry->plan;
  if (!c->programs && !(c->programs = shunt_lower_cache_create(PROGRAM_CACHE))) {
    SHUNT_WARN("out of memory for the program cache");
    return ncclSystemError;
  }
  struct shunt_call_shape shape = {call->in_bytes, call->out_bytes, call->dtype, call->op, 0, 0, false};
  char msg[4096];
  struct shunt_split s;
  if (!shunt_split_call(plan, &shape, &s, msg, sizeof(msg))) {
    SHUNT_WARN("plan %s cannot serve this call: %s", plan->name, msg);
    return ncclInternalError;
  }
  ncclResult_t rc = ensure_world(c, plan, &s);
  if (rc != ncclSuccess) return rc;
  struct shunt_host_run_opts opts = {0, call->scalar_ptr ? call->scalar_ptr : call->scalar};
  int r = shunt_host_run_call(c->world, c->programs, plan, (uint32_t)c->rank, &shape, &s, call->send,
                              call->recv, &opts, &c->tail, msg, sizeof(msg));
  if (r == SHUNT_EXEC_OK) return ncclSuccess;
  SHUNT_WARN("rank %d: plan %s failed: %s", c->rank, plan->name, msg);
  ncclResult_t err = r == SHUNT_EXEC_TIMEOUT ? ncclSystemError
                     : r == SHUNT_EXEC_NOMEM ? ncclSystemError
                                             : ncclInternalError;
  atomic_store(&c->async_error, (int)err);
  return err;
}

void shunt_launch_release(struct shunt_comm* c) {
  if (c->world) shunt_world_release(c->world);
  c->world = NULL;
  if (c->programs) shunt_lower_cache_destroy(c->programs);
  c->programs = NULL;
  shunt_host_tail_free(&c->tail);
}
