/* Host backend: staging, the threadblocks as fibers on the calling thread, the hang report. */
#include "exec/host/host_run.h"

#include <inttypes.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "exec/host/host_xctx.h"
#include "exec/ops/packet.h"
#include "exec/ops/reduce.h"
#include "exec/steps.h"
#include "transport/backoff.h"
#include "util/env.h"
#include "util/host.h"
#include "util/log.h"

struct block_job {
  struct shunt_xctx X;
  int rc;
  bool done;
};

/* Kept by the world between runs: nothing is allocated per run once the largest program ran. */
struct shunt_host_keep {
  struct shunt_fibers* fibers;
  struct shunt_host_shared sh;
  struct block_job* jobs;
  char* tmp; /* two batches per block */
  uint32_t nblocks_cap;
  _Atomic int64_t* sems;
  uint32_t nsems_cap;
};

void shunt_host_keep_free(struct shunt_host_keep* k) {
  if (!k) return;
  shunt_fibers_free(k->fibers);
  free(k->jobs), free(k->tmp), free(k->sems), free(k);
}

static struct shunt_host_keep* keep_get(struct shunt_host_keep** kept, uint32_t nblocks, uint32_t nsems) {
  struct shunt_host_keep* k = *kept;
  if (!k) {
    if (!(k = calloc(1, sizeof(*k)))) return NULL;
    if (!(k->fibers = shunt_fibers_create())) {
      free(k);
      return NULL;
    }
    *kept = k;
  }
  if (nblocks > k->nblocks_cap) {
    struct block_job* j = calloc(nblocks, sizeof(*j));
    char* t = malloc((size_t)nblocks * 2 * SHUNT_HOST_BATCH);
    if (!j || !t) {
      free(j), free(t);
      return NULL;
    }
    free(k->jobs), free(k->tmp);
    k->jobs = j, k->tmp = t, k->nblocks_cap = nblocks;
  }
  if (nsems > k->nsems_cap) {
    _Atomic int64_t* s = calloc(nsems, sizeof(*s));
    if (!s) return NULL;
    free(k->sems);
    k->sems = s, k->nsems_cap = nsems;
  }
  return k;
}

static void block_main(void* arg, uint32_t i) {
  struct block_job* j = &((struct block_job*)arg)[i];
  j->rc = shunt_x_block(&j->X);
}

/* Every block waits on something not there yet. Spin a little (a peer on another core may be
 * a few hundred nanoseconds away; when the world has more ranks than the machine has cores,
 * the peer being waited for may need this very core, and the spin is cut short), give the core
 * away for a while, then sleep on the rank's bell (transport/host_bell.h) until a write that
 * may end a wait rings it. Sleeping at once costs more than it saves: a plan's waits are many
 * and mostly short, and each sleep is two system calls and a wake-up (measured: 8 crowded ranks
 * of a port-channel allreduce spent 10x longer in the kernel). The sleep's bound grows while
 * nothing comes: a write that rings nothing (a peer's data arriving from the network, say) is
 * seen within it. */
struct idle {
  uint32_t n, sleep_ns, spins;
  uint64_t since;
};
#define IDLE_SPINS 64
#define IDLE_SPINS_CROWDED 2
#define IDLE_YIELD_NS 200000ull
#define IDLE_SLEEP_MIN_NS 20000u
#define IDLE_SLEEP_MAX_NS 1000000u

static struct idle idle_start(const struct shunt_world* w) {
  bool crowded = (long)w->nranks > shunt_online_cpus();
  return (struct idle){.spins = crowded ? IDLE_SPINS_CROWDED : IDLE_SPINS};
}

static bool gives_up(const struct shunt_world* w) {
  return atomic_load_explicit(&w->aborted, memory_order_relaxed) ||
         atomic_load_explicit(&w->failed, memory_order_acquire);
}

static bool any_ready(const struct block_job* jobs, uint32_t n) {
  for (uint32_t b = 0; b < n; b++)
    if (!jobs[b].done && shunt_host_cond_ready(&jobs[b].X.cond)) return true;
  return false;
}

/* One pause while no block can move; false once `deadline` passed. */
static bool idle_pause(struct idle* st, struct shunt_host_shared* sh, const struct block_job* jobs,
                       uint32_t n) {
  if (++st->n < st->spins) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
    return true;
  }
  uint64_t now = shunt_now_ns();
  if (!st->since) st->since = now;
  if (now > sh->deadline) return false;
  if (now - st->since < IDLE_YIELD_NS) {
    sched_yield();
    return true;
  }
  if (st->sleep_ns < IDLE_SLEEP_MIN_NS) st->sleep_ns = IDLE_SLEEP_MIN_NS;
  struct shunt_world* w = sh->w;
  struct shunt_rank_bell* bell = w->peers[w->rank].bell;
  if (bell && w->sleepers) {
    uint32_t seen = shunt_rank_bell_arm(w->sleepers, bell);
    if (!any_ready(jobs, n) && !gives_up(w)) shunt_rank_bell_wait(bell, seen, (long)st->sleep_ns);
    shunt_rank_bell_disarm(w->sleepers, bell);
  } else {
    shunt_sleep_ns(st->sleep_ns);
  }
  if (st->sleep_ns < IDLE_SLEEP_MAX_NS) st->sleep_ns += st->sleep_ns / 2;
  return true;
}

/* Runs every block to its end: a block runs until it waits, and is resumed once what it waits
 * for holds (or the run expired, when every wait gives up and reports). */
static void schedule(struct shunt_host_shared* sh, struct block_job* jobs, uint32_t n) {
  uint32_t live = n;
  const struct idle fresh = idle_start(sh->w);
  struct idle st = fresh;
  bool last_look = false;
  while (live) {
    bool moved = false;
    for (uint32_t b = 0; b < n; b++) {
      struct block_job* j = &jobs[b];
      if (j->done || (!sh->expired && !shunt_host_cond_ready(&j->X.cond))) continue;
      moved = true;
      if (shunt_fibers_resume(sh->fibers, b)) j->done = true, live--;
    }
    if (moved) {
      st = fresh;
      last_look = false;
      continue;
    }
    bool give_up = !idle_pause(&st, sh, jobs, n) || gives_up(sh->w);
    /* A transport fails the world after the last data and flags it carried have landed (a peer
     * that finished its part and left): look at the waits once more, after that failure was
     * seen, before giving up on them. */
    if (give_up && !last_look) {
      last_look = true;
      continue;
    }
    if (give_up) sh->expired = true;
  }
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

/* Why a run's blocks stayed blocked when the world did not fail: an abort of this communicator,
 * or their waits ran out. */
static int blocked_code(const struct shunt_world* w) {
  return atomic_load(&w->aborted) ? SHUNT_E_ABORTED : SHUNT_E_TIMEOUT;
}

static void report(const struct shunt_world* w, const struct shunt_program* p, const struct block_job* jobs,
                   char* err, size_t len) {
  size_t at = 0;
  unsigned n = 0;
  for (uint32_t b = 0; b < p->nblocks; b++) n += jobs[b].rc != 0;
  /* An abort ends waits as a timeout does; the words say which it was. */
  appendf(err, len, &at, "%s: %u of %u threadblocks of rank %u blocked",
          atomic_load(&w->aborted) ? "aborted" : "timeout", n, p->nblocks, p->rank);
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
  /* Waits on other hosts: where those ranks are, so that a dead link or host can be found. */
  if (w->bs.at.nnodes > 1) {
    appendf(err, len, &at, "\n  ranks of other hosts:");
    for (uint32_t r = 0; r < w->nranks; r++)
      if (shunt_world_remote(w, r)) appendf(err, len, &at, " %u at %s", r, w->where[r]);
  }
}

int shunt_host_run_kept(struct shunt_world* w, const struct shunt_program* p, const void* user_in,
                        void* user_out, const struct shunt_host_run_opts* opts, struct shunt_host_keep** kept,
                        char* err, size_t len);

int shunt_host_run(struct shunt_world* w, const struct shunt_program* p, const void* user_in, void* user_out,
                   const struct shunt_host_run_opts* opts, char* err, size_t len) {
  struct shunt_host_keep* mine = NULL;
  int rc = shunt_host_run_kept(w, p, user_in, user_out, opts, &mine, err, len);
  shunt_host_keep_free(mine);
  return rc;
}

int shunt_host_run_kept(struct shunt_world* w, const struct shunt_program* p, const void* user_in,
                        void* user_out, const struct shunt_host_run_opts* opts, struct shunt_host_keep** kept,
                        char* err, size_t len) {
  if (err && len) err[0] = 0;
  if (!w || !p || p->magic != SHUNT_PROG_MAGIC) SHUNT_FAIL(SHUNT_E_INVALID, "no world or no program");
  if (p->rank != w->rank || p->nranks != w->nranks)
    SHUNT_FAIL(SHUNT_E_INVALID, "program for rank %u of %u run on rank %u of %u", p->rank, p->nranks, w->rank,
               w->nranks);
  if (atomic_load(&w->failed)) SHUNT_FAIL(w->fail_code, "%s", w->fail_msg);
  if (atomic_load(&w->broken)) SHUNT_FAIL(SHUNT_E_INVALID, "an earlier run on this world timed out");
  uint64_t scratch_cap = shunt_scratch_cap(w->cfg.scratch_bytes, p->double_scratch);
  if (p->scratch_bytes > scratch_cap)
    SHUNT_FAIL(SHUNT_E_INVALID, "plan needs %" PRIu64 " bytes of scratch per half, the world has %" PRIu64,
               p->scratch_bytes, scratch_cap);
  struct shunt_steps st;
  struct shunt_steps_bufs bufs = {user_in,
                                  user_out,
                                  opts ? opts->premul_scalar : NULL,
                                  false,
                                  w->peers[w->rank].input,
                                  w->peers[w->rank].output,
                                  w->cfg.input_bytes,
                                  w->cfg.output_bytes,
                                  false,
                                  false};
  const char* why = shunt_steps_plan(p, w->nranks, &bufs, &st);
  if (why)
    SHUNT_FAIL(SHUNT_E_INVALID,
               "%s (buffers of %" PRIu64 "/%" PRIu64 " bytes, staging %" PRIu64 "/%" PRIu64 ")", why,
               p->in_bytes, p->out_bytes, w->cfg.input_bytes, w->cfg.output_bytes);
  uint32_t es = shunt_dtype_size(shunt_dtype_from_code(p->dtype));

  struct shunt_host_keep* keep = keep_get(kept, p->nblocks ? p->nblocks : 1, p->nsems ? p->nsems : 1);
  if (!keep) SHUNT_FAIL(SHUNT_E_NOMEM, "out of memory");
  struct shunt_host_shared* sh = &keep->sh;
  struct block_job* jobs = keep->jobs;
  _Atomic int64_t* sems = keep->sems;
  char* tmp = keep->tmp;
  int started = shunt_fibers_start(keep->fibers, p->nblocks, block_main, jobs);
  if (started != SHUNT_OK)
    SHUNT_FAIL(started, "%s for the stacks of %u threadblocks",
               started == SHUNT_E_NOMEM ? "no memory" : "getcontext failed", p->nblocks);
  *sh = (struct shunt_host_shared){0}; /* the barrier counters at 0, not expired */

  /* The steps before the plan (exec/steps.h). */
  if (st.seed_bytes) memcpy(st.seed_dst, st.seed_src, st.seed_bytes);
  if (st.pre_n) shunt_pre_buf(st.pre_dst, st.pre_src, st.pre_n * es, &st.pre_red);
  if (st.copy_in_bytes) memcpy(st.copy_in_dst, st.copy_in_src, st.copy_in_bytes);
  char* in = st.in;
  char* out = st.out;

  uint64_t epoch = atomic_fetch_add(&w->epoch, 1) + 1;
  sh->w = w;
  sh->p = p;
  sh->base[0] = in;
  sh->base[1] = out;
  sh->base[2] = w->peers[w->rank].scratch;
  sh->alias = st.alias;
  /* The flag and half of execution number epoch - 1 (packet.h): never 0 or 0xffffffff, and the
   * half follows the flag's parity across the wrap too; the first is no common data word. */
  sh->flag = shunt_pkt_flag_for_epoch(epoch - 1);
  sh->half = shunt_scratch_at(sh->flag, w->cfg.scratch_bytes, p->ll, p->double_scratch);
  sh->deadline = shunt_now_ns() + timeout_ms(opts) * 1000000ull;
  sh->dt = shunt_dtype_from_code(p->dtype);
  sh->step_op = shunt_elem_step_op(shunt_redop_from_code(p->redop));
  sh->esize = es ? es : 1;
  sh->sems = sems;
  for (uint32_t i = 0; i < p->nsems; i++) atomic_init(&sems[i], shunt_prog_sem_init(p)[i]);
  shunt_proxy_bind(w->proxy, in, out);

  sh->fibers = keep->fibers;
  int rc = SHUNT_OK;
  for (uint32_t b = 0; b < p->nblocks; b++) {
    struct block_job* j = &jobs[b];
    *j = (struct block_job){.X = {.prog = p, .block = b, .tid = 0, .nthreads = 1, .sh = sh}};
    j->X.tmp[0] = tmp + (size_t)b * 2 * SHUNT_HOST_BATCH;
    j->X.tmp[1] = j->X.tmp[0] + SHUNT_HOST_BATCH;
  }
  schedule(sh, jobs, p->nblocks);
  /* Blocked blocks: an abort of this communicator, or their waits ran out; the world's failure
   * (a peer gone, the network) replaces either below when one came. */
  for (uint32_t b = 0; b < p->nblocks; b++)
    if (jobs[b].rc) rc = blocked_code(w);
  /* Broken before the drain: a proxy sending to a peer that stopped reading gives up. */
  if (rc) atomic_store(&w->broken, true);
  shunt_proxy_drain(w->proxy);
  if (rc && atomic_load_explicit(&w->failed, memory_order_acquire)) {
    rc = w->fail_code;
    shunt_setf(err, len, "%s", w->fail_msg);
    SHUNT_WARN("host executor: rank %u: %s", p->rank, w->fail_msg);
  } else if (rc) {
    report(w, p, jobs, err, len);
    SHUNT_WARN("host executor: %s", err ? err : "timeout");
  } else {
    if (st.post_n) shunt_post_buf(st.out, st.out, st.post_n * es, &st.post_red);
    if (st.back_bytes) memcpy(st.back_dst, st.back_src, st.back_bytes);
  }
  return rc;
}
