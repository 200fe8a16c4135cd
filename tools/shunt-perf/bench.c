/* The timed loop and the check, per row, in the order nccl-tests uses: warm-up, out of
 * place timed, in place timed, then the check of each. */
#include "bench.h"

#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "device.h"
#include "dtype.h"
#include "report.h"
#include "shunt/shunt.h"
#include "verify.h"

#define NCCL_OK(call)                                                                                       \
  do {                                                                                                      \
    ncclResult_t rc_ = (call);                                                                              \
    if (rc_ != ncclSuccess) {                                                                               \
      fprintf(stderr, "shunt-perf: rank %d: %s failed: %s (%s)\n", r->rank, #call, ncclGetErrorString(rc_), \
              ncclGetLastError(r->comm));                                                                   \
      return -1;                                                                                            \
    }                                                                                                       \
  } while (0)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* What served the last call: looked up at run time so that shunt-perf also runs against
 * an NCCL that is not shunt ("-"). A communicator shunt does not know sends everything to
 * NCCL. */
static const char* last_plan(ncclComm_t comm) {
  static __typeof__(&shuntLastPlan) fn;
  static int looked;
  if (!looked) {
    *(void**)&fn = dlsym(RTLD_DEFAULT, "shuntLastPlan");
    looked = 1;
  }
  const char* name = NULL;
  if (!fn) return "-";
  if (fn(comm, &name) != 0 || !name) return "nccl";
  return name;
}

static int call(struct perf_rank* r, const struct perf_case* c, const void* send, void* recv) {
  cudaStream_t s = perf_dev_stream();
  if (c->coll == PERF_COLL_ALLGATHER) {
    NCCL_OK(ncclAllGather(send, recv, c->count, c->type, r->comm, s));
    return 0;
  }
  if (c->op != PERF_OP_MULSUM) {
    NCCL_OK(ncclAllReduce(send, recv, c->count, c->type, (ncclRedOp_t)c->op, r->comm, s));
    return 0;
  }
  /* as nccl-tests: a PreMulSum created for the call and destroyed right after it */
  uint64_t scalar = perf_mulsum_scalar(c);
  ncclRedOp_t op;
  NCCL_OK(ncclRedOpCreatePreMulSum(&op, &scalar, c->type, ncclScalarHostImmediate, r->comm));
  NCCL_OK(ncclAllReduce(send, recv, c->count, c->type, op, r->comm, s));
  NCCL_OK(ncclRedOpDestroy(op, r->comm));
  return 0;
}

/* Every rank starts timing together. Through the side channel, not a collective: a size
 * that no plan serves would fail on a communicator without NCCL behind it. */
static int sync_ranks(struct perf_rank* r) {
  if (perf_dev_sync() != 0) return -1;
  return perf_chan_barrier(r->chan, r->rank);
}

/* As nccl-tests' -G: the iterations captured into one graph, launched `graph` times; the time
 * per call is over the launches only. */
static int timed_graph(struct perf_rank* r, const struct perf_case* c, const void* send, void* recv, double* us) {
  void* exec = NULL;
  if (perf_dev_sync() != 0 || perf_dev_graph_begin() != 0) return -1;
  int bad = 0;
  for (int it = 0; it < r->o->iters && !bad; it++) bad = call(r, c, send, recv) != 0;
  if (perf_dev_graph_end(&exec) != 0 || bad) {
    fprintf(stderr, "shunt-perf: rank %d: capturing %d calls into a graph failed\n", r->rank, r->o->iters);
    perf_dev_graph_free(exec);
    return -1;
  }
  int rc = sync_ranks(r);
  double t0 = now_s();
  for (int g = 0; g < r->o->graph && rc == 0; g++) rc = perf_dev_graph_launch(exec);
  if (rc == 0) rc = perf_dev_sync();
  *us = (now_s() - t0) * 1e6 / ((double)r->o->iters * r->o->graph);
  perf_dev_graph_free(exec);
  return rc;
}

struct half_local {
  double us;
  int64_t wrong;
};

static int timed_half(struct perf_rank* r, const struct perf_case* c, int inplace, struct half_local* h,
                      char* plan, size_t plan_len) {
  size_t es = perf_dtype_size(c->type);
  unsigned char* recv = r->recv;
  const void* send = !inplace                         ? r->send
                     : c->coll == PERF_COLL_ALLGATHER ? recv + (size_t)c->rank * c->count * es
                                                      : recv;
  if (r->o->graph > 0 && perf_dev_graphs_supported()) {
    if (timed_graph(r, c, send, recv, &h->us) != 0) return -1;
  } else {
    if (sync_ranks(r) != 0) return -1;
    double t0 = now_s();
    for (int it = 0; it < r->o->iters; it++) {
      if (call(r, c, send, recv) != 0) return -1;
      if (r->o->blocking && perf_dev_sync() != 0) return -1;
      if (r->o->blocking == 1 && perf_chan_barrier(r->chan, r->rank) != 0) return -1;
    }
    if (perf_dev_sync() != 0) return -1;
    h->us = (now_s() - t0) * 1e6 / r->o->iters;
  }
  if (r->o->blocking == 3 && perf_chan_barrier(r->chan, r->rank) != 0) return -1;
  snprintf(plan, plan_len, "%s", last_plan(r->comm));
  h->wrong = -1;
  if (!r->o->check) return 0;
  size_t out = c->coll == PERF_COLL_ALLGATHER ? c->count * (size_t)c->nranks : c->count;
  h->wrong = 0;
  for (int round = 0; round < r->o->check && h->wrong == 0; round++) {
    perf_fill_input(c, r->host);
    perf_dev_upload((void*)send, r->host, c->count * es);
    if (call(r, c, send, recv) != 0 || perf_dev_sync() != 0) return -1;
    perf_dev_download(r->host, recv, out * es);
    h->wrong = perf_count_wrong(c, r->host);
  }
  r->my_wrong += h->wrong;
  return 0;
}

static void progress(struct perf_rank* r, const struct perf_case* c, int k, int nsizes, size_t bytes) {
  double t = now_s();
  if (r->rank != 0 || t < r->next_progress) return;
  fprintf(stderr, "shunt-perf: %s %s %s: size %d of %d (%zu B)\n",
          c->coll == PERF_COLL_ALLGATHER ? "allgather" : "allreduce", perf_dtype_name(c->type),
          c->coll == PERF_COLL_ALLGATHER ? "none" : perf_op_name(c->op), k + 1, nsizes, bytes);
  r->next_progress = t + 5;
}

static size_t next_size(const struct perf_opts* o, size_t s) {
  size_t n = o->step_factor > 1 ? (size_t)((double)s * o->step_factor) : s + o->step_bytes;
  return n > s ? n : s + 1;
}

/* One row: counts as nccl-tests computes them (allgather: per-rank count rounded down to
 * 16 bytes), the two timed halves, the check, and the exchange of results with all ranks. */
static int row(struct perf_rank* r, struct perf_case* c, size_t size, double* bw_sum, int* bw_n,
               int64_t* table_wrong) {
  size_t es = perf_dtype_size(c->type), count = size / es, n = (size_t)r->nranks;
  size_t bytes = count * es, shown = count;
  double factor = n > 1 ? 2.0 * (double)(n - 1) / (double)n : 0;
  if (c->coll == PERF_COLL_ALLGATHER) {
    /* nccl-tests rounds each rank's part to 16 bytes; --random keeps every count exact. */
    count = r->o->random_sizes ? (count / n ? count / n : 1) : (count / n) & ~(16 / es - 1);
    shown = count * n;
    bytes = shown * es;
    factor = (double)(n - 1) / (double)n;
  }
  c->count = count;
  for (int w = 0; w < r->o->warmup; w++)
    if (call(r, c, r->send, r->recv) != 0) return -1;
  struct half_local mine[2];
  char plans[2][48];
  for (int ip = 0; ip < 2; ip++)
    if (timed_half(r, c, ip, &mine[ip], plans[ip], sizeof(plans[ip])) != 0) return -1;
  struct half_local all[2 * 64], *every = all;
  if (r->nranks > 64 && !(every = malloc(sizeof(mine) * n))) return -1;
  int rc = perf_chan_allgather(r->chan, r->rank, mine, sizeof(mine), every);
  if (rc == 0 && r->rank == 0) {
    struct perf_half h[2];
    for (int ip = 0; ip < 2; ip++) {
      h[ip] = (struct perf_half){0, 0, 0, every[ip].wrong};
      for (size_t k = 0; k < n; k++) {
        h[ip].us += every[2 * k + ip].us / (double)n;
        if (every[2 * k + ip].wrong > h[ip].wrong) h[ip].wrong = every[2 * k + ip].wrong;
      }
      h[ip].algbw = h[ip].us > 0 ? (double)bytes / (h[ip].us * 1e3) : 0;
      h[ip].busbw = h[ip].algbw * factor;
      *bw_sum += h[ip].busbw;
      ++*bw_n;
      if (h[ip].wrong > *table_wrong) *table_wrong = h[ip].wrong;
    }
    char plan[100];
    if (strcmp(plans[0], plans[1]) != 0)
      snprintf(plan, sizeof(plan), "%s|%s", plans[0], plans[1]);
    else
      snprintf(plan, sizeof(plan), "%s", plans[0]);
    perf_print_row(bytes, shown, perf_dtype_name(c->type),
                   c->coll == PERF_COLL_ALLGATHER ? "none" : perf_op_name(c->op), -1, &h[0], &h[1], plan);
  }
  if (every != all) free(every);
  return rc;
}

/* Size k of a --random sweep: log-uniform in [min_bytes, max_bytes], the same on every rank. */
static size_t random_size(const struct perf_opts* o, int k) {
  uint64_t x = (uint64_t)o->random_seed * 0x9e3779b97f4a7c15ull + (uint64_t)k * 0xbf58476d1ce4e5b9ull;
  x ^= x >> 31;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 29;
  double u = (double)(x >> 11) / 9007199254740992.0;
  double lo = log((double)(o->min_bytes ? o->min_bytes : 1)), hi = log((double)o->max_bytes);
  size_t s = (size_t)exp(lo + u * (hi - lo));
  return s < o->min_bytes ? o->min_bytes : s > o->max_bytes ? o->max_bytes : s;
}

/* --random: size k with the k-th dtype (and op) in turn, one table. */
static int random_table(struct perf_rank* r, int coll) {
  const struct perf_opts* o = r->o;
  if (r->rank == 0) perf_print_table_header(coll == PERF_COLL_ALLGATHER ? "allgather" : "allreduce");
  double bw_sum = 0;
  int bw_n = 0;
  int64_t wrong = 0;
  for (int k = 0; k < o->random_sizes; k++) {
    struct perf_case c = {coll,
                          o->types[k % o->ntypes],
                          o->ops[k % (coll == PERF_COLL_ALLGATHER ? 1 : o->nops)],
                          r->rank,
                          r->nranks,
                          0};
    size_t s = random_size(o, k), es = perf_dtype_size(c.type);
    if (s < es * (coll == PERF_COLL_ALLGATHER ? (size_t)r->nranks : 1))
      s = es * (coll == PERF_COLL_ALLGATHER ? (size_t)r->nranks : 1);
    progress(r, &c, k, o->random_sizes, s);
    if (row(r, &c, s, &bw_sum, &bw_n, &wrong) != 0) return -1;
  }
  if (r->rank == 0) perf_print_table_footer(wrong, bw_n ? bw_sum / bw_n : 0);
  if (wrong > r->wrong) r->wrong = wrong;
  return 0;
}

static int table(struct perf_rank* r, int coll) {
  const struct perf_opts* o = r->o;
  if (o->random_sizes) return random_table(r, coll);
  int nsizes = 0;
  for (size_t s = o->min_bytes; s <= o->max_bytes; s = next_size(o, s)) nsizes++;
  if (r->rank == 0) perf_print_table_header(coll == PERF_COLL_ALLGATHER ? "allgather" : "allreduce");
  double bw_sum = 0;
  int bw_n = 0;
  int64_t wrong = 0;
  int nops = coll == PERF_COLL_ALLGATHER ? 1 : o->nops;
  for (int cycle = 0; o->cycles == 0 || cycle < o->cycles; cycle++) {
    for (int t = 0; t < o->ntypes; t++) {
      for (int op = 0; op < nops; op++) {
        struct perf_case c = {coll, o->types[t], o->ops[op], r->rank, r->nranks, 0};
        int k = 0;
        for (size_t s = o->min_bytes; s <= o->max_bytes; s = next_size(o, s), k++) {
          progress(r, &c, k, nsizes, s);
          if (row(r, &c, s, &bw_sum, &bw_n, &wrong) != 0) return -1;
        }
      }
    }
  }
  if (r->rank == 0) perf_print_table_footer(wrong, bw_n ? bw_sum / bw_n : 0);
  if (wrong > r->wrong) r->wrong = wrong;
  return 0;
}

int perf_bench(struct perf_rank* r) {
  r->bytes = r->o->max_bytes;
  r->send = perf_dev_alloc(r->bytes);
  r->recv = perf_dev_alloc(r->bytes);
  r->host = NULL;
  if (posix_memalign((void**)&r->host, 64, r->bytes ? r->bytes : 64) != 0) r->host = NULL;
  int rc = -1;
  if (r->send && r->recv && r->host) {
    memset(r->host, 0, r->bytes);
    perf_dev_upload(r->send, r->host, r->bytes);
    perf_dev_upload(r->recv, r->host, r->bytes);
    r->next_progress = now_s() + 5;
    rc = 0;
    if (r->o->colls & PERF_COLL_ALLREDUCE) rc = table(r, PERF_COLL_ALLREDUCE);
    if (rc == 0 && (r->o->colls & PERF_COLL_ALLGATHER)) rc = table(r, PERF_COLL_ALLGATHER);
  } else {
    fprintf(stderr, "shunt-perf: rank %d: cannot allocate 3 x %zu bytes\n", r->rank, r->bytes);
  }
  perf_dev_free(r->send);
  perf_dev_free(r->recv);
  free(r->host);
  return rc;
}
