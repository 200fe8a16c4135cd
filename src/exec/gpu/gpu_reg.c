/* Registered user buffers (gpu_reg.h). */
#include "exec/gpu/gpu_reg.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/cu.h"
#include "util/host.h"

#define DP(p) ((CUdeviceptr)(uintptr_t)(p))

/* A peer's allocation opened through CUDA IPC, shared by the registrations inside it. */
struct ipc_map {
  uint32_t rank;
  CUipcMemHandle handle;
  CUdeviceptr base;
  int refs;
  struct ipc_map* next;
};

/* What a registration holds besides its public part. */
struct reg_full {
  struct shunt_gpu_reg pub;
  struct ipc_map** maps; /* [nranks] the mapping each peer's range lies in (NULL: same process) */
  uint32_t nranks;
};

struct shunt_gpu_regs {
  pthread_mutex_t mu;
  struct shunt_gpu_reg* head;
  struct ipc_map* maps;
};

/* What each rank says of its registration at the exchange. */
struct reg_card {
  uint64_t proc;
  uint64_t base;   /* in the owner's address space */
  uint64_t offset; /* of base inside its allocation */
  uint32_t ok, has_handle;
  CUipcMemHandle handle;
};

struct shunt_gpu_regs* shunt_gpu_regs_new(void) {
  struct shunt_gpu_regs* rs = calloc(1, sizeof(*rs));
  if (rs) pthread_mutex_init(&rs->mu, NULL);
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
  struct reg_full* f = calloc(1, sizeof(*f));
  if (!f) return NULL;
  f->pub.base = base;
  f->pub.size = size;
  f->pub.buffer_id = buffer_id(cu, base);
  pthread_mutex_lock(&rs->mu);
  f->pub.next = rs->head;
  rs->head = &f->pub;
  pthread_mutex_unlock(&rs->mu);
  return &f->pub;
}

struct shunt_gpu_reg* shunt_gpu_reg_find(struct shunt_gpu_regs* rs, const void* p, uint64_t bytes) {
  const char* c = p;
  pthread_mutex_lock(&rs->mu);
  struct shunt_gpu_reg* r = rs->head;
  while (r && !(c >= r->base && c + bytes <= r->base + r->size)) r = r->next;
  pthread_mutex_unlock(&rs->mu);
  return r;
}

static void unmap(struct shunt_gpu_regs* rs, const struct shunt_cu* cu, struct ipc_map* m) {
  if (!m || --m->refs > 0) return;
  struct ipc_map** pp = &rs->maps;
  while (*pp && *pp != m) pp = &(*pp)->next;
  if (*pp) *pp = m->next;
  if (cu) cu->IpcCloseMemHandle(m->base);
  free(m);
}

/* Caller holds rs->mu. */
static void drop(struct shunt_gpu_regs* rs, const struct shunt_cu* cu, struct reg_full* f) {
  for (uint32_t r = 0; f->maps && r < f->nranks; r++) unmap(rs, cu, f->maps[r]);
  if (cu && f->pub.table) cu->MemFree(DP(f->pub.table));
  free(f->maps);
  free(f);
}

void shunt_gpu_reg_remove(struct shunt_gpu_regs* rs, const struct shunt_cu* cu, CUcontext ctx,
                          struct shunt_gpu_reg* r) {
  /* Relaxed: frees must neither fail nor invalidate another thread's capture. */
  struct shunt_cu_guard g = shunt_cu_enter(cu, ctx, 1);
  pthread_mutex_lock(&rs->mu);
  struct shunt_gpu_reg** pp = &rs->head;
  while (*pp && *pp != r) pp = &(*pp)->next;
  if (*pp) {
    *pp = r->next;
    drop(rs, cu, (struct reg_full*)r);
  }
  pthread_mutex_unlock(&rs->mu);
  shunt_cu_leave(&g);
}

void shunt_gpu_regs_free(struct shunt_gpu_regs* rs, const struct shunt_cu* cu, CUcontext ctx) {
  if (!rs) return;
  struct shunt_cu_guard g = shunt_cu_enter(cu, ctx, 1);
  pthread_mutex_lock(&rs->mu);
  while (rs->head) {
    struct shunt_gpu_reg* r = rs->head;
    rs->head = r->next;
    drop(rs, cu, (struct reg_full*)r);
  }
  pthread_mutex_unlock(&rs->mu);
  shunt_cu_leave(&g);
  pthread_mutex_destroy(&rs->mu);
  free(rs);
}

/* The mapping of rank's allocation `h`, opened once. Caller holds rs->mu. */
static struct ipc_map* open_map(struct shunt_gpu_regs* rs, const struct shunt_cu* cu, uint32_t rank,
                                const CUipcMemHandle* h, char* err, size_t len) {
  for (struct ipc_map* m = rs->maps; m; m = m->next)
    if (m->rank == rank && !memcmp(&m->handle, h, sizeof(*h))) {
      m->refs++;
      return m;
    }
  struct ipc_map* m = calloc(1, sizeof(*m));
  if (!m) {
    snprintf(err, len, "out of memory");
    return NULL;
  }
  CUresult e = cu->IpcOpenMemHandle(&m->base, *h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
  if (e != CUDA_SUCCESS) {
    snprintf(err, len, "cuIpcOpenMemHandle for rank %u's registered buffer: %s", rank, shunt_cu_error(e));
    free(m);
    return NULL;
  }
  m->rank = rank;
  m->handle = *h;
  m->refs = 1;
  m->next = rs->maps;
  rs->maps = m;
  return m;
}

int shunt_gpu_reg_exchange(struct shunt_gpu_regs* rs, const struct shunt_cu* cu, CUcontext ctx,
                           CUstream stream, struct shunt_gpu_reg* r, uint32_t rank, uint32_t nranks,
                           const struct shunt_world_exchange* ex, char* err, size_t len) {
  struct reg_full* f = (struct reg_full*)r;
  struct reg_card* all = calloc(nranks, sizeof(*all));
  uint64_t* table = calloc(nranks, sizeof(*table));
  uint8_t* votes = calloc(nranks, 1);
  if (!all || !votes) {
    /* Without room for the exchange this rank cannot take part: its peers' exchange fails. */
    free(all);
    free(table);
    free(votes);
    snprintf(err, len, "out of memory for the registration exchange");
    r->state = -1;
    return -1;
  }
  f->maps = f->maps ? f->maps : calloc(nranks, sizeof(*f->maps));
  f->nranks = nranks;
  /* Relaxed: the exchange may come with a call that is being captured. */
  struct shunt_cu_guard g = shunt_cu_enter(cu, ctx, 1);
  int ok = all && table && f->maps && cu;
  if (!ok) snprintf(err, len, "out of memory");
  if (ok) {
    struct reg_card* me = &all[rank];
    me->proc = shunt_process_token();
    me->base = (uint64_t)(uintptr_t)r->base;
    CUdeviceptr start = 0;
    if (cu->PointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, DP(r->base)) == CUDA_SUCCESS) {
      me->offset = (uint64_t)(uintptr_t)r->base - start;
      me->has_handle = cu->IpcGetMemHandle(&me->handle, start) == CUDA_SUCCESS;
    }
    me->ok = 1;
  }
  /* Every rank takes part in both exchanges whatever failed locally. */
  if (ex->allgather(ex->ctx, all, sizeof(struct reg_card)) != 0 && ok) {
    snprintf(err, len, "exchanging registrations failed");
    ok = 0;
  }
  pthread_mutex_lock(&rs->mu);
  for (uint32_t q = 0; q < nranks && ok; q++) {
    const struct reg_card* c = &all[q];
    if (!c->ok) {
      snprintf(err, len, "rank %u could not describe its registered buffer", q);
      ok = 0;
    } else if (q == rank || c->proc == all[rank].proc) {
      table[q] = c->base;
    } else if (!c->has_handle) {
      snprintf(err, len, "rank %u's registered buffer cannot be exported through CUDA IPC", q);
      ok = 0;
    } else if ((f->maps[q] = open_map(rs, cu, q, &c->handle, err, len)) != NULL) {
      table[q] = f->maps[q]->base + c->offset;
    } else {
      ok = 0;
    }
  }
  if (ok) {
    CUdeviceptr d = 0;
    CUresult e = cu->MemAlloc(&d, (size_t)nranks * sizeof(uint64_t));
    /* On the world's stream: a synchronous copy goes on the legacy stream, which waits for all
     * of the application's default-stream work and joins a blocking stream's capture. */
    if (e == CUDA_SUCCESS) e = cu->MemcpyHtoDAsync(d, table, (size_t)nranks * sizeof(uint64_t), stream);
    if (e == CUDA_SUCCESS) e = cu->StreamSynchronize(stream);
    if (e != CUDA_SUCCESS) {
      if (d) cu->MemFree(d);
      snprintf(err, len, "the registration table: %s", shunt_cu_error(e));
      ok = 0;
    } else {
      r->table = (const uint64_t*)(uintptr_t)d;
    }
  }
  if (!ok && f->maps)
    for (uint32_t q = 0; q < nranks; q++) unmap(rs, cu, f->maps[q]), f->maps[q] = NULL;
  pthread_mutex_unlock(&rs->mu);
  shunt_cu_leave(&g);
  /* All or none: a rank that could not map makes every rank stage. */
  votes[rank] = (uint8_t)ok;
  int all_ok = ex->allgather(ex->ctx, votes, 1) == 0;
  for (uint32_t q = 0; q < nranks && all_ok; q++) all_ok = votes[q] != 0;
  free(votes);
  free(all);
  free(table);
  if (ok && !all_ok) snprintf(err, len, "another rank could not map the registered buffers");
  r->state = all_ok ? 1 : -1;
  return all_ok ? 0 : -1;
}
