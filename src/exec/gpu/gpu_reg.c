/* Registered user buffers and the collective zero-copy binding of a call (gpu_reg.h). */
#include "exec/gpu/gpu_reg.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/gpu/gpu_vmm.h"
#include "transport/cu.h"
#include "util/host.h"
#include "util/log.h"
#include "util/status.h"

#define DP(p) ((CUdeviceptr)(uintptr_t)(p))
#define TABLE_BUCKETS 64
#define RETIRED_MAX 16 /* ids a card announces; more wait for the next round */
#define PEER_ALLOCS 32 /* verdicts (and so mappings) kept per rank; the least recently used go */

/* A peer's allocation opened through CUDA IPC. Its key is the owner's rank and the driver's id
 * of the allocation there, so an allocation freed and made again is a new key, never the old
 * mapping. */
struct ipc_map {
  uint32_t rank;
  uint64_t buffer_id;
  CUdeviceptr base;
  struct ipc_map* next;
};

/* A peer allocation every rank has tried to map, with the verdict they agreed on; kept alike on
 * every rank (the same steps on the same cards). */
struct known {
  uint32_t rank;
  uint64_t buffer_id;
  bool ok;
  bool pinned;   /* a captured call used it: a graph may replay it, so no bound drops it */
  uint64_t last; /* the bind that last used it */
  struct known* next;
};

/* A device table of every rank's input then output address, kept by content: a captured graph
 * may read it for as long as the backend lives. */
struct table {
  uint64_t hash;
  uint64_t* host; /* [2 * nranks] */
  CUdeviceptr dev;
  struct table* next;
};

struct shunt_gpu_regs {
  pthread_mutex_t mu; /* the registrations (registered and removed from any thread) */
  struct shunt_gpu_reg* head;
  /* Under mu: ids of this rank's allocations that peers may have mapped and that no
   * registration holds any more; announced on this rank's next cards, where peers close them. */
  uint64_t* retired;
  size_t nretired, cap_retired;
  /* The binding's state: changed only by shunt_gpu_reg_bind, in the same steps on every rank
   * (counts and verdicts of rounds every rank took part in). */
  pthread_mutex_t bind_mu;
  uint64_t rounds; /* rounds held on the board */
  uint64_t binds;  /* calls bound: the clock of the verdicts' use */
  struct known* known;
  struct ipc_map* maps;
  /* Mappings no verdict uses any more, closed once this rank's launches made before are done
   * (a kernel still running may read them). */
  struct ipc_map* closing;
  struct table* tables[TABLE_BUCKETS];
  uint32_t nranks;
};

/* One side (input or output) of a call as its owner describes it. */
struct side {
  uint64_t addr;      /* in the owner's address space */
  uint64_t bytes;     /* of the call there */
  uint64_t alloc_off; /* of addr inside its allocation */
  uint64_t buffer_id; /* of that allocation */
  CUipcMemHandle handle;
  uint32_t has_handle;
  uint32_t vmm; /* VMM memory whose descriptor is not offered yet (exported when a process needs it) */
};

/* What each rank says of a call. */
struct card {
  uint64_t proc;
  uint32_t usable;   /* every buffer the call needs lies in a current registration and one allocation */
  uint32_t inplace;  /* the call is in place (only the output is reached) */
  uint32_t vote;     /* the verdict's round: this rank can reach every new allocation */
  uint32_t captured; /* the call is being captured into a graph */
  uint32_t nretired, pad;
  struct side in, out;
  uint64_t retired[RETIRED_MAX]; /* first round: ids peers close (deregistered, or freed) */
};
_Static_assert(sizeof(struct card) <= SHUNT_GPU_AGREE_RECORD, "a card fits the board");

struct shunt_gpu_regs* shunt_gpu_regs_new(void) {
  struct shunt_gpu_regs* rs = calloc(1, sizeof(*rs));
  if (!rs) return NULL;
  pthread_mutex_init(&rs->mu, NULL);
  pthread_mutex_init(&rs->bind_mu, NULL);
  return rs;
}

static uint64_t buffer_id(const struct shunt_cu* cu, const void* p) {
  unsigned long long id = 0;
  if (!cu || cu->PointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, DP(p)) != CUDA_SUCCESS) return 0;
  return id;
}

bool shunt_gpu_reg_current(const struct shunt_cu* cu, const struct shunt_gpu_reg* r) {
  return buffer_id(cu, r->base) == r->buffer_id;
}

/* Announces that peers may close their mapping of allocation `id` of this rank, unless another
 * registration (but `except`) still holds it; an allocation that is gone (freed and allocated
 * again) is announced whatever registrations still name it, since none of them can use it. Under
 * mu. */
static void retire_locked(struct shunt_gpu_regs* rs, uint64_t id, const struct shunt_gpu_reg* except,
                          bool gone) {
  if (!id) return;
  for (struct shunt_gpu_reg* r = rs->head; r && !gone; r = r->next)
    if (r != except && r->buffer_id == id) return;
  for (size_t i = 0; i < rs->nretired; i++)
    if (rs->retired[i] == id) return;
  if (rs->nretired == rs->cap_retired) {
    size_t cap = rs->cap_retired ? 2 * rs->cap_retired : 16;
    uint64_t* v = realloc(rs->retired, cap * sizeof(*v));
    /* Out of memory: peers keep the mapping until the bound or the communicator's end. */
    if (!v) return;
    rs->retired = v;
    rs->cap_retired = cap;
  }
  rs->retired[rs->nretired++] = id;
}

/* A registration's descriptor offered to peers goes with it; peers are told to close their
 * mappings of its allocation (gone: freed and allocated again). Under mu. */
static void let_go_locked(struct shunt_gpu_regs* rs, struct shunt_gpu_reg* r, bool gone) {
  if (r->alloc_size && !r->warned) retire_locked(rs, r->buffer_id, r, gone); /* warned: announced then */
  if (r->exported) shunt_gpu_vmm_unexport(&r->handle);
  r->exported = r->has_handle = false;
}

struct shunt_gpu_reg* shunt_gpu_reg_add(struct shunt_gpu_regs* rs, const struct shunt_cu* cu, void* base,
                                        size_t size) {
  struct shunt_gpu_reg* r = calloc(1, sizeof(*r));
  if (!r) return NULL;
  r->base = base;
  r->size = size;
  r->buffer_id = buffer_id(cu, base);
  pthread_mutex_lock(&rs->mu);
  /* Registered again before the retirement was announced: peers' mappings stay valid. */
  for (size_t i = 0; i < rs->nretired; i++)
    if (rs->retired[i] == r->buffer_id) rs->retired[i] = rs->retired[--rs->nretired];
  r->next = rs->head;
  rs->head = r;
  pthread_mutex_unlock(&rs->mu);
  return r;
}

void shunt_gpu_reg_remove(struct shunt_gpu_regs* rs, struct shunt_gpu_reg* r) {
  pthread_mutex_lock(&rs->mu);
  struct shunt_gpu_reg** pp = &rs->head;
  while (*pp && *pp != r) pp = &(*pp)->next;
  if (*pp) {
    *pp = r->next;
    let_go_locked(rs, r, false);
    free(r);
  }
  pthread_mutex_unlock(&rs->mu);
}

static void close_all(const struct shunt_cu* cu, struct ipc_map** list) {
  while (*list) {
    struct ipc_map* m = *list;
    *list = m->next;
    if (cu) shunt_gpu_peer_mem_close(cu, m->base);
    free(m);
  }
}

void shunt_gpu_regs_free(struct shunt_gpu_regs* rs, const struct shunt_cu* cu, CUcontext ctx) {
  if (!rs) return;
  /* Relaxed: frees must neither fail nor invalidate another thread's capture. */
  struct shunt_cu_guard g = shunt_cu_enter(cu, ctx, 1);
  while (rs->head) {
    struct shunt_gpu_reg* r = rs->head;
    rs->head = r->next;
    if (r->exported) shunt_gpu_vmm_unexport(&r->handle);
    free(r);
  }
  free(rs->retired);
  close_all(cu, &rs->maps);
  close_all(cu, &rs->closing);
  while (rs->known) {
    struct known* k = rs->known;
    rs->known = k->next;
    free(k);
  }
  for (int b = 0; b < TABLE_BUCKETS; b++)
    while (rs->tables[b]) {
      struct table* t = rs->tables[b];
      rs->tables[b] = t->next;
      if (cu && t->dev) cu->MemFree(t->dev);
      free(t->host);
      free(t);
    }
  shunt_cu_leave(&g);
  pthread_mutex_destroy(&rs->mu);
  pthread_mutex_destroy(&rs->bind_mu);
  free(rs);
}

/* ---- This rank's card ----------------------------------------------------------------------- */

/* Describes [p, p + bytes): usable when it lies inside a registration that is current and inside
 * the one allocation holding the registration's start, as the driver reports that allocation's
 * range. A range the driver splits (a registration across two allocations) is not usable: a
 * peer maps one allocation, and would reach past its mapping. */
static bool describe(struct shunt_gpu_regs* rs, const struct shunt_cu* cu, uint32_t rank, const void* p,
                     uint64_t bytes, struct side* s) {
  const char* c = p;
  bool ok = false;
  pthread_mutex_lock(&rs->mu);
  struct shunt_gpu_reg* r = rs->head;
  while (r && !(c >= r->base && c + bytes <= r->base + r->size)) r = r->next;
  if (r && !shunt_gpu_reg_current(cu, r)) {
    /* Freed and allocated again without deregistering: peers' mappings would be of memory that
     * is gone (NCCL asks for deregistration before free; this keeps a program that forgot from
     * reading stale memory). Peers close theirs at the next round. */
    if (!r->warned) {
      SHUNT_WARN(
          "rank %u: registered buffer %p was freed and allocated again without ncclCommDeregister; calls "
          "on it are staged",
          rank, (void*)r->base);
      let_go_locked(rs, r, true);
    }
    r->warned = true;
    r = NULL;
  }
  if (r && r->alloc_size == 0) {
    CUdeviceptr start = 0;
    size_t size = 0;
    if (cu->PointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, DP(r->base)) == CUDA_SUCCESS &&
        cu->PointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, DP(r->base)) == CUDA_SUCCESS) {
      r->alloc_start = start;
      r->alloc_size = size;
      r->has_handle = shunt_gpu_peer_mem_describe(cu, start, &r->handle);
      /* VMM memory's descriptor is offered only once a peer process needs it (bind). */
      r->exportable = !r->has_handle && shunt_gpu_vmm_exportable(cu, start);
    }
  }
  if (r && r->alloc_size && (uintptr_t)c >= r->alloc_start &&
      (uintptr_t)c + bytes <= r->alloc_start + r->alloc_size) {
    s->addr = (uint64_t)(uintptr_t)c;
    s->bytes = bytes;
    s->alloc_off = (uint64_t)(uintptr_t)c - r->alloc_start;
    s->buffer_id = r->buffer_id;
    s->has_handle = r->has_handle;
    s->vmm = r->exportable && !r->has_handle;
    s->handle = r->handle;
    ok = true;
  }
  pthread_mutex_unlock(&rs->mu);
  return ok;
}

/* ---- Peer mappings ---------------------------------------------------------------------------- */

static struct known* known_find(struct shunt_gpu_regs* rs, uint32_t rank, uint64_t id) {
  for (struct known* k = rs->known; k; k = k->next)
    if (k->rank == rank && k->buffer_id == id) return k;
  return NULL;
}

static struct ipc_map* map_find(struct shunt_gpu_regs* rs, uint32_t rank, uint64_t id) {
  for (struct ipc_map* m = rs->maps; m; m = m->next)
    if (m->rank == rank && m->buffer_id == id) return m;
  return NULL;
}

static int map_open(struct shunt_gpu_regs* rs, const struct shunt_cu* cu, uint32_t rank, const struct side* s,
                    char* err, size_t len) {
  if (map_find(rs, rank, s->buffer_id)) return 0;
  if (!s->has_handle) {
    snprintf(err, len, "rank %u's registered buffer cannot be exported through CUDA IPC", rank);
    return SHUNT_E_INVALID;
  }
  struct ipc_map* m = calloc(1, sizeof(*m));
  if (!m) {
    snprintf(err, len, "out of memory");
    return SHUNT_E_NOMEM;
  }
  CUresult e = shunt_gpu_peer_mem_open(cu, &s->handle, &m->base);
  if (e != CUDA_SUCCESS) {
    snprintf(err, len, "opening rank %u's registered buffer: %s", rank, shunt_cu_error(e));
    free(m);
    return SHUNT_E_CUDA;
  }
  m->rank = rank;
  m->buffer_id = s->buffer_id;
  m->next = rs->maps;
  rs->maps = m;
  return 0;
}

/* The mapping of (rank, id), taken off the list; NULL when there is none. */
static struct ipc_map* map_take(struct shunt_gpu_regs* rs, uint32_t rank, uint64_t id) {
  for (struct ipc_map** pp = &rs->maps; *pp; pp = &(*pp)->next)
    if ((*pp)->rank == rank && (*pp)->buffer_id == id) {
      struct ipc_map* m = *pp;
      *pp = m->next;
      return m;
    }
  return NULL;
}

/* Closes a mapping this bind opened (no kernel has it yet). */
static void map_close(struct shunt_gpu_regs* rs, const struct shunt_cu* cu, uint32_t rank, uint64_t id) {
  struct ipc_map* m = map_take(rs, rank, id);
  if (!m) return;
  shunt_gpu_peer_mem_close(cu, m->base);
  free(m);
}

/* Drops the verdict on (rank, id) on every rank alike; its mapping here is closed once no
 * kernel launched before may still read it (close_done). */
static void forget(struct shunt_gpu_regs* rs, uint32_t rank, uint64_t id) {
  for (struct known** pp = &rs->known; *pp; pp = &(*pp)->next)
    if ((*pp)->rank == rank && (*pp)->buffer_id == id) {
      struct known* k = *pp;
      *pp = k->next;
      free(k);
      break;
    }
  struct ipc_map* m = map_take(rs, rank, id);
  if (m) {
    m->next = rs->closing;
    rs->closing = m;
  }
}

/* Closes the mappings waiting to close once this rank's launches so far are done: drained(arg)
 * says so (without waiting). */
static void close_done(struct shunt_gpu_regs* rs, const struct shunt_cu* cu, bool (*drained)(void*),
                       void* arg) {
  if (rs->closing && (!drained || drained(arg))) close_all(cu, &rs->closing);
}

/* Keeps at most PEER_ALLOCS verdicts per rank: the least recently used go first, never one the
 * current call uses (last == binds) or one a captured call used. The same steps on every rank. */
static void bound(struct shunt_gpu_regs* rs, uint32_t nranks) {
  for (uint32_t q = 0; q < nranks; q++) {
    for (;;) {
      unsigned n = 0;
      struct known* old = NULL;
      for (struct known* k = rs->known; k; k = k->next) {
        if (k->rank != q) continue;
        n++;
        if (!k->pinned && k->last < rs->binds && (!old || k->last < old->last)) old = k;
      }
      if (n <= PEER_ALLOCS || !old) break;
      forget(rs, q, old->buffer_id);
    }
  }
}

/* ---- Tables ------------------------------------------------------------------------------------ */

static uint64_t hash_of(const uint64_t* v, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ v[i]) * 1099511628211ull;
  return h;
}

/* The device table holding `addrs` (2 * nranks), uploaded on first use. */
static CUdeviceptr table_for(struct shunt_gpu_regs* rs, const struct shunt_cu* cu, CUstream stream,
                             const uint64_t* addrs, char* err, size_t len) {
  size_t n = 2 * (size_t)rs->nranks, bytes = n * sizeof(uint64_t);
  uint64_t h = hash_of(addrs, n);
  struct table** head = &rs->tables[h % TABLE_BUCKETS];
  for (struct table* t = *head; t; t = t->next)
    if (t->hash == h && !memcmp(t->host, addrs, bytes)) return t->dev;
  struct table* t = calloc(1, sizeof(*t));
  uint64_t* host = malloc(bytes);
  if (!t || !host) {
    free(t);
    free(host);
    snprintf(err, len, "out of memory");
    return 0;
  }
  memcpy(host, addrs, bytes);
  CUdeviceptr d = 0;
  CUresult e = cu->MemAlloc(&d, bytes);
  /* On the world's own stream, not the legacy one: a synchronous copy would wait for the
   * application's default-stream work and break a capture on a blocking stream. */
  if (e == CUDA_SUCCESS) e = cu->MemcpyHtoDAsync(d, host, bytes, stream);
  if (e == CUDA_SUCCESS) e = cu->StreamSynchronize(stream);
  if (e != CUDA_SUCCESS) {
    if (d) cu->MemFree(d);
    snprintf(err, len, "the zero-copy table: %s", shunt_cu_error(e));
    free(t);
    free(host);
    return 0;
  }
  t->hash = h;
  t->host = host;
  t->dev = d;
  t->next = *head;
  *head = t;
  return d;
}

/* ---- The binding -------------------------------------------------------------------------------- */

/* The sides of q's card peers reach: the output, and the input unless in place. */
static const struct side* side_of(const struct card* c, int k) {
  return k == 0 ? &c->out : c->inplace ? NULL : &c->in;
}

/* Whether a rank of another process than q needs q's side s: VMM memory whose descriptor q
 * does not offer yet, and which no round judged. */
static bool wants_ticket(struct shunt_gpu_regs* rs, const struct card* cards, uint32_t nranks, uint32_t q,
                         const struct side* s) {
  if (!s || !s->vmm || s->has_handle || known_find(rs, q, s->buffer_id)) return false;
  for (uint32_t p = 0; p < nranks; p++)
    if (cards[p].proc != cards[q].proc) return true;
  return false;
}

/* Offers the descriptor of this rank's side s (its registration found again): from now on this
 * process answers peers that ask for it (gpu_fdpass.h). */
static void export_side(struct shunt_gpu_regs* rs, const struct shunt_cu* cu, struct side* s) {
  pthread_mutex_lock(&rs->mu);
  for (struct shunt_gpu_reg* r = rs->head; r; r = r->next) {
    if (!r->exportable || r->buffer_id != s->buffer_id || r->alloc_start != s->addr - s->alloc_off) continue;
    if (!r->has_handle) {
      r->exported = r->has_handle = shunt_gpu_vmm_export(cu, DP(r->alloc_start), &r->handle);
      if (!r->has_handle) r->exportable = false; /* not asked again at every call */
    }
    s->handle = r->handle;
    s->has_handle = r->has_handle;
    break;
  }
  s->vmm = 0;
  pthread_mutex_unlock(&rs->mu);
}

/* When a process needs another's VMM memory that no descriptor was offered for yet, one round in
 * which its owners offer theirs: every rank holds it or none does (the same cards). */
static int tickets(struct shunt_gpu_regs* rs, const struct shunt_cu* cu, struct shunt_gpu_agree* board,
                   uint32_t rank, uint32_t nranks, struct card* cards, bool (*stop)(void*), void* arg,
                   char* err, size_t len) {
  bool needed = false;
  for (uint32_t q = 0; q < nranks && !needed; q++)
    for (int k = 0; k < 2 && !needed; k++) needed = wants_ticket(rs, cards, nranks, q, side_of(&cards[q], k));
  if (!needed) return 0;
  struct card mine = cards[rank];
  for (int k = 0; k < 2; k++)
    if (wants_ticket(rs, cards, nranks, rank, side_of(&mine, k)))
      export_side(rs, cu, k == 0 ? &mine.out : &mine.in);
  return shunt_gpu_agree_round(board, ++rs->rounds, &mine, sizeof(mine), cards, stop, arg, err, len);
}

/* Maps every allocation of the cards that no round has judged yet (a rank of this process
 * checks that its device may touch the owner's memory), and agrees with every rank whether all
 * could: true when every allocation the call needs is reachable on every rank. */
static int judge(struct shunt_gpu_regs* rs, const struct shunt_cu* cu, struct shunt_gpu_agree* board,
                 uint32_t rank, uint32_t nranks, struct card* cards, bool (*stop)(void*), void* arg, bool* ok,
                 char* err, size_t len) {
  bool fresh = false, refused = false;
  for (uint32_t q = 0; q < nranks; q++)
    for (int k = 0; k < 2; k++) {
      const struct side* s = side_of(&cards[q], k);
      if (!s) continue;
      struct known* kn = known_find(rs, q, s->buffer_id);
      if (!kn) fresh = true;
      if (kn && !kn->ok) refused = true;
    }
  *ok = !refused;
  /* Every rank sees the same cards and the same verdicts so far: all hold the second round or
   * none does. */
  if (refused || !fresh) return 0;
  char why[256] = "";
  bool mine = true;
  CUdevice dev = -1;
  if (cu->CtxGetDevice(&dev) != CUDA_SUCCESS) dev = -1;
  for (uint32_t q = 0; q < nranks && mine; q++)
    for (int k = 0; k < 2 && mine; k++) {
      const struct side* s = side_of(&cards[q], k);
      if (!s || q == rank || known_find(rs, q, s->buffer_id)) continue;
      if (cards[q].proc != cards[rank].proc) {
        mine = map_open(rs, cu, q, s, why, sizeof(why)) == 0;
        continue;
      }
      /* This process: the owner's own pointer, which this rank's kernels may touch only where
       * the driver lets its device (peer access, or VMM memory granted to it). */
      mine = dev >= 0 && shunt_gpu_mem_reachable(cu, s->addr, s->bytes, dev);
      if (!mine)
        snprintf(why, sizeof(why),
                 "rank %u's buffer is memory that device %d may not touch (VMM memory not granted to it)", q,
                 (int)dev);
    }
  struct card vote = cards[rank];
  vote.vote = mine;
  SHUNT_TRY(shunt_gpu_agree_round(board, ++rs->rounds, &vote, sizeof(vote), cards, stop, arg, err, len));
  bool all = true;
  for (uint32_t q = 0; q < nranks; q++) all = all && cards[q].vote;
  if (!mine)
    SHUNT_WARN("rank %u: a registered buffer cannot be reached zero-copy (%s); calls on it are staged", rank,
               why);
  for (uint32_t q = 0; q < nranks; q++)
    for (int k = 0; k < 2; k++) {
      const struct side* s = side_of(&cards[q], k);
      if (!s || known_find(rs, q, s->buffer_id)) continue;
      struct known* kn = calloc(1, sizeof(*kn));
      if (!all) map_close(rs, cu, q, s->buffer_id);
      if (!kn) {
        /* Its peers recorded the verdict and this rank cannot: their later rounds would no
         * longer match this rank's, so the call fails (the communicator is broken). */
        snprintf(err, len, "out of memory for the zero-copy verdicts");
        return SHUNT_E_NOMEM;
      }
      kn->rank = q;
      kn->buffer_id = s->buffer_id;
      kn->ok = all;
      kn->next = rs->known;
      rs->known = kn;
    }
  *ok = all;
  return 0;
}

/* The verdicts this call uses are the most recently used; a captured call's stay while the
 * communicator lives (a graph may replay it). */
static void touch(struct shunt_gpu_regs* rs, const struct card* cards, uint32_t nranks) {
  bool captured = false;
  for (uint32_t q = 0; q < nranks; q++) captured = captured || cards[q].captured;
  for (uint32_t q = 0; q < nranks; q++)
    for (int k = 0; k < 2; k++) {
      const struct side* s = side_of(&cards[q], k);
      struct known* kn = s ? known_find(rs, q, s->buffer_id) : NULL;
      if (!kn) continue;
      kn->last = rs->binds;
      kn->pinned = kn->pinned || captured;
    }
}

static uint64_t peer_addr(struct shunt_gpu_regs* rs, uint32_t rank, const struct card* cards, uint32_t q,
                          const struct side* s) {
  if (q == rank || cards[q].proc == cards[rank].proc) return s->addr;
  struct ipc_map* m = map_find(rs, q, s->buffer_id);
  return m ? m->base + s->alloc_off : 0;
}

/* This rank's retired ids onto its card (as many as fit; the rest wait for the next round). */
static void announce(struct shunt_gpu_regs* rs, struct card* me) {
  pthread_mutex_lock(&rs->mu);
  size_t n = rs->nretired < RETIRED_MAX ? rs->nretired : RETIRED_MAX;
  if (n) { /* none yet: no list either */
    memcpy(me->retired, rs->retired, n * sizeof(uint64_t));
    memmove(rs->retired, rs->retired + n, (rs->nretired - n) * sizeof(uint64_t));
    rs->nretired -= n;
  }
  me->nretired = (uint32_t)n;
  pthread_mutex_unlock(&rs->mu);
}

int shunt_gpu_reg_bind(struct shunt_gpu_regs* rs, const struct shunt_cu* cu, CUcontext ctx, CUstream stream,
                       struct shunt_gpu_agree* board, uint32_t rank, uint32_t nranks, const void* in,
                       uint64_t in_bytes, const void* out, uint64_t out_bytes, bool inplace, bool captured,
                       const struct shunt_gpu_reg_waits* waits, struct shunt_gpu_zc* z, char* err,
                       size_t len) {
  z->in = z->out = NULL;
  if (!board || !cu) return 0;
  bool (*stop)(void*) = waits->stop;
  void* arg = waits->arg;
  pthread_mutex_lock(&rs->bind_mu);
  rs->nranks = nranks;
  struct card* cards = calloc(nranks, sizeof(*cards));
  uint64_t* addrs = calloc(2 * (size_t)nranks, sizeof(uint64_t));
  if (!cards || !addrs) {
    /* This rank cannot take part: its peers' round fails after the board's timeout. */
    free(cards);
    free(addrs);
    pthread_mutex_unlock(&rs->bind_mu);
    snprintf(err, len, "out of memory for the zero-copy binding");
    return SHUNT_E_NOMEM;
  }
  rs->binds++;
  struct card me = {0};
  me.proc = shunt_process_token();
  me.inplace = inplace;
  me.captured = captured;
  /* Relaxed: the binding may come with a call that is being captured. */
  struct shunt_cu_guard g = shunt_cu_enter(cu, ctx, 1);
  me.usable = describe(rs, cu, rank, out, out_bytes, &me.out) &&
              (inplace || describe(rs, cu, rank, in, in_bytes, &me.in));
  announce(rs, &me);
  int rc = shunt_gpu_agree_round(board, ++rs->rounds, &me, sizeof(me), cards, stop, arg, err, len);
  if (rc == 0) {
    /* Allocations their owners let go of: every rank forgets them alike. */
    for (uint32_t q = 0; q < nranks; q++)
      for (uint32_t i = 0; i < cards[q].nretired && i < RETIRED_MAX; i++) forget(rs, q, cards[q].retired[i]);
    bool all = true;
    for (uint32_t q = 0; q < nranks; q++) all = all && cards[q].usable && cards[q].inplace == me.inplace;
    bool ok = false;
    if (all) rc = tickets(rs, cu, board, rank, nranks, cards, stop, arg, err, len);
    if (rc == 0 && all) rc = judge(rs, cu, board, rank, nranks, cards, stop, arg, &ok, err, len);
    if (rc == 0 && all) touch(rs, cards, nranks);
    if (rc == 0) bound(rs, nranks);
    if (rc == 0 && all && ok) {
      for (uint32_t q = 0; q < nranks && ok; q++) {
        addrs[nranks + q] = peer_addr(rs, rank, cards, q, &cards[q].out);
        addrs[q] = inplace ? 0 : peer_addr(rs, rank, cards, q, &cards[q].in);
        ok = addrs[nranks + q] && (inplace || addrs[q]);
      }
      CUdeviceptr t = ok ? table_for(rs, cu, stream, addrs, err, len) : 0;
      /* This rank staged while its peers reach it in place would be wrong data: a table it
       * could not make fails the call, as any enqueue that fails on one rank. */
      if (!t) rc = -1;
      if (!ok) snprintf(err, len, "a peer's buffer agreed on is not mapped here");
      if (t) {
        z->in = inplace ? NULL : (const uint64_t*)(uintptr_t)t;
        z->out = (const uint64_t*)(uintptr_t)t + nranks;
      }
    }
  }
  close_done(rs, cu, waits->drained, arg);
  shunt_cu_leave(&g);
  free(cards);
  free(addrs);
  pthread_mutex_unlock(&rs->bind_mu);
  return rc;
}
