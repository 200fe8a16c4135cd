/* The host backend behind exec/backend.h: a world of shared host memory (transport/world.h)
 * made or grown when a call needs it, calls run in the calling thread (host_call.h). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/backend.h"
#include "exec/host/host_call.h"
#include "exec/host/host_run.h"
#include "util/status.h"

/* prepare replaces the world on the calling thread while abort may come from any other (a
 * watchdog's ncclCommAbort, with the call still inside): `mu` makes abort's use of a world end
 * before prepare frees it, and `aborted` reaches a world made after the abort. */
struct host_backend {
  struct shunt_backend base;
  pthread_mutex_t mu;
  _Atomic(struct shunt_world*) world; /* changed under mu; read without it by this rank's calls */
  bool aborted;                       /* under mu */
  struct shunt_host_reuse reuse;
};

struct shunt_backend* shunt_host_backend_alloc(void) {
  struct host_backend* h = calloc(1, sizeof(*h));
  if (!h) return NULL;
  pthread_mutex_init(&h->mu, NULL);
  return &h->base;
}

/* Publishes w (or NULL) in place of the current world, which no abort uses once this returns. */
static void publish(struct host_backend* h, struct shunt_world* w) {
  pthread_mutex_lock(&h->mu);
  if (w && h->aborted) atomic_store(&w->aborted, true);
  atomic_store(&h->world, w);
  pthread_mutex_unlock(&h->mu);
}

static int host_backend_prepare(struct shunt_backend* b, const struct shunt_plan* plan,
                                const struct shunt_split* s, char* err, size_t len) {
  struct host_backend* h = (struct host_backend*)b;
  (void)plan;
  uint64_t scratch = s->scratch, in_need = s->in_need, out_need = s->out_need;
  struct shunt_world* w = atomic_load(&h->world);
  if (w && w->cfg.scratch_bytes >= scratch && w->cfg.input_bytes >= in_need &&
      w->cfg.output_bytes >= out_need)
    return SHUNT_OK;
  struct shunt_world_config cfg = {shunt_backend_round(scratch), shunt_backend_round(in_need),
                                   shunt_backend_round(out_need)};
  if (w) {
    if (w->cfg.scratch_bytes > cfg.scratch_bytes) cfg.scratch_bytes = w->cfg.scratch_bytes;
    if (w->cfg.input_bytes > cfg.input_bytes) cfg.input_bytes = w->cfg.input_bytes;
    if (w->cfg.output_bytes > cfg.output_bytes) cfg.output_bytes = w->cfg.output_bytes;
    publish(h, NULL);
    shunt_world_destroy(w);
  }
  /* Published whole: an abort in another thread reads it to end waits on it. */
  struct shunt_world* made = NULL;
  int rc = shunt_world_create(b->rank, b->nranks, &cfg, &b->ex, &made, err, len);
  publish(h, made);
  if (rc != SHUNT_OK) shunt_prefixf(err, len, "the host backend could not set up its world");
  return rc;
}

static int host_backend_run(struct shunt_backend* b, const struct shunt_backend_call* call, char* err,
                            size_t len) {
  struct host_backend* h = (struct host_backend*)b;
  struct shunt_world* w = atomic_load(&h->world);
  if (!w) SHUNT_FAIL(SHUNT_E_INVALID, "no world");
  struct shunt_host_run_opts opts = {call->timeout_ms, call->scalar};
  if (call->move_from) memmove(call->out, call->move_from, call->split->call.in_bytes);
  return shunt_host_run_call(w, b->programs, call->plan, b->rank, call->split, call->in, call->out, &opts,
                             &h->reuse, err, len);
}

static int host_backend_check(struct shunt_backend* b, char* err, size_t len) {
  (void)b;
  if (err && len) err[0] = 0;
  return SHUNT_OK; /* a host run reports its failure when it returns */
}

static void host_backend_abort(struct shunt_backend* b) {
  struct host_backend* h = (struct host_backend*)b;
  pthread_mutex_lock(&h->mu);
  h->aborted = true;
  struct shunt_world* w = atomic_load(&h->world);
  if (w) {
    atomic_store(&w->aborted, true);
    shunt_world_ring(w, w->rank);
  }
  pthread_mutex_unlock(&h->mu);
}

static void host_backend_free_world(struct shunt_backend* b, bool collective) {
  struct host_backend* h = (struct host_backend*)b;
  struct shunt_world* w = atomic_load(&h->world);
  publish(h, NULL);
  if (w) {
    if (collective)
      shunt_world_destroy(w);
    else
      shunt_world_release(w);
  }
  shunt_host_reuse_free(&h->reuse);
}

static void host_backend_end(struct shunt_backend* b) {
  pthread_mutex_destroy(&((struct host_backend*)b)->mu);
}

const struct shunt_backend_ops shunt_host_backend_ops = {"host",
                                                         host_backend_prepare,
                                                         host_backend_run,
                                                         host_backend_check,
                                                         host_backend_abort,
                                                         host_backend_free_world,
                                                         host_backend_end};
