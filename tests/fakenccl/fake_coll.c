/* Collectives on host buffers through the communicator's segment: each rank copies a chunk
 * of its input into its own slot, all meet at the barrier, each reads what it needs from
 * every slot, and all meet again before the slots are reused. Reductions run in rank order,
 * floating types through double, integers in 64 bits wrapping as the type does.
 *
 * FAKE_NCCL_CORRUPT=1 makes rank 0 flip a high bit in one output element of every
 * collective, so that a checker's failure path can be tested; FAKE_NCCL_SLOW (below) makes
 * large collectives slow. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "fakenccl/fake_internal.h"

/* The CUDA driver stand-in, when the process has it, keeps device memory from the host: the
 * double computes on the host as NCCL's kernels would on the device, so it tells the stand-in
 * when it acts for the device. */
static pthread_once_t device_once = PTHREAD_ONCE_INIT;
static void (*device_begin)(void);
static void (*device_end)(void);
static void device_find(void) {
  *(void**)&device_begin = dlsym(RTLD_DEFAULT, "fakecuda_device_begin");
  *(void**)&device_end = dlsym(RTLD_DEFAULT, "fakecuda_device_end");
  if (!device_begin || !device_end) device_begin = device_end = NULL;
}
void fake_device_work(int begin) {
  pthread_once(&device_once, device_find);
  if (device_begin) (begin ? device_begin : device_end)();
}

/* Copies k elements from src[i0..] into dst, pre-multiplied when the op asks for it. */
static void stage(const struct fake_coll* a, const void* src, size_t i0, size_t k, void* dst) {
  ncclDataType_t t = a->dtype;
  size_t es = fake_dtype_size(t);
  if (!a->op.premul) {
    memcpy(dst, (const unsigned char*)src + i0 * es, k * es);
  } else if (fake_dtype_is_float(t)) {
    for (size_t j = 0; j < k; j++) fake_store_f(t, dst, j, fake_load_f(t, src, i0 + j) * a->op.scalar_f);
  } else {
    for (size_t j = 0; j < k; j++) fake_store_u(t, dst, j, fake_load_u(t, src, i0 + j) * a->op.scalar_u);
  }
}

static double combine_f(enum fake_combine op, double x, double y) {
  switch (op) {
    case FAKE_SUM:
      return x + y;
    case FAKE_PROD:
      return x * y;
    case FAKE_MIN:
      return y < x ? y : x;
    default:
      return y > x ? y : x;
  }
}

static uint64_t combine_u(enum fake_combine op, int is_signed, uint64_t x, uint64_t y) {
  int less = is_signed ? (int64_t)y < (int64_t)x : y < x;
  switch (op) {
    case FAKE_SUM:
      return x + y;
    case FAKE_PROD:
      return x * y;
    case FAKE_MIN:
      return less ? y : x;
    default:
      return less ? x : y;
  }
}

/* out[j] = slot0[j] op slot1[j] op ... for k elements at byte offset off of every slot. */
static void reduce_slots(struct ncclComm* c, const struct fake_coll* a, size_t off, size_t k, void* out) {
  ncclDataType_t t = a->dtype;
  int n = c->nranks;
  if (fake_dtype_is_float(t)) {
    for (size_t j = 0; j < k; j++) {
      double acc = fake_load_f(t, fake_slot(c, 0) + off, j);
      for (int r = 1; r < n; r++)
        acc = combine_f(a->op.combine, acc, fake_load_f(t, fake_slot(c, r) + off, j));
      fake_store_f(t, out, j, acc);
    }
    return;
  }
  int sgn = fake_dtype_is_signed(t);
  for (size_t j = 0; j < k; j++) {
    uint64_t acc = fake_load_u(t, fake_slot(c, 0) + off, j);
    for (int r = 1; r < n; r++)
      acc = combine_u(a->op.combine, sgn, acc, fake_load_u(t, fake_slot(c, r) + off, j));
    if (a->op.post_div) {
      fake_store_u(t, out, j, acc); /* wrap to the type first, then divide */
      acc = fake_load_u(t, out, j);
      acc = sgn ? (uint64_t)((int64_t)acc / n) : acc / (uint64_t)n;
    }
    fake_store_u(t, out, j, acc);
  }
}

static void maybe_corrupt(struct ncclComm* c, const struct fake_coll* a, size_t total) {
  const char* s = getenv("FAKE_NCCL_CORRUPT");
  if (c->rank != 0 || total == 0 || !s || atoi(s) == 0) return;
  size_t es = fake_dtype_size(a->dtype);
  unsigned char* top =
      (unsigned char*)a->recv + (total / 2) * es + es - 1; /* little endian: sign/exponent byte */
  *top ^= 0x40;
}

#define BARRIER()                                           \
  do {                                                      \
    ncclResult_t rc_ = fake_barrier_wait(&c->seg->barrier); \
    if (rc_ != ncclSuccess) return rc_;                     \
  } while (0)

static ncclResult_t coll_run(struct ncclComm* c, const struct fake_coll* a);

/* The calls FAKE_NCCL_SLOW applies to so far in this process, for FAKE_NCCL_SLOW_CYCLE: atomic,
 * since a process may drive several ranks from threads. */
static _Atomic unsigned long long slow_calls;

/* FAKE_NCCL_SLOW=BYTES:USEC: a collective of at least BYTES per rank's send buffer takes USEC
 * more, so that a test can make this NCCL slower than plans above a size and faster below. The
 * time is spent on the call's stream where the CUDA stand-in runs it (as a real NCCL's kernel
 * takes it: what events around the call measure), else on the calling thread. With
 * FAKE_NCCL_SLOW_RANK=R only rank R is slowed (one GPU behind the others); with
 * FAKE_NCCL_SLOW_CYCLE=N:M only the first M of every N such calls of the process are (a NCCL
 * whose time jumps between two values). */
static void slow_down(const struct ncclComm* c, const struct fake_coll* a) {
  const char* s = getenv("FAKE_NCCL_SLOW");
  const char* only = getenv("FAKE_NCCL_SLOW_RANK");
  const char* cycle = getenv("FAKE_NCCL_SLOW_CYCLE");
  unsigned long long bytes, us, every, first;
  if (!s || sscanf(s, "%llu:%llu", &bytes, &us) != 2) return;
  if (only && *only && atoi(only) != c->rank) return;
  if ((unsigned long long)a->count * fake_dtype_size(a->dtype) < bytes) return;
  unsigned long long k = slow_calls++;
  if (cycle && sscanf(cycle, "%llu:%llu", &every, &first) == 2 && every && k % every >= first) return;
  int (*delay)(void*, unsigned long) = NULL;
  *(void**)&delay = dlsym(RTLD_DEFAULT, "fakecuda_stream_delay");
  if (!delay || delay(a->stream, (unsigned long)us) != 0) usleep((useconds_t)us);
}

ncclResult_t fake_coll_run(struct ncclComm* c, const struct fake_coll* a) {
  fake_device_work(1);
  ncclResult_t rc = coll_run(c, a);
  fake_device_work(0);
  slow_down(c, a);
  /* FAKE_NCCL_FAIL_RANK=R: rank R's collectives report an internal error, their work done (the
   * other ranks' succeed): a failure one rank alone sees. */
  const char* f = getenv("FAKE_NCCL_FAIL_RANK");
  if (rc == ncclSuccess && f && atoi(f) == c->rank) rc = ncclInternalError;
  return rc;
}

static ncclResult_t coll_run(struct ncclComm* c, const struct fake_coll* a) {
  size_t es = fake_dtype_size(a->dtype), n = (size_t)c->nranks, me = (size_t)c->rank;
  unsigned char* recv = a->recv;
  unsigned char* mine = fake_slot(c, c->rank);
  size_t per = FAKE_SLOT_BYTES / es, total = a->count;
  switch (a->kind) {
    case FAKE_ALLREDUCE:
      for (size_t off = 0, k; off < a->count; off += k) {
        k = a->count - off < per ? a->count - off : per;
        stage(a, a->send, off, k, mine);
        BARRIER();
        reduce_slots(c, a, 0, k, recv + off * es);
        BARRIER();
      }
      break;
    case FAKE_ALLGATHER:
      total = a->count * n;
      for (size_t off = 0, k; off < a->count; off += k) {
        k = a->count - off < per ? a->count - off : per;
        memcpy(mine, (const unsigned char*)a->send + off * es, k * es);
        BARRIER();
        for (size_t r = 0; r < n; r++) memcpy(recv + (r * a->count + off) * es, fake_slot(c, (int)r), k * es);
        BARRIER();
      }
      break;
    case FAKE_REDUCE:
      /* Only the root has an output (the others' recvbuff may be NULL). */
      total = (int)me == a->root ? a->count : 0;
      for (size_t off = 0, k; off < a->count; off += k) {
        k = a->count - off < per ? a->count - off : per;
        stage(a, a->send, off, k, mine);
        BARRIER();
        if ((int)me == a->root) reduce_slots(c, a, 0, k, recv + off * es);
        BARRIER();
      }
      break;
    case FAKE_BROADCAST:
      for (size_t off = 0, k; off < a->count; off += k) {
        k = a->count - off < per ? a->count - off : per;
        if ((int)me == a->root) memcpy(mine, (const unsigned char*)a->send + off * es, k * es);
        BARRIER();
        memcpy(recv + off * es, fake_slot(c, a->root), k * es);
        BARRIER();
      }
      break;
    case FAKE_REDUCESCATTER:
      per /= n; /* each slot holds one piece per destination rank */
      for (size_t off = 0, k; off < a->count; off += k) {
        k = a->count - off < per ? a->count - off : per;
        for (size_t d = 0; d < n; d++) stage(a, a->send, d * a->count + off, k, mine + d * k * es);
        BARRIER();
        reduce_slots(c, a, me * k * es, k, recv + off * es);
        BARRIER();
      }
      break;
    case FAKE_ALLTOALL:
      /* Each slot holds one piece per destination; in place, a rank overwrites only pieces it
       * staged before the barrier. */
      total = a->count * n;
      per /= n;
      for (size_t off = 0, k; off < a->count; off += k) {
        k = a->count - off < per ? a->count - off : per;
        for (size_t d = 0; d < n; d++)
          memcpy(mine + d * k * es, (const unsigned char*)a->send + (d * a->count + off) * es, k * es);
        BARRIER();
        for (size_t r = 0; r < n; r++)
          memcpy(recv + (r * a->count + off) * es, fake_slot(c, (int)r) + me * k * es, k * es);
        BARRIER();
      }
      break;
  }
  maybe_corrupt(c, a, total);
  return ncclSuccess;
}
