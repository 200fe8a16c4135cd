// Protection domains and memory regions, and the key checks both ends of a write make.
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "fakeibv_internal.h"

static uint32_t g_key_base;
static uint32_t g_key_next;
static uint64_t g_mr_ids;
static pthread_once_t g_key_once = PTHREAD_ONCE_INIT;

static void key_init(void) {
  // A per-process random start, so a stale rkey from another process is unlikely to be valid.
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 20) ^ (uint64_t)(uintptr_t)&ts;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  g_key_base = (uint32_t)x;
}

static uint32_t new_key(void) {
  pthread_once(&g_key_once, key_init);
  for (;;) {
    // An odd stride walks all 2^32 values before repeating.
    uint32_t k = g_key_base + __atomic_fetch_add(&g_key_next, 1, __ATOMIC_RELAXED) * 0x9e3779b1u;
    if (k != 0) return k;
  }
}

FIB_EXPORT struct ibv_pd* ibv_alloc_pd(struct ibv_context* context) {
  if (!context) {
    errno = EINVAL;
    return NULL;
  }
  struct fib_context* ctx = fib_ctx(context);
  struct fib_pd* p = calloc(1, sizeof(*p));
  if (!p) {
    errno = ENOMEM;
    return NULL;
  }
  p->pd.context = context;
  pthread_mutex_lock(&ctx->lock);
  p->next = ctx->pds;
  ctx->pds = p;
  pthread_mutex_unlock(&ctx->lock);
  return &p->pd;
}

FIB_EXPORT int ibv_dealloc_pd(struct ibv_pd* pd) {
  if (!pd) return EINVAL;
  struct fib_context* ctx = fib_ctx(pd->context);
  struct fib_pd* p = FIB_CONTAINER(pd, struct fib_pd, pd);
  pthread_mutex_lock(&ctx->lock);
  if (p->refs > 0) {
    pthread_mutex_unlock(&ctx->lock);
    return EBUSY;
  }
  for (struct fib_pd** pp = &ctx->pds; *pp; pp = &(*pp)->next) {
    if (*pp == p) {
      *pp = p->next;
      break;
    }
  }
  pthread_mutex_unlock(&ctx->lock);
  free(p);
  return 0;
}

FIB_EXPORT struct ibv_mr* ibv_reg_mr(struct ibv_pd* pd, void* addr, size_t length, int access) {
  if (!pd || (!addr && length) || length > UINT64_MAX - (uintptr_t)addr) {
    errno = EINVAL;
    return NULL;
  }
  // Remote write without local write is refused by real devices too.
  if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(access & IBV_ACCESS_LOCAL_WRITE)) {
    errno = EINVAL;
    return NULL;
  }
  struct fib_context* ctx = fib_ctx(pd->context);
  struct fib_mr* m = calloc(1, sizeof(*m));
  if (!m) {
    errno = ENOMEM;
    return NULL;
  }
  m->mr.context = pd->context;
  m->mr.pd = pd;
  m->mr.addr = addr;
  m->mr.length = length;
  m->backing = addr;
  m->mr.lkey = m->mr.rkey = new_key();
  m->mr.handle = m->mr.lkey;
  m->pd = FIB_CONTAINER(pd, struct fib_pd, pd);
  m->access = access;
  m->id = __atomic_add_fetch(&g_mr_ids, 1, __ATOMIC_RELAXED);
  pthread_mutex_lock(&ctx->lock);
  m->pd->refs++;
  m->next = ctx->mrs;
  ctx->mrs = m;
  pthread_mutex_unlock(&ctx->lock);
  return &m->mr;
}

FIB_EXPORT struct ibv_mr* ibv_reg_mr_iova2(struct ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                                           unsigned int access) {
  // Remote addresses are virtual addresses here; an iova elsewhere would need a translation.
  if (iova != (uintptr_t)addr) {
    errno = EOPNOTSUPP;
    return NULL;
  }
  return ibv_reg_mr(pd, addr, length, (int)access);
}

// A dma-buf as a NIC sees it: the stand-in maps the file itself (the exporter's memory, e.g. a
// GPU allocation the CUDA stand-in keeps in a memfd), and remote addresses are the iova range.
FIB_EXPORT struct ibv_mr* ibv_reg_dmabuf_mr(struct ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova,
                                            int fd, int access) {
  long page = sysconf(_SC_PAGESIZE);
  if (!pd || fd < 0 || !length || offset % (uint64_t)page) {
    errno = EINVAL;
    return NULL;
  }
  void* p = mmap(NULL, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)offset);
  if (p == MAP_FAILED) return NULL;  // errno from mmap: EBADF, ENODEV, ...
  struct ibv_mr* mr = ibv_reg_mr(pd, (void*)(uintptr_t)iova, length, access);
  if (!mr) {
    int e = errno;
    munmap(p, length);
    errno = e;
    return NULL;
  }
  struct fib_mr* m = FIB_CONTAINER(mr, struct fib_mr, mr);
  m->backing = p;
  m->mapped = length;
  return mr;
}

FIB_EXPORT int ibv_dereg_mr(struct ibv_mr* mr) {
  if (!mr) return EINVAL;
  struct fib_context* ctx = fib_ctx(mr->context);
  struct fib_mr* m = FIB_CONTAINER(mr, struct fib_mr, mr);
  // Under the context lock: the service thread writes into regions only while holding it.
  pthread_mutex_lock(&ctx->lock);
  for (struct fib_mr** pp = &ctx->mrs; *pp; pp = &(*pp)->next) {
    if (*pp == m) {
      *pp = m->next;
      break;
    }
  }
  m->pd->refs--;
  pthread_mutex_unlock(&ctx->lock);
  if (m->mapped) munmap(m->backing, m->mapped);
  free(m);
  return 0;
}

static int covers(const struct fib_mr* m, uint64_t addr, uint64_t len) {
  uint64_t lo = (uintptr_t)m->mr.addr;
  return addr >= lo && len <= m->mr.length && addr - lo <= m->mr.length - len;
}

struct fib_mr* fib_mr_find_local(struct fib_context* ctx, uint32_t lkey, uint64_t addr, uint64_t len) {
  for (struct fib_mr* m = ctx->mrs; m; m = m->next) {
    if (m->mr.lkey == lkey && covers(m, addr, len)) return m;
  }
  return NULL;
}

struct fib_mr* fib_mr_find_remote(struct fib_context* ctx, struct fib_pd* pd, uint32_t rkey, uint64_t addr,
                                  uint64_t len) {
  for (struct fib_mr* m = ctx->mrs; m; m = m->next) {
    if (m->mr.rkey == rkey && m->pd == pd && (m->access & IBV_ACCESS_REMOTE_WRITE) && covers(m, addr, len))
      return m;
  }
  return NULL;
}

struct fib_mr* fib_mr_by_id(struct fib_context* ctx, uint64_t id) {
  for (struct fib_mr* m = ctx->mrs; m; m = m->next) {
    if (m->id == id) return m;
  }
  return NULL;
}

void fib_mr_free_all(struct fib_context* ctx) {
  while (ctx->mrs) {
    struct fib_mr* m = ctx->mrs;
    ctx->mrs = m->next;
    if (m->mapped) munmap(m->backing, m->mapped);
    free(m);
  }
}
