/* The backend interface (exec/backend.h): the shared part and the dispatch. */
#include "exec/backend.h"

#include <stdio.h>
#include <stdlib.h>

#include "util/status.h"

#define PROGRAM_CACHE 64

struct shunt_backend* shunt_backend_new(enum shunt_backend_kind kind, uint32_t rank, uint32_t nranks,
                                        const struct shunt_world_exchange* ex, int device) {
  struct shunt_backend* b =
      kind == SHUNT_BACKEND_GPU ? shunt_gpu_backend_alloc() : shunt_host_backend_alloc();
  if (!b) return NULL;
  b->ops = kind == SHUNT_BACKEND_GPU ? &shunt_gpu_backend_ops : &shunt_host_backend_ops;
  b->kind = kind;
  b->rank = rank;
  b->nranks = nranks;
  b->ex = *ex;
  b->device = device;
  return b;
}

uint64_t shunt_backend_round(uint64_t x) {
  uint64_t p = 4096;
  while (p < x) p <<= 1;
  return p;
}

enum shunt_backend_kind shunt_backend_kind(const struct shunt_backend* b) {
  return b->kind;
}

int shunt_backend_prepare(struct shunt_backend* b, const struct shunt_plan* plan, const struct shunt_split* s,
                          char* err, size_t len) {
  return b->ops->prepare(b, plan, s, err, len);
}

int shunt_backend_run(struct shunt_backend* b, const struct shunt_backend_call* call, char* err, size_t len) {
  if (!b->programs && !(b->programs = shunt_lower_cache_create(PROGRAM_CACHE))) {
    if (err && len) snprintf(err, len, "out of memory for the program cache");
    return SHUNT_E_NOMEM;
  }
  /* A root whose buffers partly overlap: its peers cannot see it and have chosen the plan, so it
   * runs it too, in place, its input moved into its output first. */
  const struct shunt_split* sp = call->split;
  if (!shunt_coll_root_overlap(call->plan->coll, call->in, call->out, sp->call.in_bytes, sp->call.out_bytes))
    return b->ops->run(b, call, err, len);
  struct shunt_backend_call moved = *call;
  struct shunt_split moved_split = *sp;
  moved_split.inplace = true;
  moved.split = &moved_split;
  moved.move_from = call->in;
  moved.in = call->out;
  return b->ops->run(b, &moved, err, len);
}

int shunt_backend_check(struct shunt_backend* b, char* err, size_t len) {
  return b->ops->check(b, err, len);
}

void shunt_backend_abort(struct shunt_backend* b) {
  if (b) b->ops->abort(b);
}

void shunt_backend_drop_programs(struct shunt_backend* b) {
  if (b && b->programs && b->kind == SHUNT_BACKEND_HOST) {
    /* The GPU backend's uploads name its programs: they stay while its world does. */
    shunt_lower_cache_destroy(b->programs);
    b->programs = NULL;
  }
}

static void end(struct shunt_backend* b, bool collective) {
  if (!b) return;
  b->ops->free_world(b, collective);
  b->ops->end(b);
  if (b->programs) shunt_lower_cache_destroy(b->programs);
  free(b);
}

void shunt_backend_release(struct shunt_backend* b) {
  end(b, false);
}
void shunt_backend_destroy(struct shunt_backend* b) {
  end(b, true);
}
