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

#define NCCL_OK(l, call)                                                             \
  do {                                                                               \
    ncclResult_t rc_ = (call);                                                       \
    if (rc_ != ncclSuccess) {                                                        \
      fprintf(stderr, "shunt-perf: rank %d: %s failed: %s (%s)\n", (l)->rank, #call, \
              ncclGetErrorString(rc_), ncclGetLastError((l)->comm));                 \
      return -1;                                                                     \
    }                                                                                \
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

/* The case as rank l sees it (inputs and the in-place offset depend on the rank). */
static struct perf_case lane_case(const struct perf_case* c, const struct perf_lane* l) {
  struct perf_case lc = *c;
  lc.rank = l->rank;
  return lc;
}

/* Where rank l's call reads from: its send buffer, or in place its own part of recv
 * (reducescatter: the whole of recv, its output being the rank's part). */
static const void* lane_send(const struct perf_case* c, const struct perf_lane* l, int inplace) {
  size_t es = perf_dtype_size(c->type);
  unsigned char* recv = l->recv;
  if (!inplace) return l->send;
  return c->coll == PERF_COLL_ALLGATHER ? recv + (size_t)l->rank * c->count * es : recv;
}

/* Where rank l's call writes: recv, or for an in-place reducescatter the rank's part of it. */
static void* lane_recv(const struct perf_case* c, const struct perf_lane* l, int inplace) {
  size_t es = perf_dtype_size(c->type);
  unsigned char* recv = l->recv;
  return inplace && c->coll == PERF_COLL_REDUCESCATTER ? recv + (size_t)l->rank * c->count * es : recv;
}

static int lane_call(struct perf_lane* l, const struct perf_case* c, int inplace, ncclRedOp_t op) {
  cudaStream_t s = perf_dev_stream(l->dev);
  const void* send = lane_send(c, l, inplace);
  void* recv = lane_recv(c, l, inplace);
  if (c->coll == PERF_COLL_ALLGATHER)
    NCCL_OK(l, ncclAllGather(send, recv, c->count, c->type, l->comm, s));
  else if (c->coll == PERF_COLL_REDUCESCATTER)
    NCCL_OK(l, ncclReduceScatter(send, recv, c->count, c->type, op, l->comm, s));
  else if (c->coll == PERF_COLL_BROADCAST)
    NCCL_OK(l, ncclBroadcast(send, recv, c->count, c->type, c->root, l->comm, s));
  else if (c->coll == PERF_COLL_REDUCE)
    NCCL_OK(l, ncclReduce(send, recv, c->count, c->type, op, c->root, l->comm, s));
  else if (c->coll == PERF_COLL_ALLTOALL)
    NCCL_OK(l, ncclAlltoAll(send, recv, c->count, c->type, l->comm, s));
  else
    NCCL_OK(l, ncclAllReduce(send, recv, c->count, c->type, op, l->comm, s));
  if (perf_dev_record(l->dev) != 0) {
    fprintf(stderr, "shunt-perf: rank %d: cannot record an event after the call\n", l->rank);
    return -1;
  }
  return 0;
}

/* One call of every rank the thread drives: a group around them when there are several. As
 * nccl-tests: a PreMulSum is created for the call and destroyed right after it. */
static int call(struct perf_thread* t, const struct perf_case* c, int inplace) {
  ncclRedOp_t ops[64];
  int made = 0, rc = 0;
  for (; made < t->nlocal && rc == 0; made++) {
    struct perf_lane* l = &t->lanes[made];
    ops[made] = (ncclRedOp_t)c->op;
    if (!perf_reduces(c->coll) || c->op != PERF_OP_MULSUM) continue;
    struct perf_case lc = lane_case(c, l);
    uint64_t scalar = perf_mulsum_scalar(&lc);
    ncclResult_t r = ncclRedOpCreatePreMulSum(&ops[made], &scalar, c->type, ncclScalarHostImmediate, l->comm);
    if (r != ncclSuccess) {
      fprintf(stderr, "shunt-perf: rank %d: ncclRedOpCreatePreMulSum failed: %s\n", l->rank,
              ncclGetErrorString(r));
      rc = -1;
      break;
    }
  }
  if (rc == 0) {
    int grouped = t->nlocal > 1;
    if (grouped && ncclGroupStart() != ncclSuccess) rc = -1;
    for (int k = 0; k < t->nlocal && rc == 0; k++) rc = lane_call(&t->lanes[k], c, inplace, ops[k]);
    if (grouped) {
      ncclResult_t r =
          ncclGroupEnd(); /* always closed: a call that failed inside still leaves the group open */
      if (r != ncclSuccess && rc == 0) {
        fprintf(stderr, "shunt-perf: rank %d: ncclGroupEnd failed: %s (%s)\n", t->lanes[0].rank,
                ncclGetErrorString(r), ncclGetLastError(t->lanes[0].comm));
        rc = -1;
      }
    }
  }
  if (perf_reduces(c->coll) && c->op == PERF_OP_MULSUM)
    for (int k = 0; k < made && k < t->nlocal; k++)
      if (ncclRedOpDestroy(ops[k], t->lanes[k].comm) != ncclSuccess) rc = -1;
  return rc;
}

static int sync_all(struct perf_thread* t) {
  int rc = 0;
  for (int k = 0; k < t->nlocal; k++) rc |= perf_dev_sync(t->lanes[k].dev);
  return rc;
}

/* Every rank starts timing together. Through the side channel, not a collective: a size
 * that no plan serves would fail on a communicator without NCCL behind it. */
static int sync_ranks(struct perf_thread* t) {
  if (sync_all(t) != 0) return -1;
  return perf_chan_barrier(t->chan, t->lanes[0].rank, t->nlocal);
}

/* As nccl-tests' -G: the iterations captured into one graph per rank, each launched `graph`
 * times; the time per call is over the launches only. */
static int timed_graph(struct perf_thread* t, const struct perf_case* c, int inplace, double* us) {
  void* exec[64] = {0};
  int began = 0, bad = sync_all(t) != 0;
  for (; began < t->nlocal && !bad; began++) bad = perf_dev_graph_begin(t->lanes[began].dev) != 0;
  for (int it = 0; it < t->o->iters && !bad; it++) bad = call(t, c, inplace) != 0;
  for (int k = 0; k < began; k++) bad |= perf_dev_graph_end(t->lanes[k].dev, &exec[k]) != 0;
  int rc = 0;
  if (bad) {
    fprintf(stderr, "shunt-perf: rank %d: capturing %d calls into a graph failed\n", t->lanes[0].rank,
            t->o->iters);
    rc = -1;
  }
  if (rc == 0) rc = sync_ranks(t);
  double t0 = now_s();
  for (int g = 0; g < t->o->graph && rc == 0; g++)
    for (int k = 0; k < t->nlocal && rc == 0; k++) rc = perf_dev_graph_launch(t->lanes[k].dev, exec[k]);
  if (rc == 0) rc = sync_all(t);
  *us = (now_s() - t0) * 1e6 / ((double)t->o->iters * t->o->graph);
  for (int k = 0; k < began; k++) perf_dev_graph_free(t->lanes[k].dev, exec[k]);
  return rc;
}

struct half_local {
  double us;
  int64_t wrong;
};

/* One timed half (out of place or in place) and its check; h[k] is lane k's. */
static int timed_half(struct perf_thread* t, const struct perf_case* c, int inplace, struct half_local* h,
                      char* plan, size_t plan_len) {
  const struct perf_opts* o = t->o;
  size_t es = perf_dtype_size(c->type);
  double us = 0;
  if (o->graph > 0 && perf_dev_graphs_supported()) {
    if (timed_graph(t, c, inplace, &us) != 0) return -1;
  } else {
    if (sync_ranks(t) != 0) return -1;
    double t0 = now_s();
    for (int it = 0; it < o->iters; it++) {
      if (call(t, c, inplace) != 0) return -1;
      if (o->blocking && sync_all(t) != 0) return -1;
      if (o->blocking == 1 && perf_chan_barrier(t->chan, t->lanes[0].rank, t->nlocal) != 0) return -1;
    }
    if (sync_all(t) != 0) return -1;
    us = (now_s() - t0) * 1e6 / o->iters;
  }
  if (o->blocking == 3 && perf_chan_barrier(t->chan, t->lanes[0].rank, t->nlocal) != 0) return -1;
  snprintf(plan, plan_len, "%s", last_plan(t->lanes[0].comm));
  for (int k = 0; k < t->nlocal; k++) h[k] = (struct half_local){us, o->check ? 0 : -1};
  if (!o->check) return 0;
  int64_t any = 0;
  for (int round = 0; round < o->check && any == 0; round++) {
    for (int k = 0; k < t->nlocal; k++) {
      struct perf_lane* l = &t->lanes[k];
      struct perf_case lc = lane_case(c, l);
      perf_fill_input(&lc, l->host);
      perf_dev_upload(l->dev, (void*)lane_send(c, l, inplace), l->host, perf_in_count(&lc) * es);
    }
    if (call(t, c, inplace) != 0 || sync_all(t) != 0) return -1;
    for (int k = 0; k < t->nlocal; k++) {
      struct perf_lane* l = &t->lanes[k];
      struct perf_case lc = lane_case(c, l);
      perf_dev_download(l->dev, l->host, lane_recv(c, l, inplace), perf_out_count(&lc) * es);
      h[k].wrong = perf_count_wrong(&lc, l->host);
      any += h[k].wrong;
    }
  }
  for (int k = 0; k < t->nlocal; k++) t->lanes[k].my_wrong += h[k].wrong;
  return 0;
}

static void progress(struct perf_thread* r, const struct perf_case* c, int k, int nsizes, size_t bytes) {
  double t = now_s();
  if (r->lanes[0].rank != 0 || t < r->next_progress) return;
  fprintf(stderr, "shunt-perf: %s %s %s: size %d of %d (%zu B)\n", perf_coll_name(c->coll),
          perf_dtype_name(c->type), perf_reduces(c->coll) ? perf_op_name(c->op) : "none", k + 1, nsizes,
          bytes);
  r->next_progress = t + 5;
}

static size_t next_size(const struct perf_opts* o, size_t s) {
  size_t n = o->step_factor > 1 ? (size_t)((double)s * o->step_factor) : s + o->step_bytes;
  return n > s ? n : s + 1;
}

/* One row: counts as nccl-tests computes them (allgather and reducescatter: per-rank count,
 * alltoall: per-peer count, rounded down to 16 bytes, bus bandwidth (n-1)/n of the algorithm's,
 * the size column the whole buffer; broadcast: the count as given, bus bandwidth the
 * algorithm's), the two timed halves, the check, and the exchange of results with all ranks. */
static int row(struct perf_thread* r, struct perf_case* c, size_t size, double* bw_sum, int* bw_n,
               int64_t* table_wrong) {
  size_t es = perf_dtype_size(c->type), count = size / es, n = (size_t)r->nranks;
  size_t bytes = count * es, shown = count;
  double factor = n > 1 ? 2.0 * (double)(n - 1) / (double)n : 0;
  if (c->coll == PERF_COLL_ALLGATHER || c->coll == PERF_COLL_REDUCESCATTER || c->coll == PERF_COLL_ALLTOALL) {
    /* nccl-tests rounds each rank's part to 16 bytes; --random keeps every count exact. */
    count = r->o->random_sizes ? (count / n ? count / n : 1) : (count / n) & ~(16 / es - 1);
    shown = count * n;
    bytes = shown * es;
    factor = (double)(n - 1) / (double)n;
  }
  if (c->coll == PERF_COLL_BROADCAST || c->coll == PERF_COLL_REDUCE) factor = 1; /* nccl-tests' */
  c->count = count;
  for (int w = 0; w < r->o->warmup; w++)
    if (call(r, c, 0) != 0) return -1;
  struct half_local half[2][64], mine[64][2]; /* [half][lane], then [lane][half] as exchanged */
  char plans[2][48];
  for (int ip = 0; ip < 2; ip++)
    if (timed_half(r, c, ip, half[ip], plans[ip], sizeof(plans[ip])) != 0) return -1;
  for (int k = 0; k < r->nlocal; k++)
    for (int ip = 0; ip < 2; ip++) mine[k][ip] = half[ip][k];
  struct half_local all[2 * 64], *every = all;
  if (r->nranks > 64 && !(every = malloc(sizeof(mine[0]) * n))) return -1;
  int rc = perf_chan_allgather(r->chan, r->lanes[0].rank, r->nlocal, mine, sizeof(mine[0]), every);
  if (rc == 0 && r->lanes[0].rank == 0) {
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
                   perf_reduces(c->coll) ? perf_op_name(c->op) : "none", perf_rooted(c->coll) ? c->root : -1,
                   &h[0], &h[1], plan);
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
static int random_table(struct perf_thread* r, int coll) {
  const struct perf_opts* o = r->o;
  if (r->lanes[0].rank == 0) perf_print_table_header(perf_coll_name(coll));
  double bw_sum = 0;
  int bw_n = 0;
  int64_t wrong = 0;
  size_t per = coll == PERF_COLL_ALLREDUCE || perf_rooted(coll) ? 1 : (size_t)r->nranks;
  for (int k = 0; k < o->random_sizes; k++) {
    struct perf_case c = {coll,
                          o->types[k % o->ntypes],
                          o->ops[k % (perf_reduces(coll) ? o->nops : 1)],
                          r->lanes[0].rank,
                          r->nranks,
                          0,
                          o->root < 0 ? k % r->nranks : o->root};
    size_t s = random_size(o, k), es = perf_dtype_size(c.type);
    if (s < es * per) s = es * per;
    progress(r, &c, k, o->random_sizes, s);
    if (row(r, &c, s, &bw_sum, &bw_n, &wrong) != 0) return -1;
  }
  if (r->lanes[0].rank == 0) perf_print_table_footer(wrong, bw_n ? bw_sum / bw_n : 0);
  if (wrong > r->wrong) r->wrong = wrong;
  return 0;
}

static int table(struct perf_thread* r, int coll) {
  const struct perf_opts* o = r->o;
  if (o->random_sizes) return random_table(r, coll);
  int nsizes = 0;
  for (size_t s = o->min_bytes; s <= o->max_bytes; s = next_size(o, s)) nsizes++;
  if (r->lanes[0].rank == 0) perf_print_table_header(perf_coll_name(coll));
  double bw_sum = 0;
  int bw_n = 0;
  int64_t wrong = 0;
  int nops = perf_reduces(coll) ? o->nops : 1;
  /* Broadcast's and reduce's roots: the one asked for, or every rank in turn. */
  int root0 = o->root < 0 ? 0 : o->root, nroots = perf_rooted(coll) && o->root < 0 ? r->nranks : 1;
  for (int cycle = 0; o->cycles == 0 || cycle < o->cycles; cycle++) {
    for (int t = 0; t < o->ntypes * nroots; t++) {
      for (int op = 0; op < nops; op++) {
        struct perf_case c = {coll, o->types[t % o->ntypes], o->ops[op], r->lanes[0].rank, r->nranks,
                              0,    root0 + t / o->ntypes};
        int k = 0;
        for (size_t s = o->min_bytes; s <= o->max_bytes; s = next_size(o, s), k++) {
          progress(r, &c, k, nsizes, s);
          if (row(r, &c, s, &bw_sum, &bw_n, &wrong) != 0) return -1;
        }
      }
    }
  }
  if (r->lanes[0].rank == 0) perf_print_table_footer(wrong, bw_n ? bw_sum / bw_n : 0);
  if (wrong > r->wrong) r->wrong = wrong;
  return 0;
}

int perf_bench(struct perf_thread* r) {
  r->bytes = r->o->max_bytes;
  int rc = 0;
  for (int k = 0; k < r->nlocal; k++) {
    struct perf_lane* l = &r->lanes[k];
    l->send = perf_dev_alloc(l->dev, r->bytes);
    l->recv = perf_dev_alloc(l->dev, r->bytes);
    l->host = NULL;
    if (posix_memalign((void**)&l->host, 64, r->bytes ? r->bytes : 64) != 0) l->host = NULL;
    if (!l->send || !l->recv || !l->host) {
      fprintf(stderr, "shunt-perf: rank %d: cannot allocate 3 x %zu bytes\n", l->rank, r->bytes);
      rc = -1;
      break;
    }
    memset(l->host, 0, r->bytes);
    perf_dev_upload(l->dev, l->send, l->host, r->bytes);
    perf_dev_upload(l->dev, l->recv, l->host, r->bytes);
  }
  if (rc == 0) {
    r->next_progress = now_s() + 5;
    if (r->o->colls & PERF_COLL_ALLREDUCE) rc = table(r, PERF_COLL_ALLREDUCE);
    if (rc == 0 && (r->o->colls & PERF_COLL_ALLGATHER)) rc = table(r, PERF_COLL_ALLGATHER);
    if (rc == 0 && (r->o->colls & PERF_COLL_REDUCESCATTER)) rc = table(r, PERF_COLL_REDUCESCATTER);
    if (rc == 0 && (r->o->colls & PERF_COLL_ALLTOALL)) rc = table(r, PERF_COLL_ALLTOALL);
    for (int coll = PERF_COLL_BROADCAST; coll <= PERF_COLL_REDUCE && rc == 0; coll <<= 1) {
      if (!(r->o->colls & coll)) continue;
      if (r->o->root >= r->nranks) {
        fprintf(stderr, "shunt-perf: --root %d is not a rank of %d\n", r->o->root, r->nranks);
        rc = -1;
      } else {
        rc = table(r, coll);
      }
    }
  }
  for (int k = 0; k < r->nlocal; k++) {
    struct perf_lane* l = &r->lanes[k];
    perf_dev_free(l->dev, l->send);
    perf_dev_free(l->dev, l->recv);
    free(l->host);
    l->send = l->recv = l->host = NULL;
  }
  return rc;
}
