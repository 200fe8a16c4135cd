/* Host backend: staging, the threadblocks on the world's workers, the hang report. */
#include "exec/host/host_run.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/bind.h"
#include "exec/host/host_xctx.h"
#include "exec/ops/packet.h"
#include "util/env.h"
#include "transport/pool.h"
#include "util/log.h"

struct block_job {
  struct shunt_xctx X;
  int rc;
};

static void* block_main(void* arg) {
  struct block_job* j = arg;
  j->rc = shunt_x_block(&j->X);
  return NULL;
}

static void pool_job(void* arg, uint32_t i) {
  block_main(&((struct block_job*)arg)[i]);
}

static uint64_t timeout_ms(const struct shunt_host_run_opts* o) {
  if (o && o->timeout_ms) return o->timeout_ms;
  return (uint64_t)shunt_env_int("SHUNT_HOST_TIMEOUT_MS", 30000, 1, INT64_MAX);
}

static void appendf(char* buf, size_t len, size_t* at, const char* fmt, ...) SHUNT_PRINTF(4, 5);
static void appendf(char* buf, size_t len, size_t* at, const char* fmt, ...) {
  if (!buf || *at + 1 >= len) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf + *at, len - *at, fmt, ap);
  va_end(ap);
  if (n > 0) *at = *at + (size_t)n < len ? *at + (size_t)n : len - 1;
}

static void report(const struct shunt_program* p, const struct block_job* jobs, char* err, size_t len) {
  size_t at = 0;
  unsigned n = 0;
  for (uint32_t b = 0; b < p->nblocks; b++) n += jobs[b].rc != 0;
  appendf(err, len, &at, "timeout: %u of %u threadblocks of rank %u blocked", n, p->nblocks, p->rank);
  const struct shunt_prog_op* ops = shunt_prog_ops(p);
  for (uint32_t b = 0; b < p->nblocks; b++) {
    const struct block_job* j = &jobs[b];
    if (!j->rc) continue;
    const struct shunt_prog_op* o = &ops[shunt_prog_blocks(p)[b].first_op + j->X.op];
    char pos[48];
    if (o->json_inner >= 0)
      snprintf(pos, sizeof(pos), "ops[%u].ops[%d]", o->json_op, o->json_inner);
    else
      snprintf(pos, sizeof(pos), "ops[%u]", o->json_op);
    appendf(err, len, &at, "\n  rank %u block %u %s (%s): waits on %s: awaited %" PRIu64 ", seen %" PRIu64,
            p->rank, b, pos, shunt_op_name((enum shunt_op_type)o->type), j->X.why.what, j->X.why.awaited,
            j->X.why.seen);
  }
}

#define FAIL(code, ...)                              \
  do {                                               \
    if (err && len) snprintf(err, len, __VA_ARGS__); \
    return (code);                                   \
  } while (0)

int shunt_host_run(struct shunt_world* w, const struct shunt_program* p, const void* user_in, void* user_out,
                   const struct shunt_host_run_opts* opts, char* err, size_t len) {
  if (err && len) err[0] = 0;
  if (!w || !p || p->magic != SHUNT_PROG_MAGIC) FAIL(SHUNT_EXEC_INVALID, "no world or no program");
  if (p->rank != w->rank || p->nranks != w->nranks)
    FAIL(SHUNT_EXEC_INVALID, "program for rank %u of %u run on rank %u of %u", p->rank, p->nranks, w->rank,
         w->nranks);
  if (atomic_load(&w->broken)) FAIL(SHUNT_EXEC_INVALID, "an earlier run on this world timed out");
  uint64_t scratch_cap = p->double_scratch ? w->cfg.scratch_bytes / 2 : w->cfg.scratch_bytes;
  if (p->scratch_bytes > scratch_cap)
    FAIL(SHUNT_EXEC_INVALID, "plan needs %" PRIu64 " bytes of scratch per half, the world has %" PRIu64,
         p->scratch_bytes, scratch_cap);
  enum shunt_elem_scaling scaling = SHUNT_SCALE_NONE;
  if (p->coll == SHUNT_COLL_ALLREDUCE) {
    if (!shunt_elem_supported((enum shunt_dtype)p->dtype, (enum shunt_redop)p->redop))
      FAIL(SHUNT_EXEC_INVALID, "dtype %u with op %u is not computed by the host executor", p->dtype,
           p->redop);
    scaling = shunt_elem_scaling((enum shunt_dtype)p->dtype, (enum shunt_redop)p->redop);
    if (p->redop == SHUNT_REDOP_PREMULSUM && (!opts || !opts->premul_scalar))
      FAIL(SHUNT_EXEC_INVALID, "PreMulSum without a scalar");
  }
  uint32_t es = shunt_dtype_size((enum shunt_dtype)p->dtype);
  char* stage_in = w->peers[w->rank].input;
  char* stage_out = w->peers[w->rank].output;
  struct shunt_bind bd;
  const char* why = shunt_bind_decide(p, user_in, user_out, scaling == SHUNT_SCALE_PRE, stage_in,
                                      w->cfg.input_bytes, w->cfg.output_bytes, &bd);
  if (why)
    FAIL(SHUNT_EXEC_INVALID, "%s (buffers of %" PRIu64 "/%" PRIu64 " bytes, staging %" PRIu64 "/%" PRIu64 ")",
         why, p->in_bytes, p->out_bytes, w->cfg.input_bytes, w->cfg.output_bytes);
  bool alias = bd.alias, stage_o = bd.stage_out, stage_i = bd.stage_in;
  const void* scalar =
      p->redop == SHUNT_REDOP_PREMULSUM && opts ? opts->premul_scalar : NULL; /* avg: 1/nranks */

  struct shunt_host_shared* sh = calloc(1, sizeof(*sh));
  struct block_job* jobs = calloc(p->nblocks ? p->nblocks : 1, sizeof(*jobs));
  pthread_t* th = calloc(p->nblocks ? p->nblocks : 1, sizeof(*th));
  _Atomic int64_t* sems = calloc(p->nsems ? p->nsems : 1, sizeof(*sems));
  char* tmp = malloc((size_t)(p->nblocks ? p->nblocks : 1) * 2 * SHUNT_HOST_BATCH);
  if (!sh || !jobs || !th || !sems || !tmp) {
    free(sh), free(jobs), free(th), free(sems), free(tmp);
    FAIL(SHUNT_EXEC_NOMEM, "out of memory");
  }

  /* Bind the buffers. */
  char* out = stage_o ? stage_out : (char*)user_out;
  if (stage_o && alias && user_out != stage_out) memcpy(stage_out, user_out, p->out_bytes);
  char* in;
  if (stage_i) {
    in = stage_in;
    const char* src = alias && stage_o ? out + ((const char*)user_in - (const char*)user_out) : user_in;
    if (scaling == SHUNT_SCALE_PRE)
      shunt_elem_premul((enum shunt_dtype)p->dtype, in, src, p->in_bytes / es, scalar, p->nranks);
    else if (in != src)
      memcpy(in, src, p->in_bytes);
  } else if (alias) {
    in = out + ((const char*)user_in - (const char*)user_out);
    if (scaling == SHUNT_SCALE_PRE)
      shunt_elem_premul((enum shunt_dtype)p->dtype, in, in, p->in_bytes / es, scalar, p->nranks);
  } else {
    in = (char*)(uintptr_t)user_in; /* read only: no op of a plan writes its input */
  }

  uint64_t epoch = atomic_fetch_add(&w->epoch, 1) + 1;
  sh->w = w;
  sh->p = p;
  sh->base[0] = in;
  sh->base[1] = out;
  sh->base[2] = w->peers[w->rank].scratch;
  sh->alias = alias;
  /* The same flag and half as the GPU backend gives execution number epoch - 1 (packet.h): never
   * 0 or 0xffffffff, and the half follows the flag's parity across the wrap too. */
  sh->flag = shunt_pkt_flag_for_epoch(epoch - 1);
  sh->half = shunt_pkt_half(sh->flag, w->cfg.scratch_bytes, p->double_scratch);
  sh->deadline = shunt_now_ns() + timeout_ms(opts) * 1000000ull;
  sh->dt = (enum shunt_dtype)p->dtype;
  sh->step_op = shunt_elem_step_op((enum shunt_redop)p->redop);
  sh->esize = es ? es : 1;
  sh->sems = sems;
  for (uint32_t i = 0; i < p->nsems; i++) atomic_init(&sems[i], shunt_prog_sem_init(p)[i]);
  for (unsigned i = 0; i < 16; i++) atomic_init(&sh->bars[i], 0);
  shunt_proxy_bind(w->proxy, in, out);

  int rc = SHUNT_EXEC_OK;
  for (uint32_t b = 0; b < p->nblocks; b++) {
    struct block_job* j = &jobs[b];
    j->X = (struct shunt_xctx){.prog = p, .block = b, .tid = 0, .nthreads = 1, .sh = sh};
    j->X.tmp[0] = tmp + (size_t)b * 2 * SHUNT_HOST_BATCH;
    j->X.tmp[1] = j->X.tmp[0] + SHUNT_HOST_BATCH;
  }
  /* The world's workers run the blocks (no thread is started per run); should the pool fail
   * to grow, one thread per block is started for this run, as before. */
  if (!w->pool) w->pool = shunt_pool_create();
  bool pooled = w->pool && shunt_pool_run(w->pool, p->nblocks, pool_job, jobs) == 0;
  uint32_t started = 0;
  for (uint32_t b = 0; b < p->nblocks && !pooled; b++) {
    struct block_job* j = &jobs[b];
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    int e = pthread_create(&th[b], &attr, block_main, j);
    pthread_attr_destroy(&attr);
    if (e != 0) {
      /* Run the block on this thread rather than failing half way through a collective. */
      block_main(j);
      th[b] = 0;
      continue;
    }
    started++;
  }
  for (uint32_t b = 0; b < p->nblocks && !pooled; b++)
    if (th[b]) pthread_join(th[b], NULL);
  (void)started;
  shunt_proxy_drain(w->proxy);
  for (uint32_t b = 0; b < p->nblocks; b++)
    if (jobs[b].rc) rc = SHUNT_EXEC_TIMEOUT;
  if (rc) {
    atomic_store(&w->broken, true);
    report(p, jobs, err, len);
    SHUNT_WARN("host executor: %s", err ? err : "timeout");
  } else {
    if (scaling == SHUNT_SCALE_POSTDIV)
      shunt_elem_postdiv((enum shunt_dtype)p->dtype, out, p->out_bytes / es, p->nranks);
    if (out != (char*)user_out) memcpy(user_out, out, p->out_bytes);
  }
  free(sh), free(jobs), free(th), free(sems), free(tmp);
  return rc;
}
