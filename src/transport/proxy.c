/* Proxy thread and its trigger FIFO: a ring of slots, each published with a sequence word. */
#include "transport/proxy.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "transport/backoff.h"
#include "transport/doorbell.h"
#include "transport/link.h"
#include "util/status.h"

#define FIFO_SLOTS 1024u

struct slot {
  struct shunt_trigger t;
  _Atomic uint64_t seq; /* pos + 1 once the trigger at pos is written */
};

struct shunt_proxy {
  struct shunt_proxy_config cfg;
  pthread_t thread;
  atomic_bool stop;
  /* An idle proxy sleeps instead of polling; a push rings it (one load while it is awake). */
  struct shunt_doorbell bell;
  _Atomic uint64_t head; /* next position to reserve */
  _Atomic uint64_t done; /* positions below are complete */
  char* input;
  char* output;
  struct slot slots[FIFO_SLOTS];
};

static char* local_base(struct shunt_proxy* p, unsigned type) {
  return type == 0 ? p->input : type == 1 ? p->output : p->cfg.scratch;
}

static void handle(struct shunt_proxy* p, const struct shunt_trigger* t) {
  const char* src = (t->type & SHUNT_TRIG_DATA) ? local_base(p, t->src_buf) + t->src_off : NULL;
  /* A failed link has reported it; the trigger still counts as done, so that a drain never
   * waits on a peer that is gone. */
  (void)p->cfg.links[t->peer]->trigger(p->cfg.peers, t, src);
}

/* After the last trigger the proxy polls (pauses, then yields) for IDLE_POLL_NS, since the
 * triggers of a run come in bursts and a sleeping proxy costs each push a wake-up; only then
 * does it sleep until a push rings (at once, after the pauses, on a crowded host). The sleep is bounded only
 * so that a missed ring could never stall a run for long. */
#define PROXY_IDLE_POLL_NS 2000000ull
#define PROXY_SLEEP_NS 100000000L

struct idle_state {
  struct shunt_backoff bo;
  uint64_t since; /* when polling began, 0: not yet read */
};

static void idle(struct shunt_proxy* p, struct idle_state* st, const struct slot* s, uint64_t pos) {
  if (st->bo.n < 48) {
    shunt_backoff(&st->bo, 0); /* pauses, then yields */
    return;
  }
  uint64_t now = shunt_now_ns();
  if (!st->since) st->since = now;
  if (!p->cfg.crowded && now - st->since < PROXY_IDLE_POLL_NS) {
    sched_yield();
    return;
  }
  uint32_t seen = shunt_doorbell_arm(&p->bell);
  if (atomic_load_explicit(&s->seq, memory_order_seq_cst) != pos + 1 &&
      !atomic_load_explicit(&p->stop, memory_order_seq_cst))
    shunt_doorbell_wait(&p->bell, seen, PROXY_SLEEP_NS);
  shunt_doorbell_disarm(&p->bell);
}

static void* run(void* arg) {
  struct shunt_proxy* p = arg;
  uint64_t pos = 0;
  struct idle_state st = {0};
  while (true) {
    struct slot* s = &p->slots[pos % FIFO_SLOTS];
    if (atomic_load_explicit(&s->seq, memory_order_acquire) != pos + 1) {
      if (atomic_load_explicit(&p->stop, memory_order_acquire)) break;
      idle(p, &st, s, pos);
      continue;
    }
    st = (struct idle_state){0};
    handle(p, &s->t);
    /* Read before the slot is handed back: once done moves, a push may overwrite it. */
    uint32_t peer = s->t.peer;
    pos++;
    atomic_store_explicit(&p->done, pos, memory_order_release);
    /* The done count may end this rank's wait, what it wrote a peer's of this host. */
    p->cfg.done(p->cfg.ctx, peer);
  }
  return NULL;
}

int shunt_proxy_start(const struct shunt_proxy_config* cfg, struct shunt_proxy** out, char* err, size_t len) {
  struct shunt_proxy* p = calloc(1, sizeof(*p));
  if (!p) {
    snprintf(err, len, "out of memory");
    return SHUNT_E_NOMEM;
  }
  p->cfg = *cfg;
  atomic_init(&p->stop, false);
  shunt_doorbell_init(&p->bell);
  atomic_init(&p->head, 0);
  atomic_init(&p->done, 0);
  for (unsigned i = 0; i < FIFO_SLOTS; i++) atomic_init(&p->slots[i].seq, 0);
  int e = pthread_create(&p->thread, NULL, run, p);
  if (e != 0) {
    snprintf(err, len, "cannot start the proxy thread: %s", strerror(e));
    free(p);
    return shunt_errno_status(e);
  }
  *out = p;
  return 0;
}

void shunt_proxy_stop(struct shunt_proxy* p) {
  if (!p) return;
  atomic_store_explicit(&p->stop, true, memory_order_seq_cst);
  shunt_doorbell_ring(&p->bell);
  pthread_join(p->thread, NULL);
  free(p);
}

void shunt_proxy_bind(struct shunt_proxy* p, char* input, char* output) {
  p->input = input;
  p->output = output;
}

uint64_t shunt_proxy_push(struct shunt_proxy* p, const struct shunt_trigger* t) {
  uint64_t pos = atomic_fetch_add_explicit(&p->head, 1, memory_order_relaxed);
  struct shunt_backoff bo = {0};
  while (pos - atomic_load_explicit(&p->done, memory_order_acquire) >= FIFO_SLOTS) shunt_backoff(&bo, 0);
  struct slot* s = &p->slots[pos % FIFO_SLOTS];
  s->t = *t;
  atomic_store_explicit(&s->seq, pos + 1, memory_order_seq_cst); /* seq_cst: see transport/doorbell.h */
  shunt_doorbell_ring(&p->bell);
  return pos;
}

uint64_t shunt_proxy_done(struct shunt_proxy* p) {
  return atomic_load_explicit(&p->done, memory_order_acquire);
}
uint64_t shunt_proxy_pushed(struct shunt_proxy* p) {
  return atomic_load_explicit(&p->head, memory_order_acquire);
}

void shunt_proxy_drain(struct shunt_proxy* p) {
  uint64_t h = shunt_proxy_pushed(p);
  struct shunt_backoff bo = {0};
  while (shunt_proxy_done(p) < h) shunt_backoff(&bo, 0);
}
