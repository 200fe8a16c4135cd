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

#define DP(p) ((CUdeviceptr)(uintptr_t)(p))
#define TABLE_BUCKETS 64

/* A peer's allocation opened through CUDA IPC. Its key is the owner's rank and the driver's id
 * of the allocation there, so an allocation freed and made again is a new key, never the old
 * mapping. */
struct ipc_map {
  uint32_t rank;
  uint64_t buffer_id;
  CUdeviceptr base;
  struct ipc_map* next;
};

/* A peer allocation every rank has tried to map, with the verdict they agreed on. */
struct known {
  uint32_t rank;
  uint64_t buffer_id;
  bool ok;
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
  /* The binding's state: changed only by shunt_gpu_reg_bind, in the same steps on every rank
   * (counts and verdicts of rounds every rank took part in). */
  pthread_mutex_t bind_mu;
  uint64_t rounds; /* rounds held on the board */
  struct known* known;
  struct ipc_map* maps;
  struct table* tables[TABLE_BUCKETS];
  uint32_t nranks;
};

/* One side (input or output) of a call as its owner describes it. */
struct side {
  uint64_t addr;      /* in the owner's address space */
  uint64_t alloc_off; /* of addr inside its allocation */
  uint64_t buffer_id; /* of that allocation */
  CUipcMemHandle handle;
  uint32_t has_handle, pad;
};

/* What each rank says of a call. */
struct card {
  uint64_t proc;
  uint32_t usable;  /* every buffer the call needs lies in a current registration and one allocation */
  uint32_t inplace; /* the call is in place (only the output is reached) */
  uint32_t vote;    /* second round: this rank mapped every new allocation */
  uint32_t pad;
  struct side in, out;
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

struct shunt_gpu_reg* shunt_gpu_reg_add(struct shunt_gpu_regs* rs, const struct shunt_cu* cu, void* base,
                                        size_t size) {
  struct shunt_gpu_reg* r = calloc(1, sizeof(*r));
  if (!r) return NULL;
  r->base = base;
  r->size = size;
  r->buffer_id = buffer_id(cu, base);
  pthread_mutex_lock(&rs->mu);
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
    free(r);
  }
  pthread_mutex_unlock(&rs->mu);
}

void shunt_gpu_regs_free(struct shunt_gpu_regs* rs, const struct shunt_cu* cu, CUcontext ctx) {
  if (!rs) return;
  /* Relaxed: frees must neither fail nor invalidate another thread's capture. */
  struct shunt_cu_guard g = shunt_cu_enter(cu, ctx, 1);
  while (rs->head) {
    struct shunt_gpu_reg* r = rs->head;
    rs->head = r->next;
    free(r);
  }
  while (rs->maps) {
    struct ipc_map* m = rs->maps;
    rs->maps = m->next;
    if (cu) shunt_gpu_peer_mem_close(cu, m->base);
    free(m);
  }
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
     * reading stale memory). */
    if (!r->warned)
      SHUNT_WARN(
          "rank %u: registered buffer %p was freed and allocated again without ncclCommDeregister; calls "
          "on it are staged",
          rank, (void*)r->base);
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
    }
  }
  if (r && r->alloc_size && (uintptr_t)c >= r->alloc_start &&
      (uintptr_t)c + bytes <= r->alloc_start + r->alloc_size) {
    s->addr = (uint64_t)(uintptr_t)c;
    s->alloc_off = (uint64_t)(uintptr_t)c - r->alloc_start;
    s->buffer_id = r->buffer_id;
    s->has_handle = r->has_handle;
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
    return -1;
  }
  struct ipc_map* m = calloc(1, sizeof(*m));
  if (!m) {
    snprintf(err, len, "out of memory");
    return -1;
  }
  CUresult e = shunt_gpu_peer_mem_open(cu, &s->handle, &m->base);
  if (e != CUDA_SUCCESS) {
    snprintf(err, len, "opening rank %u's registered buffer: %s", rank, shunt_cu_error(e));
    free(m);
    return -1;
  }
  m->rank = rank;
  m->buffer_id = s->buffer_id;
  m->next = rs->maps;
  rs->maps = m;
  return 0;
}

static void map_close(struct shunt_gpu_regs* rs, const struct shunt_cu* cu, uint32_t rank, uint64_t id) {
  for (struct ipc_map** pp = &rs->maps; *pp; pp = &(*pp)->next)
    if ((*pp)->rank == rank && (*pp)->buffer_id == id) {
      struct ipc_map* m = *pp;
      *pp = m->next;
      shunt_gpu_peer_mem_close(cu, m->base);
      free(m);
      return;
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

/* Maps every allocation of the cards that no round has judged yet, and agrees with every rank
 * whether all could: true when every allocation the call needs is mapped on every rank. */
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
  for (uint32_t q = 0; q < nranks && mine; q++)
    for (int k = 0; k < 2 && mine; k++) {
      const struct side* s = side_of(&cards[q], k);
      if (!s || q == rank || cards[q].proc == cards[rank].proc || known_find(rs, q, s->buffer_id)) continue;
      mine = map_open(rs, cu, q, s, why, sizeof(why)) == 0;
    }
  struct card vote = cards[rank];
  vote.vote = mine;
  if (shunt_gpu_agree_round(board, ++rs->rounds, &vote, sizeof(vote), cards, stop, arg, err, len) != 0)
    return -1;
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
        return -1;
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

static uint64_t peer_addr(struct shunt_gpu_regs* rs, uint32_t rank, const struct card* cards, uint32_t q,
                          const struct side* s) {
  if (q == rank || cards[q].proc == cards[rank].proc) return s->addr;
  struct ipc_map* m = map_find(rs, q, s->buffer_id);
  return m ? m->base + s->alloc_off : 0;
}

int shunt_gpu_reg_bind(struct shunt_gpu_regs* rs, const struct shunt_cu* cu, CUcontext ctx, CUstream stream,
                       struct shunt_gpu_agree* board, uint32_t rank, uint32_t nranks, const void* in,
                       uint64_t in_bytes, const void* out, uint64_t out_bytes, bool inplace,
                       bool (*stop)(void*), void* arg, struct shunt_gpu_zc* z, char* err, size_t len) {
  z->in = z->out = NULL;
  if (!board || !cu) return 0;
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
    return -1;
  }
  struct card me = {0};
  me.proc = shunt_process_token();
  me.inplace = inplace;
  /* Relaxed: the binding may come with a call that is being captured. */
  struct shunt_cu_guard g = shunt_cu_enter(cu, ctx, 1);
  me.usable = describe(rs, cu, rank, out, out_bytes, &me.out) &&
              (inplace || describe(rs, cu, rank, in, in_bytes, &me.in));
  int rc = shunt_gpu_agree_round(board, ++rs->rounds, &me, sizeof(me), cards, stop, arg, err, len);
  if (rc == 0) {
    bool all = true;
    for (uint32_t q = 0; q < nranks; q++) all = all && cards[q].usable && cards[q].inplace == me.inplace;
    bool ok = false;
    if (all) rc = judge(rs, cu, board, rank, nranks, cards, stop, arg, &ok, err, len);
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
  shunt_cu_leave(&g);
  free(cards);
  free(addrs);
  pthread_mutex_unlock(&rs->bind_mu);
  return rc;
}
