/* The check's inputs and expected results (see verify.h for the value sets). */
#include "verify.h"

#include <string.h>

#include "dtype.h"

/* 1 at (rank, index) for exactly min(i % 5, n) ranks of any index i. */
static int bit(int r, size_t i, int n) {
  return (i + (size_t)r) % (size_t)n < i % 5;
}
static int minmax_input(int r, size_t i) {
  return (int)((i + 2 * (size_t)r + i / 7) % 5);
}
static int gather_input(int r, size_t i) {
  return (int)((3 * (size_t)r + i) % 8);
}
/* Alltoall: element pos of the block rank `from` sends to rank `to`. */
static int a2a_input(int from, int to, size_t pos) {
  return (int)((3 * (size_t)from + 5 * (size_t)to + pos) % 8);
}
static int mulsum_scale(int r) {
  return 1 + (r & 1);
}

static int input(const struct perf_case* c, int r, size_t i) {
  if (c->coll == PERF_COLL_ALLGATHER || c->coll == PERF_COLL_BROADCAST) return gather_input(r, i);
  if (c->coll == PERF_COLL_ALLTOALL) return a2a_input(r, (int)(i / c->count), i % c->count);
  switch (c->op) {
    case ncclProd:
      return 1 + bit(r, i, c->nranks);
    case ncclMin:
    case ncclMax:
      return minmax_input(r, i);
    default:
      return bit(r, i, c->nranks);
  }
}

static void store(void* p, size_t i, size_t es, uint64_t bits) {
  memcpy((unsigned char*)p + i * es, &bits, es); /* little endian: the low bytes */
}

static uint64_t load(const void* p, size_t i, size_t es) {
  uint64_t v = 0;
  memcpy(&v, (const unsigned char*)p + i * es, es);
  return v;
}

size_t perf_in_count(const struct perf_case* c) {
  return c->coll == PERF_COLL_REDUCESCATTER || c->coll == PERF_COLL_ALLTOALL ? c->count * (size_t)c->nranks
                                                                             : c->count;
}

size_t perf_out_count(const struct perf_case* c) {
  return c->coll == PERF_COLL_ALLGATHER || c->coll == PERF_COLL_ALLTOALL ? c->count * (size_t)c->nranks
                                                                         : c->count;
}

int perf_reduces(int coll) {
  return coll == PERF_COLL_ALLREDUCE || coll == PERF_COLL_REDUCESCATTER || coll == PERF_COLL_REDUCE;
}

int perf_rooted(int coll) {
  return coll == PERF_COLL_BROADCAST || coll == PERF_COLL_REDUCE;
}

const char* perf_coll_name(int coll) {
  return coll == PERF_COLL_ALLGATHER       ? "allgather"
         : coll == PERF_COLL_REDUCESCATTER ? "reducescatter"
         : coll == PERF_COLL_BROADCAST     ? "broadcast"
         : coll == PERF_COLL_ALLTOALL      ? "alltoall"
         : coll == PERF_COLL_REDUCE        ? "reduce"
                                           : "allreduce";
}

void perf_fill_input(const struct perf_case* c, void* host) {
  size_t es = perf_dtype_size(c->type), n = perf_in_count(c);
  uint64_t table[17];
  for (int v = 0; v <= 16; v++) table[v] = perf_encode(c->type, v);
  for (size_t i = 0; i < n; i++) store(host, i, es, table[input(c, c->rank, i)]);
}

uint64_t perf_mulsum_scalar(const struct perf_case* c) {
  return perf_encode(c->type, mulsum_scale(c->rank));
}

/* The exact result at index i of an allreduce, as a real number. */
static double reduced(const struct perf_case* c, size_t i) {
  int n = c->nranks;
  size_t ones = i % 5 < (size_t)n ? i % 5 : (size_t)n;
  switch (c->op) {
    case ncclSum:
      return (double)ones;
    case ncclProd:
      return (double)(1u << ones);
    case ncclAvg:
      if (perf_dtype_is_float(c->type)) return (double)ones / n;
      return (double)(ones / (size_t)n); /* integer avg: the sum divided, truncated */
    case PERF_OP_MULSUM: {
      /* the ranks holding a one at i are (j - i) mod n for j < ones */
      double s = 0;
      for (size_t j = 0; j < ones; j++) s += mulsum_scale((int)((j + (size_t)n - i % (size_t)n) % (size_t)n));
      return s;
    }
    default: {
      /* 2r runs through every residue mod 5 within 5 ranks */
      int lo = 4, hi = 0;
      for (int r = 0; r < (n < 5 ? n : 5); r++) {
        int v = minmax_input(r, i);
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
      }
      return c->op == ncclMin ? lo : hi;
    }
  }
}

int64_t perf_count_wrong(const struct perf_case* c, const void* host) {
  size_t es = perf_dtype_size(c->type);
  int tolerant = perf_reduces(c->coll) && c->op == ncclAvg && perf_dtype_is_float(c->type);
  /* Reducescatter: rank r's output is the allreduce's slice r. */
  size_t at = c->coll == PERF_COLL_REDUCESCATTER ? (size_t)c->rank * c->count : 0;
  uint64_t table[17];
  for (int v = 0; v <= 16; v++) table[v] = perf_encode(c->type, v);
  int64_t wrong = 0;
  /* Reduce: the root's output is the allreduce's; the other ranks have none. */
  if (c->coll == PERF_COLL_REDUCE && c->rank != c->root) return 0;
  if (c->coll == PERF_COLL_BROADCAST) {
    for (size_t i = 0; i < c->count; i++) wrong += load(host, i, es) != table[gather_input(c->root, i)];
    return wrong;
  }
  if (c->coll == PERF_COLL_ALLGATHER) {
    for (int r = 0; r < c->nranks; r++)
      for (size_t i = 0; i < c->count; i++)
        wrong += load(host, (size_t)r * c->count + i, es) != table[gather_input(r, i)];
    return wrong;
  }
  if (c->coll == PERF_COLL_ALLTOALL) {
    /* Block j came from rank j: what j sent to this rank. */
    for (int r = 0; r < c->nranks; r++)
      for (size_t i = 0; i < c->count; i++)
        wrong += load(host, (size_t)r * c->count + i, es) != table[a2a_input(r, c->rank, i)];
    return wrong;
  }
  for (size_t i = 0; i < c->count; i++) {
    double v = reduced(c, at + i);
    uint64_t want = v == (int)v && v >= 0 && v <= 16 ? table[(int)v] : perf_encode(c->type, v);
    uint64_t got = load(host, i, es);
    if (got != want && !(tolerant && perf_ulp_distance(c->type, got, want) <= 2)) wrong++;
  }
  return wrong;
}
