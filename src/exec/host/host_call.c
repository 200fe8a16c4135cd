#include "exec/host/host_call.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct part_ctx {
  struct shunt_world* w;
  struct shunt_lower_cache* cache;
  const struct shunt_plan* plan;
  uint32_t rank;
  const struct shunt_host_run_opts* opts;
  struct shunt_host_keep** keep;
  char* err;
  size_t len;
};

static int run_part(void* arg, const struct shunt_call_shape* shape, bool tail, const void* in, void* out) {
  (void)tail;
  struct part_ctx* c = arg;
  const struct shunt_program* prog = shunt_lower_cache_get(c->cache, c->plan, c->rank, shape, c->err, c->len);
  if (!prog) return SHUNT_E_INVALID;
  int r = shunt_host_run_kept(c->w, prog, in, out, c->opts, c->keep, c->err, c->len);
  shunt_lower_cache_release(c->cache, prog);
  return r;
}

int shunt_host_run_call(struct shunt_world* w, struct shunt_lower_cache* cache, const struct shunt_plan* plan,
                        uint32_t rank, const struct shunt_split* s, const void* in, void* out,
                        const struct shunt_host_run_opts* opts, struct shunt_host_reuse* reuse, char* err,
                        size_t len) {
  uint32_t a = 0, b = 0;
  if (!shunt_world_fits(w, plan->ranks_per_node, &a, &b))
    SHUNT_FAIL(SHUNT_E_INVALID,
               "plan %s joins ranks %u and %u through memory, but they are on different hosts", plan->name, a,
               b);
  uint64_t need = s->tail_bytes;
  if (reuse->cap < need) {
    char* b = realloc(reuse->buf, need);
    if (!b) SHUNT_FAIL(SHUNT_E_NOMEM, "out of memory for a %llu-byte tail buffer", (unsigned long long)need);
    reuse->buf = b;
    reuse->cap = need;
  }
  struct part_ctx c = {w, cache, plan, rank, opts, &reuse->keep, err, len};
  return shunt_parts_run_host(plan, s, rank, in, out, reuse->buf, run_part, &c);
}

void shunt_host_reuse_free(struct shunt_host_reuse* t) {
  free(t->buf);
  t->buf = NULL;
  t->cap = 0;
  shunt_host_keep_free(t->keep);
  t->keep = NULL;
}
