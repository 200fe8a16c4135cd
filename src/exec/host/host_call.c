#include "exec/host/host_call.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int run_part(struct shunt_world* w, struct shunt_lower_cache* cache, const struct shunt_plan* plan,
                    uint32_t rank, const struct shunt_call_shape* shape, const void* in, void* out,
                    const struct shunt_host_run_opts* opts, char* err, size_t len) {
  const struct shunt_program* prog = shunt_lower_cache_get(cache, plan, rank, shape, err, len);
  if (!prog) return SHUNT_EXEC_INVALID;
  int r = shunt_host_run(w, prog, in, out, opts, err, len);
  shunt_lower_cache_release(cache, prog);
  return r;
}

int shunt_host_run_call(struct shunt_world* w, struct shunt_lower_cache* cache, const struct shunt_plan* plan,
                        uint32_t rank, const struct shunt_call_shape* call, const struct shunt_split* s,
                        const void* in, void* out, const struct shunt_host_run_opts* opts,
                        struct shunt_host_tail* tail, char* err, size_t len) {
  uint64_t R = call->in_bytes; /* per-rank input bytes, the output's rank stride for allgather */
  /* In place as NCCL defines it (the input inside the output): the tail runs in place too, so
   * an in-place plan sees the layout it was written for. */
  bool inplace = (const char*)in >= (const char*)out && (const char*)in < (const char*)out + call->out_bytes;
  if (s->head) {
    int r = run_part(w, cache, plan, rank, &s->head_shape, in, out, opts, err, len);
    if (r != SHUNT_EXEC_OK) return r;
  }
  if (!s->rest) return SHUNT_EXEC_OK;
  uint64_t q = s->quantum, need = shunt_split_tail_bytes(plan, s);
  if (tail->cap < need) {
    char* b = realloc(tail->buf, need);
    if (!b) {
      if (err && len)
        snprintf(err, len, "out of memory for a %llu-byte tail buffer", (unsigned long long)need);
      return SHUNT_EXEC_NOMEM;
    }
    tail->buf = b;
    tail->cap = need;
  }
  /* Padding is zeros: it only ever meets padding (split.h), and zeros are valid in every dtype. */
  memset(tail->buf, 0, need);
  char* tout = tail->buf;
  char* tin = tail->buf + shunt_split_tail_in(plan, s, rank, inplace);
  memcpy(tin, (const char*)in + s->head, s->rest);
  int r = run_part(w, cache, plan, rank, &s->tail_shape, tin, tout, opts, err, len);
  if (r != SHUNT_EXEC_OK) return r;
  for (uint32_t k = 0; k < shunt_split_slices(plan); k++)
    memcpy((char*)out + (uint64_t)k * R + s->head, tout + (uint64_t)k * q, s->rest);
  return SHUNT_EXEC_OK;
}

void shunt_host_tail_free(struct shunt_host_tail* t) {
  free(t->buf);
  t->buf = NULL;
  t->cap = 0;
}
