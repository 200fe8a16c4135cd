/* The NCCL test double computes: opened directly (no shunt in between), N ranks as
 * processes or threads, or one thread driving N communicators inside groups, run every
 * collective the double computes and compare each output element with the exact answer.
 *
 * Usage: test_fake_compute procs|threads|group|corrupt N */
#include <dlfcn.h>
#include <nccl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/check.h"
#include "fakenccl/fake_nccl.h"

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

static struct {
  __typeof__(ncclGetUniqueId)* GetUniqueId;
  __typeof__(ncclCommInitRank)* CommInitRank;
  __typeof__(ncclCommCount)* CommCount;
  __typeof__(ncclCommUserRank)* CommUserRank;
  __typeof__(ncclAllReduce)* AllReduce;
  __typeof__(ncclAllGather)* AllGather;
  __typeof__(ncclBroadcast)* Broadcast;
  __typeof__(ncclReduceScatter)* ReduceScatter;
  __typeof__(ncclGroupStart)* GroupStart;
  __typeof__(ncclGroupEnd)* GroupEnd;
  __typeof__(ncclCommSplit)* CommSplit;
  __typeof__(ncclCommDestroy)* CommDestroy;
  __typeof__(ncclRedOpCreatePreMulSum)* RedOpCreatePreMulSum;
  __typeof__(ncclRedOpDestroy)* RedOpDestroy;
  fake_set_result_fn set_result;
} nc;

static void load(void) {
  void* h = dlopen(FAKE_NCCL_PATH, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "cannot open the double: %s\n", dlerror());
    exit(1);
  }
#define SYM(f) CHECK((*(void**)& nc.f = dlsym(h, "nccl" #f)) != NULL)
  SYM(GetUniqueId);
  SYM(CommInitRank);
  SYM(CommCount);
  SYM(CommUserRank);
  SYM(AllReduce);
  SYM(AllGather);
  SYM(Broadcast);
  SYM(ReduceScatter);
  SYM(GroupStart);
  SYM(GroupEnd);
  SYM(CommSplit);
  SYM(CommDestroy);
  SYM(RedOpCreatePreMulSum);
  SYM(RedOpDestroy);
  CHECK((*(void**)& nc.set_result = dlsym(h, "fake_set_result")) != NULL);
  if (check_failures) exit(1);
}

static const ncclDataType_t types[] = {ncclInt8,    ncclUint8,    ncclInt32,      ncclUint32,
                                       ncclInt64,   ncclUint64,   ncclFloat16,    ncclFloat32,
                                       ncclFloat64, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2};
static size_t esize(ncclDataType_t t) {
  static const size_t s[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  return s[t];
}

/* A small non-negative integer v in a binary floating format; every v used here fits. */
static uint32_t small_float(long v, int ebits, int mbits) {
  if (v == 0) return 0;
  int e = 63 - __builtin_clzll((unsigned long long)v);
  uint32_t rest = (uint32_t)(v - (1L << e)); /* exact: the values used have no bits below the mantissa */
  uint32_t mant = e <= mbits ? rest << (mbits - e) : rest >> (e - mbits);
  return ((uint32_t)(e + (1 << (ebits - 1)) - 1) << mbits) | mant;
}

static void put(ncclDataType_t t, void* buf, size_t i, long v) {
  unsigned char* b = (unsigned char*)buf + i * esize(t);
  uint64_t bits = (uint64_t)v;
  float f = (float)v;
  double d = (double)v;
  switch (t) {
    case ncclFloat16:
      bits = small_float(v, 5, 10);
      break;
    case ncclBfloat16:
      bits = small_float(v, 8, 7);
      break;
    case ncclFloat8e4m3:
      bits = small_float(v, 4, 3);
      break;
    case ncclFloat8e5m2:
      bits = small_float(v, 5, 2);
      break;
    case ncclFloat32:
      memcpy(&bits, &f, 4);
      break;
    case ncclFloat64:
      memcpy(&bits, &d, 8);
      break;
    default:
      break;
  }
  memcpy(b, &bits, esize(t)); /* little endian */
}

/* Counts elements of got that differ from the expected values (encoded in the same type). */
static size_t wrong(ncclDataType_t t, const void* got, size_t n, long (*want)(size_t, void*), void* ctx) {
  unsigned char e[8];
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) {
    put(t, e, 0, want(i, ctx));
    if (memcmp(e, (const unsigned char*)got + i * esize(t), esize(t)) != 0) bad++;
  }
  return bad;
}

struct ctx {
  int rank, n, op, root;
  size_t count;
};

/* Inputs per op, chosen so that every result is a small exact integer in every type. */
static long input(int op, int r, size_t i) {
  switch (op) {
    case ncclSum:
      return (long)((i + (size_t)r) % 3);
    case ncclProd:
      return 1 + (long)((i + (size_t)r) % 2);
    case ncclAvg:
      return (long)(i % 4); /* the same on every rank: the average is exact */
    default:
      return (long)((i * 3 + (size_t)r) % 5);
  }
}
static long premul_scalar(int r) {
  return 1 + r % 2;
}

static long want_reduce(size_t i, void* p) {
  struct ctx* c = p;
  long acc = input(c->op, 0, i);
  if (c->op >= ncclNumOps) acc = (long)((i + 0) % 2) * premul_scalar(0);
  for (int r = 1; r < c->n; r++) {
    long x = input(c->op, r, i);
    switch (c->op) {
      case ncclSum:
        acc += x;
        break;
      case ncclProd:
        acc *= x;
        break;
      case ncclMax:
        acc = x > acc ? x : acc;
        break;
      case ncclMin:
        acc = x < acc ? x : acc;
        break;
      case ncclAvg:
        break;
      default:
        acc += (long)((i + (size_t)r) % 2) * premul_scalar(r);
        break;
    }
  }
  return acc;
}
static long want_gather(size_t i, void* p) {
  struct ctx* c = p;
  return (long)(((i / c->count) * 5 + i % c->count) % 8);
}
static long want_bcast(size_t i, void* p) {
  (void)p;
  return (long)((i * 7) % 8);
}
static long want_rs(size_t i, void* p) {
  struct ctx* c = p;
  long acc = 0;
  for (int r = 0; r < c->n; r++) acc += (long)(((size_t)c->rank * c->count + i + (size_t)r) % 3);
  return acc;
}

#define OK(call) CHECK_EQ_INT((call), ncclSuccess)

/* Every dtype and op, out of place and in place; count crosses the double's chunk size for
 * float so that its chunking is exercised. */
static void allreduce_all(ncclComm_t comm, int rank, int n) {
  for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
    ncclDataType_t t = types[ti];
    size_t count = t == ncclFloat32 ? 300001 : 1031;
    unsigned char* send = malloc(count * esize(t));
    unsigned char* recv = malloc(count * esize(t));
    int ops[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg, ncclNumOps /* PreMulSum */};
    for (size_t oi = 0; oi < sizeof(ops) / sizeof(ops[0]); oi++) {
      for (int inplace = 0; inplace < 2; inplace++) {
        struct ctx c = {rank, n, ops[oi], 0, count};
        unsigned char* in = inplace ? recv : send;
        ncclRedOp_t op = (ncclRedOp_t)ops[oi];
        for (size_t i = 0; i < count; i++)
          put(t, in, i, op == ncclNumOps ? (long)((i + (size_t)rank) % 2) : input(op, rank, i));
        if (ops[oi] == ncclNumOps) {
          unsigned char s[8];
          put(t, s, 0, premul_scalar(rank));
          OK(nc.RedOpCreatePreMulSum(&op, s, t, ncclScalarHostImmediate, comm));
          c.op = op;
        }
        OK(nc.AllReduce(in, recv, count, t, op, comm, NULL));
        if (ops[oi] == ncclNumOps) OK(nc.RedOpDestroy(op, comm));
        size_t bad = wrong(t, recv, count, want_reduce, &c);
        CHECK_MSG(bad == 0, "rank %d allreduce type %d op %d inplace %d: %zu wrong", rank, t, ops[oi],
                  inplace, bad);
      }
    }
    free(send);
    free(recv);
  }
}

static void others(ncclComm_t comm, int rank, int n) {
  for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
    ncclDataType_t t = types[ti];
    size_t count = 517, es = esize(t);
    unsigned char* send = malloc(count * n * es);
    unsigned char* recv = malloc(count * n * es);
    struct ctx c = {rank, n, 0, n - 1, count};
    for (int inplace = 0; inplace < 2; inplace++) {
      unsigned char* in = inplace ? recv + (size_t)rank * count * es : send;
      for (size_t i = 0; i < count; i++) put(t, in, i, (long)((rank * 5 + (long)i) % 8));
      OK(nc.AllGather(in, recv, count, t, comm, NULL));
      CHECK_MSG(wrong(t, recv, count * n, want_gather, &c) == 0, "rank %d allgather type %d inplace %d", rank,
                t, inplace);
    }
    memset(recv, 0, count * es);
    if (rank == n - 1)
      for (size_t i = 0; i < count; i++) put(t, send, i, (long)((i * 7) % 8));
    OK(nc.Broadcast(send, recv, count, t, n - 1, comm, NULL));
    CHECK_MSG(wrong(t, recv, count, want_bcast, &c) == 0, "rank %d broadcast type %d", rank, t);
    for (size_t i = 0; i < count * n; i++) put(t, send, i, (long)((i + (size_t)rank) % 3));
    OK(nc.ReduceScatter(send, recv, count, t, ncclSum, comm, NULL));
    CHECK_MSG(wrong(t, recv, count, want_rs, &c) == 0, "rank %d reducescatter type %d", rank, t);
    free(send);
    free(recv);
  }
}

/* Even and odd ranks form two communicators, ordered by descending parent rank. */
static void split(ncclComm_t comm, int rank, int n) {
  ncclComm_t sub = NULL;
  OK(nc.CommSplit(comm, rank % 2, -rank, &sub, NULL));
  if (!sub) return;
  int sn = 0, sr = -1;
  OK(nc.CommCount(sub, &sn));
  OK(nc.CommUserRank(sub, &sr));
  int members = (n + 1 - rank % 2) / 2;
  CHECK_EQ_INT(sn, members);
  CHECK_EQ_INT(sr, members - 1 - rank / 2);
  int64_t mine = rank, sum = -1;
  OK(nc.AllReduce(&mine, &sum, 1, ncclInt64, ncclSum, sub, NULL));
  int64_t want = 0;
  for (int r = rank % 2; r < n; r += 2) want += r;
  CHECK_EQ_INT(sum, want);
  OK(nc.CommDestroy(sub));
}

static int rank_main(int rank, int n, ncclUniqueId id) {
  ncclComm_t comm = NULL;
  OK(nc.CommInitRank(&comm, n, id, rank));
  if (!comm) return 1;
  int got = -1;
  OK(nc.CommCount(comm, &got));
  CHECK_EQ_INT(got, n);
  OK(nc.CommUserRank(comm, &got));
  CHECK_EQ_INT(got, rank);
  allreduce_all(comm, rank, n);
  others(comm, rank, n);
  split(comm, rank, n);
  OK(nc.CommDestroy(comm));
  return check_failures;
}

struct thread_arg {
  int rank, n, failures;
  ncclUniqueId id;
};
static void* thread_main(void* p) {
  struct thread_arg* a = p;
  a->failures = rank_main(a->rank, a->n, a->id);
  return NULL;
}

static ncclUniqueId make_id(void) {
  ncclUniqueId id;
  memset(&id, 0xab, sizeof(id));
  OK(nc.GetUniqueId(&id));
  int tail_kept = 1, head_changed = 0;
  for (int i = 40; i < NCCL_UNIQUE_ID_BYTES; i++) tail_kept &= (unsigned char)id.internal[i] == 0xab;
  for (int i = 0; i < 40; i++) head_changed |= (unsigned char)id.internal[i] != 0xab;
  CHECK_MSG(tail_kept && head_changed, "ncclGetUniqueId must fill bytes 0..39 and keep 40..127");
  return id;
}

/* One thread drives every rank: inits and collectives inside groups, a PreMulSum handle
 * destroyed before the group ends, as nccl-tests does with -g N. */
static void group_mode(int n) {
  ncclUniqueId id = make_id();
  ncclComm_t comms[64] = {0};
  OK(nc.GroupStart());
  for (int r = 0; r < n; r++) OK(nc.CommInitRank(&comms[r], n, id, r));
  OK(nc.GroupEnd());
  float send[64][100], recv[64][100];
  OK(nc.GroupStart());
  OK(nc.GroupStart()); /* nested: only the outermost end runs the work */
  for (int r = 0; r < n; r++) {
    for (int i = 0; i < 100; i++) send[r][i] = (float)((i + r) % 2);
    float s = (float)premul_scalar(r);
    ncclRedOp_t op;
    OK(nc.RedOpCreatePreMulSum(&op, &s, ncclFloat32, ncclScalarHostImmediate, comms[r]));
    OK(nc.AllReduce(send[r], recv[r], 100, ncclFloat32, op, comms[r], NULL));
    OK(nc.RedOpDestroy(op, comms[r]));
  }
  OK(nc.GroupEnd());
  OK(nc.GroupEnd());
  for (int r = 0; r < n; r++) {
    struct ctx c = {r, n, ncclNumOps, 0, 100};
    CHECK_MSG(wrong(ncclFloat32, recv[r], 100, want_reduce, &c) == 0, "group allreduce rank %d", r);
  }
  for (int r = 0; r < n; r++) OK(nc.CommDestroy(comms[r]));
}

/* FAKE_NCCL_CORRUPT: rank 0's result has one wrong element; a scripted error skips the work. */
static void corrupt_mode(int n) {
  setenv("FAKE_NCCL_CORRUPT", "1", 1);
  ncclUniqueId id = make_id();
  pid_t kids[64];
  for (int r = 0; r < n; r++) {
    kids[r] = fork();
    if (kids[r] != 0) continue;
    ncclComm_t comm;
    OK(nc.CommInitRank(&comm, n, id, r));
    int32_t send[64], recv[64];
    for (int i = 0; i < 64; i++) send[i] = 1, recv[i] = -7;
    OK(nc.AllReduce(send, recv, 64, ncclInt32, ncclSum, comm, NULL));
    int bad = 0;
    for (int i = 0; i < 64; i++) bad += recv[i] != n;
    CHECK_EQ_INT(bad, r == 0 ? 1 : 0);
    nc.set_result(ncclInternalError);
    for (int i = 0; i < 64; i++) recv[i] = -7;
    CHECK_EQ_INT(nc.AllReduce(send, recv, 64, ncclInt32, ncclSum, comm, NULL), ncclInternalError);
    CHECK_EQ_INT(recv[0], -7);
    nc.set_result(ncclSuccess);
    OK(nc.CommDestroy(comm));
    _exit(check_failures ? 1 : 0);
  }
  for (int r = 0; r < n; r++) {
    int st = 0;
    waitpid(kids[r], &st, 0);
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank %d failed", r);
  }
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "procs";
  int n = argc > 2 ? atoi(argv[2]) : 2;
  if (n < 1 || n > 64) return 2;
  load();
  if (!strcmp(mode, "group")) {
    group_mode(n);
  } else if (!strcmp(mode, "corrupt")) {
    corrupt_mode(n);
  } else if (!strcmp(mode, "threads")) {
    struct thread_arg a[64];
    pthread_t th[64];
    ncclUniqueId id = make_id();
    for (int r = 0; r < n; r++) {
      a[r] = (struct thread_arg){r, n, 0, id};
      pthread_create(&th[r], NULL, thread_main, &a[r]);
    }
    for (int r = 0; r < n; r++) {
      pthread_join(th[r], NULL);
      CHECK_MSG(a[r].failures == 0, "rank %d failed", r);
    }
  } else {
    ncclUniqueId id = make_id();
    pid_t kids[64];
    for (int r = 0; r < n; r++) {
      kids[r] = fork();
      if (kids[r] == 0) _exit(rank_main(r, n, id) ? 1 : 0);
    }
    for (int r = 0; r < n; r++) {
      int st = 0;
      waitpid(kids[r], &st, 0);
      CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank %d failed", r);
    }
  }
  CHECK_DONE();
}
