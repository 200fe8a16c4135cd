/* The stand-in's streams, events and graphs (fake_cuda.h): each stream an in-order queue served
 * by a thread of its own; capture records a stream's operations into a graph instead. Here too
 * the context lock (fc_ctx_enter) and the hardware queues that streams share (README.md). */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fake_cuda.h"

enum op_kind { OP_COPY, OP_SET, OP_KERNEL, OP_RECORD, OP_WAIT, OP_DELAY };

struct fc_event;

struct op {
  enum op_kind kind;
  struct op* next;
  void* dst;
  const void* src;
  size_t n;
  unsigned char val;
  void* owned; /* a staged source, freed with the op */
  struct fc_launch launch;
  struct fc_event* ev;
  uint64_t seq;    /* OP_RECORD: the record's number; OP_WAIT: the record waited for */
  uint64_t ticket; /* its place in its hardware queue */
};

/* A hardware queue (a connection): its operations start in the order they were queued, whatever
 * their stream, so one that cannot start (its stream's previous operation has not finished, an
 * event wait not yet satisfied) holds up every later one of every stream sharing the queue. */
struct hwq {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint64_t next;       /* the ticket of the next operation queued */
  uint64_t dispatched; /* operations with tickets below have started */
};

struct fc_graph {
  struct op *head, *tail;
};

struct fc_stream {
  int device;
  struct fc_ctx* ctx; /* the context it was made in; NULL for a device's default stream */
  unsigned flags;     /* CU_STREAM_NON_BLOCKING = 1 */
  struct hwq* q;      /* the device's queue it was given, or own when queues are lenient */
  struct hwq own;
  uint64_t submitted, completed; /* operations queued, operations run */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  struct op *head, *tail;
  bool busy, stop;
  pthread_t th;
  int error; /* sticky: a kernel that could not run */
  void* runner;
  bool legacy; /* the device's legacy default stream (handles NULL and CU_STREAM_LEGACY) */
  int capture; /* 0 none, 1 active, 2 invalidated */
  int capture_mode;
  struct fc_graph* graph;
};

struct fc_event {
  int device; /* its context's device (-1: made without a current context) */
  unsigned flags;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint64_t recorded, completed;
  uint64_t at_ns; /* CLOCK_MONOTONIC when its latest completed record was reached */
  int refs;       /* the handle and every operation naming it; freed at 0 */
};

static void ev_ref(struct fc_event* e) {
  __atomic_fetch_add(&e->refs, 1, __ATOMIC_RELAXED);
}
static void ev_unref(struct fc_event* e) {
  if (e && __atomic_sub_fetch(&e->refs, 1, __ATOMIC_ACQ_REL) == 0) {
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    free(e);
  }
}

/* Handles this stand-in made; others (a test's tokens) are never dereferenced. */
#define MAX_HANDLES 4096
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
enum { H_STREAM = 1, H_EVENT };
static struct {
  void* p;
  int kind;
} handles[MAX_HANDLES];
static int nhandles;
static struct fc_stream* defaults[FC_MAX_DEVICES];
static int global_captures;
static __thread int thread_mode;     /* 0 global, 1 thread local, 2 relaxed */
static __thread int thread_captures; /* captures this thread began in thread-local mode */

static void reg_add(void* h, int kind) {
  pthread_mutex_lock(&reg_mu);
  if (nhandles < MAX_HANDLES) {
    handles[nhandles].p = h;
    handles[nhandles++].kind = kind;
  }
  pthread_mutex_unlock(&reg_mu);
}
static bool reg_has(const void* h, int kind) {
  pthread_mutex_lock(&reg_mu);
  bool hit = false;
  for (int i = 0; i < nhandles && !hit; i++) hit = handles[i].p == h && handles[i].kind == kind;
  pthread_mutex_unlock(&reg_mu);
  return hit;
}
static void reg_del(const void* h) {
  pthread_mutex_lock(&reg_mu);
  for (int i = 0; i < nhandles; i++)
    if (handles[i].p == h) {
      handles[i] = handles[--nhandles];
      break;
    }
  pthread_mutex_unlock(&reg_mu);
}

/* ---- The context lock ------------------------------------------------------------------------- */

struct ctx_lock {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t holder;
  int depth;
};
static struct ctx_lock ctx_locks[FC_MAX_DEVICES];
static struct hwq queues[FC_MAX_DEVICES][32];
static int nqueues = 8;
static unsigned next_queue[FC_MAX_DEVICES];
static pthread_once_t lock_once = PTHREAD_ONCE_INIT;

static void hwq_init(struct hwq* q) {
  pthread_mutex_init(&q->mu, NULL);
  pthread_cond_init(&q->cv, NULL);
  q->next = q->dispatched = 0;
}

static void locks_init(void) {
  for (int d = 0; d < FC_MAX_DEVICES; d++) {
    pthread_mutex_init(&ctx_locks[d].mu, NULL);
    pthread_cond_init(&ctx_locks[d].cv, NULL);
    for (int i = 0; i < 32; i++) hwq_init(&queues[d][i]);
  }
  /* As the driver: CUDA_DEVICE_MAX_CONNECTIONS queues per device, 8 unless set, at most 32. */
  const char* v = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  if (v && atoi(v) > 0) nqueues = atoi(v) > 32 ? 32 : atoi(v);
}

static struct ctx_lock* ctx_lock_of(int device) {
  pthread_once(&lock_once, locks_init);
  if (device < 0 || device >= FC_MAX_DEVICES || fc_lenient("ctxlock")) return NULL;
  return &ctx_locks[device];
}

static void drain_device(int device);

void fc_ctx_enter(int device, bool drain) {
  struct ctx_lock* l = ctx_lock_of(device);
  if (!l) return;
  pthread_mutex_lock(&l->mu);
  while (l->depth > 0 && !pthread_equal(l->holder, pthread_self())) pthread_cond_wait(&l->cv, &l->mu);
  l->holder = pthread_self();
  l->depth++;
  pthread_mutex_unlock(&l->mu);
  if (drain) drain_device(device);
}

void fc_ctx_leave(int device) {
  struct ctx_lock* l = ctx_lock_of(device);
  if (!l) return;
  pthread_mutex_lock(&l->mu);
  if (l->depth > 0 && --l->depth == 0) pthread_cond_broadcast(&l->cv);
  pthread_mutex_unlock(&l->mu);
}

void fc_ctx_gate(int device) {
  struct ctx_lock* l = ctx_lock_of(device);
  if (!l) return;
  pthread_mutex_lock(&l->mu);
  while (l->depth > 0 && !pthread_equal(l->holder, pthread_self())) pthread_cond_wait(&l->cv, &l->mu);
  pthread_mutex_unlock(&l->mu);
}

/* Every operation queued so far on the device's streams has run. Streams are not destroyed
 * meanwhile: cuStreamDestroy takes the lock this caller holds. */
static void drain_device(int device) {
  pthread_mutex_lock(&reg_mu);
  struct fc_stream** ss = malloc((size_t)(nhandles ? nhandles : 1) * sizeof(*ss));
  uint64_t* upto = malloc((size_t)(nhandles ? nhandles : 1) * sizeof(*upto));
  int n = 0;
  for (int i = 0; ss && upto && i < nhandles; i++) {
    struct fc_stream* s = handles[i].p;
    if (handles[i].kind != H_STREAM || s->device != device) continue;
    pthread_mutex_lock(&s->mu);
    upto[n] = s->submitted;
    pthread_mutex_unlock(&s->mu);
    ss[n++] = s;
  }
  pthread_mutex_unlock(&reg_mu);
  for (int i = 0; i < n; i++) {
    pthread_mutex_lock(&ss[i]->mu);
    while (ss[i]->completed < upto[i]) pthread_cond_wait(&ss[i]->cv, &ss[i]->mu);
    pthread_mutex_unlock(&ss[i]->mu);
  }
  free(ss);
  free(upto);
}

/* ---- Capture rules ---------------------------------------------------------------------------- */

bool fc_sync_allowed(void) {
  if (thread_mode == 2) return true;
  pthread_mutex_lock(&reg_mu);
  bool ok = global_captures == 0 && thread_captures == 0;
  pthread_mutex_unlock(&reg_mu);
  if (ok) return true;
  /* As the driver: the unsafe call fails and the global captures are invalidated. */
  pthread_mutex_lock(&reg_mu);
  for (int i = 0; i < nhandles; i++) {
    struct fc_stream* s = handles[i].p;
    if (handles[i].kind != H_STREAM) continue;
    pthread_mutex_lock(&s->mu);
    if (s->capture == 1 && s->capture_mode == 0) s->capture = 2;
    pthread_mutex_unlock(&s->mu);
  }
  pthread_mutex_unlock(&reg_mu);
  return false;
}

/* Work on device's legacy default stream while a blocking stream of that device captures: the
 * legacy stream would join the capture implicitly, which the driver refuses whatever the
 * thread's mode, invalidating that capture. 0 or CUDA_ERROR_STREAM_CAPTURE_IMPLICIT. */
static int legacy_allowed(int device) {
  int rc = FC_SUCCESS;
  pthread_mutex_lock(&reg_mu);
  for (int i = 0; i < nhandles; i++) {
    struct fc_stream* s = handles[i].p;
    if (handles[i].kind != H_STREAM || s == defaults[s->device] || s->device != device || (s->flags & 1))
      continue;
    pthread_mutex_lock(&s->mu);
    if (s->capture) {
      s->capture = 2;
      rc = FC_ERROR_STREAM_CAPTURE_IMPLICIT;
    }
    pthread_mutex_unlock(&s->mu);
  }
  pthread_mutex_unlock(&reg_mu);
  return rc;
}

/* A synchronous call of the current context: legal under the capture rules above and on the
 * legacy stream (which it uses). 0 or the driver's error. */
static int sync_call_allowed(void) {
  struct fc_ctx* c = fc_current();
  if (!c) return FC_ERROR_INVALID_CONTEXT;
  if (!fc_sync_allowed()) return FC_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  return legacy_allowed(c->device);
}

FC_EXPORT int cuThreadExchangeStreamCaptureMode(int* mode) {
  FC_NEED_INIT();
  int old = thread_mode;
  thread_mode = *mode;
  *mode = old;
  return FC_SUCCESS;
}

/* ---- Streams ---------------------------------------------------------------------------------- */

static void run_op(struct fc_stream* s, struct op* o) {
  switch (o->kind) {
    case OP_COPY:
      fc_copy(o->dst, o->src, o->n); /* as a copy engine (fc_copy.c) */
      break;
    case OP_SET:
      memset(o->dst, o->val, o->n);
      break;
    case OP_DELAY:
      usleep((useconds_t)o->n);
      break;
    case OP_KERNEL: {
      /* Its blocks must be resident first (fc_resident.c). The executor's blocks wait on each
       * other, so its grid takes all its slots; the other kernels' blocks are independent (a
       * grid-stride loop), and one resident block makes progress: it takes one. */
      unsigned slots = o->launch.kind == FC_K_EXEC ? o->launch.blocks : 1;
      fc_resident_enter(s->device, slots);
      char err[256];
      if (fc_launch_run(&s->runner, &o->launch, err, sizeof(err)) != 0) s->error = FC_ERROR_LAUNCH_FAILED;
      fc_resident_leave(s->device, slots);
      break;
    }
    case OP_RECORD:
      pthread_mutex_lock(&o->ev->mu);
      if (o->seq > o->ev->completed) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        o->ev->completed = o->seq;
        o->ev->at_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
      }
      pthread_cond_broadcast(&o->ev->cv);
      pthread_mutex_unlock(&o->ev->mu);
      break;
    case OP_WAIT:
      pthread_mutex_lock(&o->ev->mu);
      while (o->ev->completed < o->seq) pthread_cond_wait(&o->ev->cv, &o->ev->mu);
      pthread_mutex_unlock(&o->ev->mu);
      break;
  }
}

static void op_free(struct op* o) {
  ev_unref(o->ev);
  free(o->owned);
  free(o);
}

static void* worker(void* arg) {
  struct fc_stream* s = arg;
  pthread_mutex_lock(&s->mu);
  for (;;) {
    while (!s->head && !s->stop) pthread_cond_wait(&s->cv, &s->mu);
    if (!s->head) break;
    struct op* o = s->head;
    s->head = o->next;
    if (!s->head) s->tail = NULL;
    s->busy = true;
    pthread_mutex_unlock(&s->mu);
    /* Its turn in the hardware queue: every earlier operation of the queue has started. An event
     * wait holds the queue until it is satisfied; anything else lets the next one start. */
    struct hwq* q = s->q;
    pthread_mutex_lock(&q->mu);
    while (q->dispatched != o->ticket) pthread_cond_wait(&q->cv, &q->mu);
    if (o->kind != OP_WAIT) {
      q->dispatched++;
      pthread_cond_broadcast(&q->cv);
    }
    pthread_mutex_unlock(&q->mu);
    fc_device_enter(s->device); /* device memory is open to this operation (fc_guard.c) */
    run_op(s, o);
    fc_device_leave();
    if (o->kind == OP_WAIT) {
      pthread_mutex_lock(&q->mu);
      q->dispatched++;
      pthread_cond_broadcast(&q->cv);
      pthread_mutex_unlock(&q->mu);
    }
    op_free(o);
    pthread_mutex_lock(&s->mu);
    s->busy = false;
    s->completed++;
    pthread_cond_broadcast(&s->cv);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

/* Streams alive in the process (default streams included): a test counts what a library keeps. */
static _Atomic long live_streams;
FC_EXPORT long fakecuda_stream_count(void) {
  return live_streams;
}

static struct fc_stream* stream_new(int device, unsigned flags) {
  struct fc_stream* s = calloc(1, sizeof(*s));
  if (!s) return NULL;
  s->device = device;
  s->flags = flags;
  hwq_init(&s->own);
  /* As the driver: a new stream takes the device's next queue, round robin. */
  pthread_once(&lock_once, locks_init);
  if (fc_lenient("queues")) {
    s->q = &s->own;
  } else {
    pthread_mutex_lock(&reg_mu);
    s->q = &queues[device][next_queue[device]++ % (unsigned)nqueues];
    pthread_mutex_unlock(&reg_mu);
  }
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  if (pthread_create(&s->th, NULL, worker, s) != 0) {
    free(s);
    return NULL;
  }
  reg_add(s, H_STREAM);
  live_streams++;
  return s;
}

/* The stream a handle names: the default stream of the current context for NULL and the
 * legacy/per-thread handles (each device's default stream is one queue here). NULL before
 * cuInit, for an unknown handle, and for the default stream without a current context. */
static __thread struct fc_stream* per_thread[FC_MAX_DEVICES]; /* CU_STREAM_PER_THREAD's */

static struct fc_stream* resolve(void* h) {
  if (fc_initialized() != FC_SUCCESS) return NULL;
  if ((uintptr_t)h == 2) {
    /* The per-thread default stream: a blocking stream of the thread's own. */
    struct fc_ctx* c = fc_current();
    if (!c) return NULL;
    if (!per_thread[c->device]) per_thread[c->device] = stream_new(c->device, 0);
    return per_thread[c->device];
  }
  if ((uintptr_t)h <= 1) {
    struct fc_ctx* c = fc_current();
    if (!c) return NULL;
    pthread_mutex_lock(&reg_mu);
    struct fc_stream* s = defaults[c->device];
    pthread_mutex_unlock(&reg_mu);
    if (s) return s;
    s = stream_new(c->device, 0);
    pthread_mutex_lock(&reg_mu);
    if (defaults[c->device]) {
      struct fc_stream* t = s;
      s = defaults[c->device];
      pthread_mutex_unlock(&reg_mu);
      reg_del(t);
      pthread_mutex_lock(&t->mu);
      t->stop = true;
      pthread_cond_broadcast(&t->cv);
      pthread_mutex_unlock(&t->mu);
      pthread_join(t->th, NULL);
      free(t);
      return s;
    }
    s->legacy = true;
    defaults[c->device] = s;
    pthread_mutex_unlock(&reg_mu);
    return s;
  }
  return reg_has(h, H_STREAM) ? h : NULL;
}

/* Why resolve(h) found no stream. */
static int bad_stream(void* h) {
  if (fc_initialized() != FC_SUCCESS) return FC_ERROR_NOT_INITIALIZED;
  return (uintptr_t)h <= 2 && !fc_current() ? FC_ERROR_INVALID_CONTEXT : FC_ERROR_INVALID_HANDLE;
}

static struct op* op_new(enum op_kind k);
static int submit_raw(struct fc_stream* s, struct op* o);

static bool has_pending(struct fc_stream* s) {
  pthread_mutex_lock(&s->mu);
  bool p = !s->capture && s->completed < s->submitted;
  pthread_mutex_unlock(&s->mu);
  return p;
}

/* `after` waits on the device for everything queued on `before` so far: a record of an event of
 * the stand-in's own on `before`, a wait for it on `after`. */
static void order_after(struct fc_stream* after, struct fc_stream* before) {
  struct fc_event* e = calloc(1, sizeof(*e));
  struct op* r = op_new(OP_RECORD);
  struct op* w = op_new(OP_WAIT);
  if (!e || !r || !w) {
    free(e), free(r), free(w);
    return;
  }
  pthread_mutex_init(&e->mu, NULL);
  pthread_cond_init(&e->cv, NULL);
  e->device = before->device;
  e->recorded = 1;
  e->refs = 2;
  r->ev = w->ev = e;
  r->seq = w->seq = 1;
  submit_raw(before, r);
  submit_raw(after, w);
}

/* The legacy default stream's implicit synchronization (leniency "legacy"): work on it waits for
 * the work already queued on every blocking stream of its context, and work on a blocking
 * stream waits for the work already queued on the legacy stream. Non-blocking streams take no
 * part; the per-thread default stream is a blocking stream. */
static void legacy_order(struct fc_stream* s) {
  if (fc_lenient("legacy") || (s->flags & 1u)) return;
  pthread_mutex_lock(&reg_mu);
  if (s->legacy) {
    for (int i = 0; i < nhandles; i++) {
      struct fc_stream* b = handles[i].p;
      if (handles[i].kind == H_STREAM && b != s && b->device == s->device && !b->legacy && !(b->flags & 1u) &&
          has_pending(b))
        order_after(s, b);
    }
  } else {
    struct fc_stream* l = defaults[s->device];
    if (l && has_pending(l)) order_after(s, l);
  }
  pthread_mutex_unlock(&reg_mu);
}

static int submit(struct fc_stream* s, struct op* o) {
  pthread_mutex_lock(&reg_mu);
  bool legacy = s == defaults[s->device];
  pthread_mutex_unlock(&reg_mu);
  int implicit = legacy ? legacy_allowed(s->device) : FC_SUCCESS;
  if (implicit != FC_SUCCESS) {
    op_free(o);
    return implicit;
  }
  pthread_mutex_lock(&s->mu);
  bool capturing = s->capture != 0;
  pthread_mutex_unlock(&s->mu);
  if (!capturing) legacy_order(s);
  return submit_raw(s, o);
}

/* Queues o on s, or records it into s's graph while s captures. */
static int submit_raw(struct fc_stream* s, struct op* o) {
  pthread_mutex_lock(&s->mu);
  if (s->capture) {
    int inval = s->capture == 2;
    if (!inval) {
      o->next = NULL;
      if (s->graph->tail)
        s->graph->tail->next = o;
      else
        s->graph->head = o;
      s->graph->tail = o;
    }
    pthread_mutex_unlock(&s->mu);
    if (inval) {
      op_free(o);
      return FC_ERROR_STREAM_CAPTURE_INVALIDATED;
    }
    return FC_SUCCESS;
  }
  o->next = NULL;
  pthread_mutex_lock(&s->q->mu);
  o->ticket = s->q->next++;
  pthread_mutex_unlock(&s->q->mu);
  s->submitted++;
  if (s->tail)
    s->tail->next = o;
  else
    s->head = o;
  s->tail = o;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  return FC_SUCCESS;
}

static struct op* op_new(enum op_kind k) {
  struct op* o = calloc(1, sizeof(*o));
  if (o) o->kind = k;
  return o;
}

FC_EXPORT int cuStreamCreate(struct fc_stream** out, unsigned flags) {
  FC_NEED_CTX();
  struct fc_ctx* c = fc_current();
  fc_ctx_gate(c->device);
  struct fc_stream* s = stream_new(c->device, flags);
  if (!s) return FC_ERROR_OUT_OF_MEMORY;
  s->flags = flags;
  s->ctx = c;
  *out = s;
  return FC_SUCCESS;
}
FC_EXPORT int cuStreamCreateWithPriority(struct fc_stream** out, unsigned flags, int prio) {
  (void)prio;
  return cuStreamCreate(out, flags);
}

static int drain(struct fc_stream* s) {
  pthread_mutex_lock(&s->mu);
  while (s->head || s->busy) pthread_cond_wait(&s->cv, &s->mu);
  int e = s->error;
  pthread_mutex_unlock(&s->mu);
  return e;
}

FC_EXPORT int cuStreamSynchronize(void* h) {
  struct fc_stream* s = resolve(h);
  if (!s) return bad_stream(h);
  fc_ctx_gate(s->device);
  if (s->capture) {
    s->capture = 2;
    return FC_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  if (!fc_sync_allowed()) return FC_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if ((uintptr_t)h <= 1) {
    int e = legacy_allowed(s->device);
    if (e != FC_SUCCESS) return e;
  }
  return drain(s);
}

/* Every stream of the current context drained: unsafe during capture, as any synchronize. */
FC_EXPORT int cuCtxSynchronize(void) {
  struct fc_ctx* c = fc_current();
  if (!c) return FC_ERROR_INVALID_CONTEXT;
  if (!fc_sync_allowed()) return FC_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  struct fc_stream* list[MAX_HANDLES];
  int n = 0;
  pthread_mutex_lock(&reg_mu);
  for (int i = 0; i < nhandles; i++)
    if (handles[i].kind == H_STREAM && ((struct fc_stream*)handles[i].p)->device == c->device)
      list[n++] = handles[i].p;
  pthread_mutex_unlock(&reg_mu);
  int rc = FC_SUCCESS;
  for (int i = 0; i < n; i++) {
    int e = drain(list[i]);
    if (e != FC_SUCCESS && rc == FC_SUCCESS) rc = e;
  }
  return rc;
}

/* The context a stream belongs to: its creator's, or the current one for a default stream. */
FC_EXPORT int cuStreamGetCtx(void* h, struct fc_ctx** ctx) {
  struct fc_stream* s = resolve(h);
  if (!s) return bad_stream(h);
  *ctx = s->ctx ? s->ctx : fc_current();
  return FC_SUCCESS;
}

FC_EXPORT int cuStreamQuery(void* h) {
  struct fc_stream* s = resolve(h);
  if (!s) return bad_stream(h);
  fc_ctx_gate(s->device);
  pthread_mutex_lock(&s->mu);
  int busy = s->head || s->busy;
  pthread_mutex_unlock(&s->mu);
  return busy ? FC_ERROR_NOT_READY : s->error;
}

FC_EXPORT int cuStreamDestroy_v2(void* h) {
  if ((uintptr_t)h <= 2 || !reg_has(h, H_STREAM)) return FC_ERROR_INVALID_HANDLE;
  struct fc_stream* s = h;
  /* Under the context lock: a drain of the context must not see it go. */
  fc_ctx_enter(s->device, false);
  reg_del(s);
  fc_ctx_leave(s->device);
  pthread_mutex_lock(&s->mu);
  s->stop = true;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->th, NULL); /* as the driver: work already queued completes */
  fc_runner_free(s->runner);
  free(s);
  live_streams--;
  return FC_SUCCESS;
}

/* ---- Copies and launches ---------------------------------------------------------------------- */

static long long copied; /* bytes of every asynchronous copy enqueued */

/* Bytes every asynchronous copy of the process asked to move so far. */
FC_EXPORT long long fakecuda_copied_bytes(void) {
  return __atomic_load_n(&copied, __ATOMIC_RELAXED);
}

static int copy_async(void* dst, const void* src, size_t n, void* h, bool stage) {
  struct fc_stream* s = resolve(h);
  if (!s) return bad_stream(h);
  fc_ctx_gate(s->device);
  if (n == 0) return FC_SUCCESS;
  __atomic_fetch_add(&copied, (long long)n, __ATOMIC_RELAXED);
  struct op* o = op_new(OP_COPY);
  if (!o) return FC_ERROR_OUT_OF_MEMORY;
  o->dst = dst;
  o->src = src;
  o->n = n;
  /* A pageable source is read before the call returns, as the driver stages it. */
  if (stage) {
    o->owned = malloc(n);
    if (!o->owned) {
      free(o);
      return FC_ERROR_OUT_OF_MEMORY;
    }
    memcpy(o->owned, src, n);
    o->src = o->owned;
  }
  return submit(s, o);
}

FC_EXPORT int cuMemcpyAsync(unsigned long long dst, unsigned long long src, size_t n, void* h) {
  return copy_async((void*)(uintptr_t)dst, (const void*)(uintptr_t)src, n, h, false);
}
/* Whether the driver knows p (pinned or registered host memory, device memory). */
static bool known_memory(const void* p) {
  extern int cuPointerGetAttribute(void*, int, unsigned long long);
  unsigned type = 0;
  return cuPointerGetAttribute(&type, 2 /* memory type */, (uintptr_t)p) == FC_SUCCESS;
}

/* An asynchronous copy between device memory and pageable host memory goes through the driver's
 * pinned staging: "the driver may synchronize with the stream" first (the documentation's API
 * synchronization behavior). Here it always does, on the host, before the copy is queued: the
 * stream's earlier work completes first (leniency "pageable"). Not while the stream captures. */
static void pageable_wait(void* h) {
  if (fc_lenient("pageable")) return;
  struct fc_stream* s = resolve(h);
  if (!s) return; /* copy_async answers for the handle */
  pthread_mutex_lock(&s->mu);
  bool capturing = s->capture != 0;
  pthread_mutex_unlock(&s->mu);
  if (!capturing) drain(s);
}

FC_EXPORT int cuMemcpyHtoDAsync_v2(unsigned long long dst, const void* src, size_t n, void* h) {
  bool pinned = known_memory(src);
  if (!pinned && n) pageable_wait(h);
  return copy_async((void*)(uintptr_t)dst, src, n, h, !pinned);
}
FC_EXPORT int cuMemcpyDtoHAsync_v2(void* dst, unsigned long long src, size_t n, void* h) {
  if (!known_memory(dst) && n) pageable_wait(h);
  return copy_async(dst, (const void*)(uintptr_t)src, n, h, false);
}
FC_EXPORT int cuMemcpyDtoDAsync_v2(unsigned long long dst, unsigned long long src, size_t n, void* h) {
  return copy_async((void*)(uintptr_t)dst, (const void*)(uintptr_t)src, n, h, false);
}
FC_EXPORT int cuMemsetD8Async(unsigned long long dst, unsigned char v, size_t n, void* h) {
  struct fc_stream* s = resolve(h);
  if (!s) return bad_stream(h);
  fc_ctx_gate(s->device);
  struct op* o = op_new(OP_SET);
  if (!o) return FC_ERROR_OUT_OF_MEMORY;
  o->dst = (void*)(uintptr_t)dst;
  o->n = n;
  o->val = v;
  return submit(s, o);
}
/* Work of `us` microseconds on the stream, as a kernel that long would be (the test NCCL's
 * slow collectives: their time is the stream's, as a real NCCL kernel's is). */
FC_EXPORT int fakecuda_stream_delay(void* h, unsigned long us) {
  struct fc_stream* s = resolve(h);
  if (!s) return bad_stream(h);
  struct op* o = op_new(OP_DELAY);
  if (!o) return FC_ERROR_OUT_OF_MEMORY;
  o->n = us;
  return submit(s, o);
}

/* The device a synchronous call works on: the current context's. */
static int sync_device(void) {
  struct fc_ctx* c = fc_current();
  return c ? c->device : -1;
}

/* Synchronous forms: under the context lock, once everything queued in the context has run (the
 * driver's synchronous copies wait for prior work), then the copy. */
FC_EXPORT int cuMemcpy(unsigned long long dst, unsigned long long src, size_t n) {
  int e = sync_call_allowed();
  if (e != FC_SUCCESS) return e;
  int dev = sync_device();
  fc_ctx_enter(dev, true);
  fc_device_enter(dev);
  memmove((void*)(uintptr_t)dst, (const void*)(uintptr_t)src, n);
  fc_device_leave();
  fc_ctx_leave(dev);
  return FC_SUCCESS;
}
FC_EXPORT int cuMemcpyHtoD_v2(unsigned long long dst, const void* src, size_t n) {
  return cuMemcpy(dst, (uintptr_t)src, n);
}
FC_EXPORT int cuMemcpyDtoH_v2(void* dst, unsigned long long src, size_t n) {
  return cuMemcpy((uintptr_t)dst, src, n);
}
FC_EXPORT int cuMemsetD8_v2(unsigned long long dst, unsigned char v, size_t n) {
  int e = sync_call_allowed();
  if (e != FC_SUCCESS) return e;
  int dev = sync_device();
  fc_ctx_enter(dev, true);
  fc_device_enter(dev);
  memset((void*)(uintptr_t)dst, v, n);
  fc_device_leave();
  fc_ctx_leave(dev);
  return FC_SUCCESS;
}

static long exec_calls; /* cuLaunchKernel calls of the executor kernel */

/* How many times the executor kernel was launched (cuLaunchKernel calls, refused ones too). */
FC_EXPORT long fakecuda_exec_calls(void) {
  return __atomic_load_n(&exec_calls, __ATOMIC_RELAXED);
}

FC_EXPORT int cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                             unsigned bz, unsigned smem, void* h, void** params, void** extra) {
  if (extra || gy != 1 || gz != 1 || by != 1 || bz != 1) return FC_ERROR_INVALID_VALUE;
  struct fc_stream* s = resolve(h);
  if (!s) return bad_stream(h);
  fc_ctx_gate(s->device);
  /* The function's context must be current, and the stream must belong to it. */
  FC_NEED_CTX();
  int usable = fc_func_usable(f);
  if (usable != FC_SUCCESS) return usable;
  if (s->ctx && s->ctx != fc_current()) return FC_ERROR_INVALID_HANDLE;
  fc_func_load(f); /* a kernel not loaded yet (lazy loading) loads now */
  struct op* o = op_new(OP_KERNEL);
  if (!o) return FC_ERROR_OUT_OF_MEMORY;
  int e = fc_launch_pack(f, gx, bx, smem, params, &o->launch);
  if (e == FC_SUCCESS && o->launch.kind == FC_K_EXEC &&
      fc_fault_for(__atomic_add_fetch(&exec_calls, 1, __ATOMIC_RELAXED)) == 'r')
    e = FC_ERROR_LAUNCH_FAILED; /* the launch the driver refuses (fake_cuda.h: refuse:N) */
  if (e != FC_SUCCESS) {
    free(o);
    return e;
  }
  return submit(s, o);
}

/* ---- Events ------------------------------------------------------------------------------------ */

static long event_records;
static void* last_event;
static void* last_stream;

/* How many events were recorded; the last one's event and stream. */
FC_EXPORT long fakecuda_event_records(void** event, void** stream) {
  long n = __atomic_load_n(&event_records, __ATOMIC_ACQUIRE);
  *event = __atomic_load_n(&last_event, __ATOMIC_RELAXED);
  *stream = __atomic_load_n(&last_stream, __ATOMIC_RELAXED);
  return n;
}

FC_EXPORT int cuEventCreate(struct fc_event** out, unsigned flags) {
  FC_NEED_CTX();
  struct fc_event* e = calloc(1, sizeof(*e));
  if (!e) return FC_ERROR_OUT_OF_MEMORY;
  e->flags = flags;
  pthread_mutex_init(&e->mu, NULL);
  pthread_cond_init(&e->cv, NULL);
  e->refs = 1;
  e->device = fc_current() ? fc_current()->device : -1;
  fc_ctx_gate(e->device);
  reg_add(e, H_EVENT);
  *out = e;
  return FC_SUCCESS;
}

FC_EXPORT int cuEventDestroy_v2(struct fc_event* e) {
  if (!reg_has(e, H_EVENT)) return FC_ERROR_INVALID_HANDLE;
  reg_del(e);
  ev_unref(e); /* records and waits still queued keep it until they are done */
  return FC_SUCCESS;
}

FC_EXPORT int cuEventRecord(void* event, void* h) {
  if (!reg_has(event, H_EVENT)) return FC_ERROR_INVALID_HANDLE;
  struct fc_event* e = event;
  struct fc_stream* s = resolve(h);
  if (!s) return bad_stream(h);
  __atomic_store_n(&last_event, event, __ATOMIC_RELAXED);
  __atomic_store_n(&last_stream, h, __ATOMIC_RELAXED);
  __atomic_fetch_add(&event_records, 1, __ATOMIC_RELEASE);
  fc_ctx_gate(s->device);
  struct op* o = op_new(OP_RECORD);
  if (!o) return FC_ERROR_OUT_OF_MEMORY;
  pthread_mutex_lock(&e->mu);
  o->seq = ++e->recorded;
  pthread_mutex_unlock(&e->mu);
  ev_ref(e);
  o->ev = e;
  return submit(s, o);
}

FC_EXPORT int cuStreamWaitEvent(void* h, struct fc_event* e, unsigned flags) {
  (void)flags;
  if (!reg_has(e, H_EVENT)) return FC_ERROR_INVALID_HANDLE;
  struct fc_stream* s = resolve(h);
  if (!s) return bad_stream(h);
  fc_ctx_gate(s->device);
  struct op* o = op_new(OP_WAIT);
  if (!o) return FC_ERROR_OUT_OF_MEMORY;
  pthread_mutex_lock(&e->mu);
  o->seq = e->recorded; /* the latest record at the time of the call */
  pthread_mutex_unlock(&e->mu);
  ev_ref(e);
  o->ev = e;
  return submit(s, o);
}

/* Waiting for or asking after an event is unsafe while a capture is under way, as in CUDA. */
FC_EXPORT int cuEventSynchronize(struct fc_event* e) {
  if (!reg_has(e, H_EVENT)) return FC_ERROR_INVALID_HANDLE;
  if (!fc_sync_allowed()) return FC_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  fc_ctx_gate(e->device);
  pthread_mutex_lock(&e->mu);
  while (e->completed < e->recorded) pthread_cond_wait(&e->cv, &e->mu);
  pthread_mutex_unlock(&e->mu);
  return FC_SUCCESS;
}

FC_EXPORT int cuEventQuery(struct fc_event* e) {
  if (!reg_has(e, H_EVENT)) return FC_ERROR_INVALID_HANDLE;
  if (!fc_sync_allowed()) return FC_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  fc_ctx_gate(e->device);
  pthread_mutex_lock(&e->mu);
  int done = e->completed >= e->recorded;
  pthread_mutex_unlock(&e->mu);
  return done ? FC_SUCCESS : FC_ERROR_NOT_READY;
}

#define FC_EVENT_DISABLE_TIMING 0x2u

/* The time between two completed records, in milliseconds, as CUDA reports it: an invalid
 * handle for an event made with CU_EVENT_DISABLE_TIMING or never recorded, not ready while
 * either has a record pending. */
FC_EXPORT int cuEventElapsedTime_v2(float* ms, struct fc_event* a, struct fc_event* b) {
  if (!reg_has(a, H_EVENT) || !reg_has(b, H_EVENT)) return FC_ERROR_INVALID_HANDLE;
  if ((a->flags | b->flags) & FC_EVENT_DISABLE_TIMING) return FC_ERROR_INVALID_HANDLE;
  if (!fc_sync_allowed()) return FC_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  uint64_t t[2];
  struct fc_event* e[2] = {a, b};
  int ready = 1;
  for (int i = 0; i < 2; i++) {
    pthread_mutex_lock(&e[i]->mu);
    uint64_t recorded = e[i]->recorded;
    int done = e[i]->completed >= recorded;
    t[i] = e[i]->at_ns;
    pthread_mutex_unlock(&e[i]->mu);
    if (!recorded) return FC_ERROR_INVALID_HANDLE;
    ready &= done;
  }
  if (!ready) return FC_ERROR_NOT_READY;
  *ms = (float)((double)((int64_t)(t[1] - t[0])) / 1e6);
  return FC_SUCCESS;
}

/* ---- Capture and graphs ------------------------------------------------------------------------ */

FC_EXPORT int cuStreamBeginCapture_v2(void* h, int mode) {
  struct fc_stream* s = resolve(h);
  if (!s || (uintptr_t)h <= 2) return FC_ERROR_INVALID_HANDLE; /* the legacy stream cannot capture */
  struct fc_graph* g = calloc(1, sizeof(*g));
  if (!g) return FC_ERROR_OUT_OF_MEMORY;
  pthread_mutex_lock(&s->mu);
  int busy = s->capture != 0;
  if (!busy) {
    s->capture = 1;
    s->capture_mode = mode;
    s->graph = g;
  }
  pthread_mutex_unlock(&s->mu);
  if (busy) {
    free(g);
    return FC_ERROR_ILLEGAL_STATE;
  }
  if (mode == 0) {
    pthread_mutex_lock(&reg_mu);
    global_captures++;
    pthread_mutex_unlock(&reg_mu);
  }
  if (mode == 1) thread_captures++;
  return FC_SUCCESS;
}

static void ops_free(struct op* o) {
  while (o) {
    struct op* n = o->next;
    op_free(o);
    o = n;
  }
}

FC_EXPORT int cuStreamEndCapture(void* h, struct fc_graph** out) {
  struct fc_stream* s = resolve(h);
  if (!s) return bad_stream(h);
  pthread_mutex_lock(&s->mu);
  int state = s->capture, mode = s->capture_mode;
  struct fc_graph* g = s->graph;
  s->capture = 0;
  s->graph = NULL;
  pthread_mutex_unlock(&s->mu);
  if (!state) return FC_ERROR_ILLEGAL_STATE;
  if (mode == 0) {
    pthread_mutex_lock(&reg_mu);
    global_captures--;
    pthread_mutex_unlock(&reg_mu);
  }
  if (mode == 1 && thread_captures > 0) thread_captures--;
  if (state == 2) {
    fc_graph_objs_drop(g);
    ops_free(g->head);
    free(g);
    *out = NULL;
    return FC_ERROR_STREAM_CAPTURE_INVALIDATED;
  }
  *out = g;
  return FC_SUCCESS;
}

/* The graph a capture builds (user objects retained on it go to the captured graph). */
FC_EXPORT int cuStreamGetCaptureInfo_v2(void* h, int* status, unsigned long long* id, struct fc_graph** graph,
                                        const void*** deps, size_t* ndeps) {
  struct fc_stream* s = resolve(h);
  if (!s) return FC_ERROR_INVALID_HANDLE;
  pthread_mutex_lock(&s->mu);
  int st = s->capture;
  if (status) *status = st;
  if (id) *id = (unsigned long long)(uintptr_t)s->graph;
  if (graph) *graph = st == 1 ? s->graph : NULL;
  pthread_mutex_unlock(&s->mu);
  if (deps) *deps = NULL;
  if (ndeps) *ndeps = 0;
  return FC_SUCCESS;
}

FC_EXPORT int cuStreamIsCapturing(void* h, int* status) {
  struct fc_stream* s = resolve(h);
  if (!s) return bad_stream(h);
  pthread_mutex_lock(&s->mu);
  *status = s->capture;
  pthread_mutex_unlock(&s->mu);
  return FC_SUCCESS;
}

static struct fc_graph* graph_copy(const struct fc_graph* g) {
  struct fc_graph* c = calloc(1, sizeof(*c));
  if (!c) return NULL;
  for (const struct op* o = g->head; o; o = o->next) {
    struct op* n = malloc(sizeof(*n));
    if (!n) {
      ops_free(c->head);
      free(c);
      return NULL;
    }
    *n = *o;
    n->next = NULL;
    if (o->owned) {
      n->owned = malloc(o->n);
      if (!n->owned) {
        free(n);
        ops_free(c->head);
        free(c);
        return NULL;
      }
      memcpy(n->owned, o->owned, o->n);
      n->src = n->owned;
    }
    if (n->ev) ev_ref(n->ev);
    if (c->tail)
      c->tail->next = n;
    else
      c->head = n;
    c->tail = n;
  }
  return c;
}

FC_EXPORT int cuGraphInstantiateWithFlags(struct fc_graph** exec, struct fc_graph* g,
                                          unsigned long long flags) {
  (void)flags;
  if (!g) return FC_ERROR_INVALID_VALUE;
  *exec = graph_copy(g);
  if (*exec) fc_graph_objs_copy(g, *exec);
  return *exec ? FC_SUCCESS : FC_ERROR_OUT_OF_MEMORY;
}

FC_EXPORT int cuGraphLaunch(struct fc_graph* exec, void* h) {
  struct fc_stream* s = resolve(h);
  if (!s || !exec) return FC_ERROR_INVALID_HANDLE;
  fc_ctx_gate(s->device);
  struct fc_graph* c = graph_copy(exec);
  if (!c) return FC_ERROR_OUT_OF_MEMORY;
  struct op* o = c->head;
  free(c);
  int rc = FC_SUCCESS;
  while (o) {
    struct op* n = o->next;
    if (o->kind == OP_RECORD) {
      /* A record in a replay is a new record of its event. */
      pthread_mutex_lock(&o->ev->mu);
      o->seq = ++o->ev->recorded;
      pthread_mutex_unlock(&o->ev->mu);
    }
    int e = submit(s, o);
    if (e != FC_SUCCESS && rc == FC_SUCCESS) rc = e;
    o = n;
  }
  return rc;
}

FC_EXPORT int cuGraphDestroy(struct fc_graph* g) {
  if (!g) return FC_ERROR_INVALID_VALUE;
  fc_graph_objs_drop(g);
  ops_free(g->head);
  free(g);
  return FC_SUCCESS;
}
FC_EXPORT int cuGraphExecDestroy(struct fc_graph* g) {
  return cuGraphDestroy(g);
}
