/* ncclAllReduce, ncclAllGather, ncclReduceScatter, ncclAlltoAll, ncclBroadcast/ncclBcast and
 * ncclReduce (and their *Config forms): check arguments as NCCL does, pick a plan, run it, or send the call
 * to NCCL; one chain for every collective, driven by a row per collective (struct coll_kind). */
#include <inttypes.h>
#include <nccl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/coll_config.h"
#include "api/export.h"
#include "api/gpu_gate.h"
#include "api/group.h"
#include "api/handles.h"
#include "api/launch.h"
#include "api/nccl_vocab.h"
#include "api/plans.h"
#include "api/tune.h"
#include "comm/redop.h"
#include "api/unavailable.h"
#include "comm/comm.h"
#include "transport/cuda_driver.h"
#include "exec/lower.h"
#include "exec/split.h"
#include "fallback/real_nccl.h"
#include "util/log.h"

enum {
  FORCE_ALLREDUCE = 1,
  FORCE_ALLGATHER = 2,
  FORCE_REDUCESCATTER = 4,
  FORCE_ALLTOALL = 8,
  FORCE_BROADCAST = 16,
  FORCE_REDUCE = 32
};

/* SHUNT_FORCE_FALLBACK, read once. */
static pthread_once_t force_once = PTHREAD_ONCE_INIT;
static int force_mask;

static void read_force(void) {
  const char* v = getenv("SHUNT_FORCE_FALLBACK");
  if (!v || !*v || !strcmp(v, "0") || !strcmp(v, "none")) return;
  char buf[128];
  snprintf(buf, sizeof(buf), "%s", v);
  char* save = NULL;
  for (char* t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    if (!strcmp(t, "all") || !strcmp(t, "1"))
      force_mask |= FORCE_ALLREDUCE | FORCE_ALLGATHER | FORCE_REDUCESCATTER | FORCE_ALLTOALL |
                    FORCE_BROADCAST | FORCE_REDUCE;
    else if (!strcmp(t, "allreduce"))
      force_mask |= FORCE_ALLREDUCE;
    else if (!strcmp(t, "allgather"))
      force_mask |= FORCE_ALLGATHER;
    else if (!strcmp(t, "reducescatter"))
      force_mask |= FORCE_REDUCESCATTER;
    else if (!strcmp(t, "alltoall"))
      force_mask |= FORCE_ALLTOALL;
    else if (!strcmp(t, "broadcast"))
      force_mask |= FORCE_BROADCAST;
    else if (!strcmp(t, "reduce"))
      force_mask |= FORCE_REDUCE;
    else {
      SHUNT_WARN(
          "SHUNT_FORCE_FALLBACK=%s is not valid (accepted: all, allreduce, allgather, reducescatter, "
          "alltoall, broadcast, reduce, a comma list, or 0); using 0",
          v);
      force_mask = 0;
      return;
    }
  }
}

static int forced(int what) {
  pthread_once(&force_once, read_force);
  return (force_mask & what) != 0;
}

static const char* dtype_name(ncclDataType_t t) {
  static const char* const n[] = {"int8", "uint8", "int32",  "uint32",   "int64",  "uint64",
                                  "half", "float", "double", "bfloat16", "f8e4m3", "f8e5m2"};
  return (t >= 0 && (int)t < (int)(sizeof(n) / sizeof(n[0]))) ? n[t] : "invalid";
}

static const char* op_name(ncclRedOp_t op) {
  static const char* const n[] = {"sum", "prod", "max", "min", "avg"};
  return (op >= 0 && op < ncclNumOps) ? n[op] : "premulsum";
}

/* NCCL's argument checks for the parts shunt sees before choosing a path. */
static ncclResult_t check_args(const char* fn, const void* send, const void* recv, size_t count,
                               ncclDataType_t dt) {
  if (!shunt_dtype_valid(shunt_dtype_from_nccl(dt))) {
    SHUNT_WARN("%s: invalid type %d", fn, (int)dt);
    return ncclInvalidArgument;
  }
  if (count > 0 && (!send || !recv)) {
    SHUNT_WARN("%s: %s argument is NULL", fn, !send ? "sendbuff" : "recvbuff");
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

/* count elements of dt, times `times` (allgather's ranks), must fit in 64 bits of bytes: a
 * larger call cannot be a real buffer, and its byte size would wrap. */
static ncclResult_t check_size(const char* fn, size_t count, ncclDataType_t dt, uint64_t times) {
  uint64_t es = shunt_dtype_size(shunt_dtype_from_nccl(dt));
  if (times == 0) times = 1;
  if (es && (uint64_t)count > UINT64_MAX / es / times) {
    SHUNT_WARN("%s: count %zu of %s elements%s is more bytes than any buffer holds", fn, count,
               dtype_name(dt), times > 1 ? " on every rank" : "");
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

/* The call's shape on the selected plan (exec/split.h: head and padded tail, and what a world
 * must hold for both), computed once here and carried to the run, and whether both parts lower
 * on every rank; the same answer on every rank, so no rank runs a plan that another refuses.
 * Nothing is lowered for the run here: that happens when the call runs. Sets sel->why_not when
 * not. */
static bool both_parts_lower(struct shunt_selection* sel, const struct shunt_call* call,
                             struct shunt_split* split, bool any_size) {
  static _Thread_local char reason[256];
  struct shunt_call_shape shape = {call->in_bytes, call->out_bytes, call->dtype, call->op, 0, 0,
                                   false,          any_size};
  if (shunt_split_check(sel->entry->plan, &shape, split, reason, sizeof(reason))) return true;
  sel->why_not = reason;
  sel->entry = NULL;
  return false;
}

/* A collective call's arguments as the API received them; the chain below reads them through
 * the collective's row of `kinds`. */
struct coll_args {
  const void* send;
  void* recv;
  size_t count; /* NCCL's count: allreduce's elements, allgather's per-rank send count,
                   reducescatter's per-rank receive count, alltoall's count to and from each peer */
  ncclDataType_t dtype;
  ncclRedOp_t op; /* collectives that reduce */
  ncclComm_t comm;
  cudaStream_t stream;
  int with_config; /* the *Config form: config may be NULL, as NCCL allows */
  const ncclCollConfig_t* config;
  int root; /* broadcast, reduce */
};

/* What the API knows of a collective beyond its traits (util/coll_traits.h: sizes, in-place
 * rule, op, root), which the one chain (route) reads: its NCCL names, SHUNT_FORCE_FALLBACK bit
 * and forwarder. */
struct coll_kind {
  enum shunt_coll coll;
  const char *name, *name_config;
  int force; /* its SHUNT_FORCE_FALLBACK bit */
  ncclResult_t (*forward)(const struct shunt_real_nccl* real, const struct coll_args* a, ncclComm_t comm);
};

/* A queued call names its communicator by handle and serial, holding no reference: the
 * communicator may be aborted before the group ends (by this very thread, even), and the call
 * must then fail rather than keep it alive or touch freed memory. */
struct plan_job {
  ncclComm_t handle;
  uint64_t serial;
  struct shunt_call call;
  struct shunt_split split;      /* the call's shape, computed at selection */
  void* completion_event;        /* ncclCollConfig_t.launchCompletionEvent, or NULL */
  struct shunt_tune_ticket tune; /* in-job tuning: how the run takes part (api/tune.h) */
  /* In-job tuning may hand the call to NCCL at the run: what forwarding it takes (the
   * per-call config is not kept: what it says is shunt's, or read already). */
  const struct coll_kind* kind;
  struct coll_args args;
};

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* A call whose plan in-job tuning settles at the run (api/tune.h): the bucket's decision, with
 * the call's shape on it, or the plan chosen at selection when the decision cannot take it. */
static void resolve_tuned(struct shunt_comm* c, struct plan_job* j) {
  const struct shunt_plan_entry* e = shunt_tune_resolve(c, &j->tune, j->call.entry);
  if (e == j->call.entry) return;
  if (e == &shunt_tune_nccl) {
    j->call.entry = e;
    return;
  }
  struct shunt_selection sel = {.entry = e};
  struct shunt_split split;
  if (!both_parts_lower(&sel, &j->call, &split, true)) {
    shunt_tune_unfit(&j->tune); /* served by the plan lowered at selection: no sample of e */
    return;
  }
  split.inplace = j->split.inplace;
  j->call.entry = e;
  j->split = split;
  atomic_store(&c->last_plan, e->plan->name);
}

static ncclResult_t run_plan_job(void* arg) {
  struct plan_job* j = arg;
  SHUNT_COMM_REF c = shunt_handles_get(j->handle);
  if (!c || c->serial != j->serial) {
    SHUNT_WARN("a queued collective's communicator was destroyed before the group ended");
    return ncclInvalidUsage;
  }
  resolve_tuned(c, j);
  shunt_tune_start(c->tune, &j->tune, (void*)j->call.stream);
  double t0 = j->tune.sample ? now_seconds() : 0;
  ncclResult_t rc;
  if (j->call.entry == &shunt_tune_nccl) {
    SHUNT_INFO(SHUNT_CALL, "%s %" PRIu64 " bytes -> nccl (in-job tuning)", j->kind->name, j->call.in_bytes);
    atomic_store(&c->last_plan, (const char*)NULL);
    rc = j->kind->forward(shunt_real_nccl(), &j->args, c->real);
  } else {
    rc = shunt_launch(c, &j->call, &j->split);
  }
  if (j->tune.bucket)
    shunt_tune_record(c->tune, &j->tune, j->tune.sample ? now_seconds() - t0 : 0, rc == ncclSuccess);
  /* The host backend has finished the work when shunt_launch returns, the GPU backend has
   * enqueued it: the event is recorded on the call's stream now, as NCCL records it once its
   * kernel is launched. */
  if (rc == ncclSuccess && j->completion_event) {
    int e = shunt_driver_event_record(j->completion_event, (void*)j->call.stream,
                                      j->call.on_gpu ? j->call.device : -1);
    if (e != 0) {
      SHUNT_WARN("could not record the call's launchCompletionEvent: %s",
                 e < 0 ? "the CUDA driver is not loaded in this process" : "cuEventRecord failed");
      return ncclInvalidUsage;
    }
  }
  return rc;
}

/* Queues `call` to run on its plan: in a group until the outermost ncclGroupEnd, outside one
 * at once (api/group.h). */
static ncclResult_t queue_plan_call(struct shunt_comm* c, struct shunt_call* call,
                                    const struct shunt_split* split, const struct shunt_coll_opts* opts,
                                    const struct shunt_tune_ticket* tune, const struct coll_kind* k,
                                    const struct coll_args* a) {
  struct plan_job* j = malloc(sizeof(*j));
  if (!j) {
    SHUNT_WARN("out of memory queueing a collective");
    return ncclSystemError;
  }
  j->handle = c->handle;
  j->serial = c->serial;
  j->call = *call;
  memset(&j->split, 0, sizeof(j->split));
  j->completion_event = opts->completion_event;
  j->tune = *tune;
  j->kind = k;
  j->args = *a;
  j->args.with_config = 0;
  j->args.config = NULL;
  if (split) j->split = *split;
  if (call->entry != &shunt_tune_nccl) atomic_store(&c->last_plan, call->entry->plan->name);
  return shunt_group_enqueue(c, run_plan_job, j, free);
}

/* Resolves the reduction op: builtin, or a PreMulSum this communicator knows. */
static ncclResult_t resolve_op(const char* fn, struct shunt_comm* c, ncclRedOp_t op, ncclDataType_t dt,
                               struct shunt_call* call) {
  call->op = shunt_redop_from_nccl(op);
  if (call->op != SHUNT_REDOP_OTHER) return ncclSuccess;
  struct shunt_redop_info info;
  if (!c->redops || shunt_redop_find(c->redops, op, &info) != 0) {
    if (!c->real) {
      /* No NCCL to know it: NCCL's own answer for an op nobody created. */
      SHUNT_WARN(
          "%s: invalid reduction operation %d (not a builtin op, and no ncclRedOpCreatePreMulSum on this "
          "communicator made it)",
          fn, (int)op);
      return ncclInvalidArgument;
    }
    call->op = SHUNT_REDOP_OTHER;
    return ncclSuccess; /* NCCL may know it; it decides */
  }
  if (info.dtype != dt) {
    SHUNT_WARN(
        "%s: Data type supplied to user-created ncclRedOp_t does not match type given to reduction operation",
        fn);
    return ncclInvalidArgument;
  }
  call->op = SHUNT_REDOP_PREMULSUM;
  if (info.residence == ncclScalarHostImmediate)
    memcpy(call->scalar, info.scalar, sizeof(call->scalar));
  else
    call->scalar_ptr = info.scalar_ptr;
  return ncclSuccess;
}

static ncclResult_t no_path(const char* fn, const char* why) {
  SHUNT_WARN(
      "%s: no plan serves this call (%s) and the communicator has no NCCL communicator to fall back to", fn,
      why);
  return ncclInvalidUsage;
}


/* The real library's answer; its failure makes its own last error the newer one. */
static ncclResult_t real_said(ncclResult_t rc) {
  if (rc != ncclSuccess && rc != ncclInProgress) shunt_note_real_failure();
  return rc;
}

static ncclResult_t fwd_allreduce(const struct shunt_real_nccl* real, const struct coll_args* a,
                                  ncclComm_t comm) {
  if (a->with_config) {
    if (!real || !real->ncclAllReduceConfig) return shunt_unavailable("ncclAllReduceConfig", real);
    return real_said(
        real->ncclAllReduceConfig(a->send, a->recv, a->count, a->dtype, a->op, comm, a->stream, a->config));
  }
  if (!real || !real->ncclAllReduce) return shunt_unavailable("ncclAllReduce", real);
  return real_said(real->ncclAllReduce(a->send, a->recv, a->count, a->dtype, a->op, comm, a->stream));
}

static ncclResult_t fwd_allgather(const struct shunt_real_nccl* real, const struct coll_args* a,
                                  ncclComm_t comm) {
  if (a->with_config) {
    if (!real || !real->ncclAllGatherConfig) return shunt_unavailable("ncclAllGatherConfig", real);
    return real_said(
        real->ncclAllGatherConfig(a->send, a->recv, a->count, a->dtype, comm, a->stream, a->config));
  }
  if (!real || !real->ncclAllGather) return shunt_unavailable("ncclAllGather", real);
  return real_said(real->ncclAllGather(a->send, a->recv, a->count, a->dtype, comm, a->stream));
}

static ncclResult_t fwd_reducescatter(const struct shunt_real_nccl* real, const struct coll_args* a,
                                      ncclComm_t comm) {
  if (a->with_config) {
    if (!real || !real->ncclReduceScatterConfig) return shunt_unavailable("ncclReduceScatterConfig", real);
    return real_said(real->ncclReduceScatterConfig(a->send, a->recv, a->count, a->dtype, a->op, comm,
                                                   a->stream, a->config));
  }
  if (!real || !real->ncclReduceScatter) return shunt_unavailable("ncclReduceScatter", real);
  return real_said(real->ncclReduceScatter(a->send, a->recv, a->count, a->dtype, a->op, comm, a->stream));
}

static ncclResult_t fwd_alltoall(const struct shunt_real_nccl* real, const struct coll_args* a,
                                 ncclComm_t comm) {
  if (a->with_config) {
    if (!real || !real->ncclAlltoAllConfig) return shunt_unavailable("ncclAlltoAllConfig", real);
    return real_said(
        real->ncclAlltoAllConfig(a->send, a->recv, a->count, a->dtype, comm, a->stream, a->config));
  }
  if (!real || !real->ncclAlltoAll) return shunt_unavailable("ncclAlltoAll", real);
  return real_said(real->ncclAlltoAll(a->send, a->recv, a->count, a->dtype, comm, a->stream));
}

static ncclResult_t fwd_broadcast(const struct shunt_real_nccl* real, const struct coll_args* a,
                                  ncclComm_t comm) {
  if (a->with_config) {
    if (!real || !real->ncclBroadcastConfig) return shunt_unavailable("ncclBroadcastConfig", real);
    return real_said(
        real->ncclBroadcastConfig(a->send, a->recv, a->count, a->dtype, a->root, comm, a->stream, a->config));
  }
  if (!real || !real->ncclBroadcast) return shunt_unavailable("ncclBroadcast", real);
  return real_said(real->ncclBroadcast(a->send, a->recv, a->count, a->dtype, a->root, comm, a->stream));
}

static ncclResult_t fwd_reduce(const struct shunt_real_nccl* real, const struct coll_args* a,
                               ncclComm_t comm) {
  if (a->with_config) {
    if (!real || !real->ncclReduceConfig) return shunt_unavailable("ncclReduceConfig", real);
    return real_said(real->ncclReduceConfig(a->send, a->recv, a->count, a->dtype, a->op, a->root, comm,
                                            a->stream, a->config));
  }
  if (!real || !real->ncclReduce) return shunt_unavailable("ncclReduce", real);
  return real_said(real->ncclReduce(a->send, a->recv, a->count, a->dtype, a->op, a->root, comm, a->stream));
}

/* ncclBcast goes to NCCL's own ncclBcast (send == recv there). */
static ncclResult_t fwd_bcast(const struct shunt_real_nccl* real, const struct coll_args* a,
                              ncclComm_t comm) {
  if (!real || !real->ncclBcast) return shunt_unavailable("ncclBcast", real);
  return real_said(real->ncclBcast(a->recv, a->count, a->dtype, a->root, comm, a->stream));
}

static const struct coll_kind ALLREDUCE = {SHUNT_COLL_ALLREDUCE, "AllReduce", "AllReduceConfig",
                                           FORCE_ALLREDUCE, fwd_allreduce};
static const struct coll_kind ALLGATHER = {SHUNT_COLL_ALLGATHER, "AllGather", "AllGatherConfig",
                                           FORCE_ALLGATHER, fwd_allgather};
static const struct coll_kind REDUCESCATTER = {SHUNT_COLL_REDUCESCATTER, "ReduceScatter",
                                               "ReduceScatterConfig", FORCE_REDUCESCATTER, fwd_reducescatter};
static const struct coll_kind BROADCAST = {SHUNT_COLL_BROADCAST, "Broadcast", "BroadcastConfig",
                                           FORCE_BROADCAST, fwd_broadcast};
static const struct coll_kind REDUCE = {SHUNT_COLL_REDUCE, "Reduce", "ReduceConfig", FORCE_REDUCE,
                                        fwd_reduce};
static const struct coll_kind BCAST = {SHUNT_COLL_BROADCAST, "Bcast", "BroadcastConfig", FORCE_BROADCAST,
                                       fwd_bcast};

/* A rooted collective's root, as NCCL checks it. */
static ncclResult_t check_root(const char* fn, int root, int nranks) {
  if (root < 0 || root >= nranks) {
    SHUNT_WARN("%s: invalid root %d (root should be in the 0..%d range)", fn, root, nranks - 1);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}
/* count elements to and from each peer: both buffers hold one block per rank (nccl.h: the
 * block for rank j at sendbuff + j x count, the block from rank i at recvbuff + i x count). */
static const struct coll_kind ALLTOALL = {SHUNT_COLL_ALLTOALL, "AlltoAll", "AlltoAllConfig", FORCE_ALLTOALL,
                                          fwd_alltoall};

/* One collective call: NCCL's argument checks, then a plan when one serves it (queued in the
 * group), else the real NCCL with the reason logged, or an error naming the reason when the
 * communicator has no NCCL behind it. A handle shunt does not know goes to NCCL untouched. */
static ncclResult_t route(const struct coll_kind* k, const struct coll_args* a) {
  SHUNT_COMM_REF c = shunt_handles_get(a->comm);
  const char* fn = a->with_config ? k->name_config : k->name;
  ncclComm_t to = a->comm;
  ncclResult_t rc;
  if (!c) goto forward; /* not ours: NCCL's to judge */
  struct shunt_coll_opts opts;
  uint64_t nranks = (uint64_t)c->nranks;
  const struct shunt_coll_traits* t = shunt_coll_traits(k->coll);
  uint64_t in_units = shunt_coll_in_units(k->coll, nranks), out_units = shunt_coll_out_units(k->coll, nranks);
  bool rooted = shunt_coll_rooted(k->coll);
  rc = shunt_handles_ready(fn, c);
  if (rc == ncclSuccess && rooted) rc = check_root(fn, a->root, c->nranks);
  /* A rooted collective's other ranks bind as its row says (util/coll_traits.h): a buffer only
   * the root uses may be anything elsewhere, NULL included, and is not checked there. */
  const void* send_used = a->send;
  void* recv_used = a->recv;
  bool bound_inplace = false; /* not used: selection's rule below decides from the buffers bound */
  if (rooted)
    shunt_coll_root_bind(k->coll, (uint32_t)c->rank, (uint32_t)a->root, &send_used, &recv_used,
                         &bound_inplace);
  bool send_unused = rooted && a->root != c->rank && t->root == SHUNT_ROOT_SENDS;
  bool recv_unused = rooted && a->root != c->rank && t->root == SHUNT_ROOT_RECEIVES;
  static const char not_read; /* stands for a buffer that is not checked */
  if (rc == ncclSuccess)
    rc = check_args(fn, send_unused ? &not_read : a->send, recv_unused ? &not_read : a->recv, a->count,
                    a->dtype);
  if (rc == ncclSuccess) rc = shunt_coll_opts_read(fn, a->config, &opts);
  struct shunt_call call = {.coll = k->coll,
                            .send = send_used,
                            .recv = recv_used,
                            .dtype = shunt_dtype_from_nccl(a->dtype),
                            .op = SHUNT_REDOP_SUM,
                            .stream = a->stream,
                            .root = rooted ? (uint32_t)a->root : 0};
  if (rc == ncclSuccess && t->reduces) rc = resolve_op(fn, c, a->op, a->dtype, &call);
  if (rc == ncclSuccess) rc = check_size(fn, a->count, a->dtype, in_units > out_units ? in_units : out_units);
  if (rc != ncclSuccess) return rc;
  uint64_t unit = (uint64_t)a->count * shunt_dtype_size(call.dtype);
  call.in_bytes = unit * in_units;
  call.out_bytes = unit * out_units;
  uint64_t bytes = shunt_coll_size(k->coll, call.in_bytes, call.out_bytes);
  bool inplace = shunt_select_inplace(k->coll, send_used, recv_used, (uint32_t)c->rank, unit);
  const char* send = send_used;
  const char* recv = recv_used;
  char what[64];
  snprintf(what, sizeof(what), "%s%s%s", dtype_name(a->dtype), t->reduces ? " " : "",
           t->reduces ? op_name(a->op) : "");
  if (rooted) {
    size_t l = strlen(what);
    snprintf(what + l, sizeof(what) - l, " root %d", a->root);
  }
  const char* why = NULL;
  if (a->count == 0)
    why = "empty";
  else if (forced(k->force))
    why = "SHUNT_FORCE_FALLBACK";
  else if (opts.to_nccl)
    why = opts.to_nccl;
  else if (!c->plans_enabled)
    why = "plans disabled for this communicator";
  else if ((why = shunt_gpu_gate_call(c, &call, call.in_bytes, call.out_bytes)) != NULL) {
    /* asked once per call: the answer is the reason */
  } else if (!inplace && !rooted && send < recv + call.out_bytes && recv < send + call.in_bytes)
    /* (A root's overlap is the root's alone; the other ranks cannot see it: it runs on the plan,
     * its input moved into its output first, exec/backend.c.) */
    why = "send and receive buffers partly overlap";
  else {
    struct shunt_select_query q = {.coll = k->coll,
                                   .nranks = (uint32_t)c->nranks,
                                   .ranks_per_node = shunt_plans_query_rpn(c),
                                   .inplace = inplace,
                                   .dtype = call.dtype,
                                   .op = call.op,
                                   .bytes = bytes,
                                   .root = call.root,
                                   .only = opts.only_plan};
    struct shunt_selection sel = shunt_planset_select(c->plans, &q);
    if (sel.entry && (sel.why_not = shunt_gpu_gate_plan(c, &call, sel.entry->plan)) != NULL) sel.entry = NULL;
    struct shunt_split split;
    struct shunt_tune_ticket tune = {0};
    bool tuned = false;
    if (c->tune && (sel.entry || call.on_gpu)) {
      /* In-job tuning (api/tune.h): a host call a plan serves, a device call whatever serves it
       * untuned (NCCL included). A candidate whose shape does not lower for this exact size
       * leaves the call to the untuned choice (alike on every rank). */
      const struct shunt_plan_entry* untuned = sel.entry;
      const struct shunt_plan_entry* cand =
          shunt_tune_pick(c->tune, &q, untuned, &call, shunt_group_depth() > 0, &tune);
      if (tune.resolve) {
        /* Settled at the run: lowered for the untuned plan now, re-lowered there if another
         * serves it. */
        if (!untuned) {
          call.entry = &shunt_tune_nccl;
          SHUNT_INFO(SHUNT_CALL, "%s %" PRIu64 " bytes %s -> settled at the run (in-job tuning)", fn, bytes, what);
          return queue_plan_call(c, &call, NULL, &opts, &tune, k, a);
        }
        if (both_parts_lower(&sel, &call, &split, false)) {
          call.entry = sel.entry;
          split.inplace = inplace;
          SHUNT_INFO(SHUNT_CALL, "%s %" PRIu64 " bytes %s -> plan %s (in-job tuning may settle another at the run)",
                     fn, bytes, what, sel.entry->plan->name);
          return queue_plan_call(c, &call, &split, &opts, &tune, k, a);
        }
        shunt_tune_unfit(&tune);
      } else if (cand == &shunt_tune_nccl) {
        sel.entry = NULL;
        if (tune.bucket) {
          /* NCCL's turn, timed on the call's stream. */
          SHUNT_INFO(SHUNT_CALL, "%s %" PRIu64 " bytes %s -> nccl (in-job tuning)", fn, bytes, what);
          atomic_store(&c->last_plan, (const char*)NULL);
          shunt_tune_start(c->tune, &tune, (void*)a->stream);
          rc = k->forward(shunt_real_nccl(), a, c->real);
          shunt_tune_record(c->tune, &tune, 0, rc == ncclSuccess);
          return rc;
        }
        if (untuned) sel.why_not = "in-job tuning chose NCCL for these calls";
      } else {
        sel.entry = cand;
        tuned = cand != untuned;
        if (tuned && !both_parts_lower(&sel, &call, &split, true)) {
          tuned = false;
          SHUNT_TRACE(SHUNT_TUNE, "%s %" PRIu64 " bytes: candidate %s passed over: %s", fn, bytes,
                      cand->plan->name, sel.why_not);
          sel.entry = untuned;
          if (untuned) sel.why_not = NULL;
          shunt_tune_unfit(&tune);
        }
      }
    }
    if (sel.entry && (tuned || both_parts_lower(&sel, &call, &split, false))) {
      call.entry = sel.entry;
      split.inplace = inplace; /* the one rule, carried down: no layer below decides it again */
      SHUNT_INFO(SHUNT_CALL, "%s %" PRIu64 " bytes %s -> plan %s", fn, bytes, what, sel.entry->plan->name);
      return queue_plan_call(c, &call, &split, &opts, &tune, k, a);
    }
    why = sel.why_not;
  }
  SHUNT_INFO(SHUNT_CALL, "%s %" PRIu64 " bytes %s -> nccl (%s)", fn, bytes, what, why);
  atomic_store(&c->last_plan, (const char*)NULL);
  if (!c->real) return a->count == 0 ? ncclSuccess : no_path(fn, why);
  to = c->real;
forward:
  return k->forward(shunt_real_nccl(), a, to);
}

SHUNT_EXPORT ncclResult_t pncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                         ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                         cudaStream_t stream) {
  struct coll_args a = {sendbuff, recvbuff, count, datatype, op, comm, stream, 0, NULL, 0};
  return route(&ALLREDUCE, &a);
}
SHUNT_ALIAS(ncclAllReduce, ncclResult_t,
            (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
             ncclComm_t comm, cudaStream_t stream))

SHUNT_EXPORT ncclResult_t pncclAllReduceConfig(const void* sendbuff, void* recvbuff, size_t count,
                                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                               cudaStream_t stream, const ncclCollConfig_t* config) {
  struct coll_args a = {sendbuff, recvbuff, count, datatype, op, comm, stream, 1, config, 0};
  return route(&ALLREDUCE, &a);
}
SHUNT_ALIAS(ncclAllReduceConfig, ncclResult_t,
            (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
             ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t* config))

SHUNT_EXPORT ncclResult_t pncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                         ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  struct coll_args a = {sendbuff, recvbuff, sendcount, datatype, ncclSum, comm, stream, 0, NULL, 0};
  return route(&ALLGATHER, &a);
}
SHUNT_ALIAS(ncclAllGather, ncclResult_t,
            (const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm,
             cudaStream_t stream))

SHUNT_EXPORT ncclResult_t pncclAllGatherConfig(const void* sendbuff, void* recvbuff, size_t sendcount,
                                               ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream,
                                               const ncclCollConfig_t* config) {
  struct coll_args a = {sendbuff, recvbuff, sendcount, datatype, ncclSum, comm, stream, 1, config, 0};
  return route(&ALLGATHER, &a);
}
SHUNT_ALIAS(ncclAllGatherConfig, ncclResult_t,
            (const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm,
             cudaStream_t stream, const ncclCollConfig_t* config))

SHUNT_EXPORT ncclResult_t pncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                             ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                             cudaStream_t stream) {
  struct coll_args a = {sendbuff, recvbuff, recvcount, datatype, op, comm, stream, 0, NULL, 0};
  return route(&REDUCESCATTER, &a);
}
SHUNT_ALIAS(ncclReduceScatter, ncclResult_t,
            (const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op,
             ncclComm_t comm, cudaStream_t stream))

SHUNT_EXPORT ncclResult_t pncclReduceScatterConfig(const void* sendbuff, void* recvbuff, size_t recvcount,
                                                   ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                                   cudaStream_t stream, const ncclCollConfig_t* config) {
  struct coll_args a = {sendbuff, recvbuff, recvcount, datatype, op, comm, stream, 1, config, 0};
  return route(&REDUCESCATTER, &a);
}
SHUNT_ALIAS(ncclReduceScatterConfig, ncclResult_t,
            (const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op,
             ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t* config))

SHUNT_EXPORT ncclResult_t pncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                         ncclDataType_t datatype, int root, ncclComm_t comm,
                                         cudaStream_t stream) {
  struct coll_args a = {sendbuff, recvbuff, count, datatype, ncclSum, comm, stream, 0, NULL, root};
  return route(&BROADCAST, &a);
}
SHUNT_ALIAS(ncclBroadcast, ncclResult_t,
            (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
             ncclComm_t comm, cudaStream_t stream))

SHUNT_EXPORT ncclResult_t pncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root,
                                     ncclComm_t comm, cudaStream_t stream) {
  struct coll_args a = {buff, buff, count, datatype, ncclSum, comm, stream, 0, NULL, root};
  return route(&BCAST, &a);
}
SHUNT_ALIAS(ncclBcast, ncclResult_t,
            (void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
             cudaStream_t stream))

SHUNT_EXPORT ncclResult_t pncclBroadcastConfig(const void* sendbuff, void* recvbuff, size_t count,
                                               ncclDataType_t datatype, int root, ncclComm_t comm,
                                               cudaStream_t stream, const ncclCollConfig_t* config) {
  struct coll_args a = {sendbuff, recvbuff, count, datatype, ncclSum, comm, stream, 1, config, root};
  return route(&BROADCAST, &a);
}
SHUNT_ALIAS(ncclBroadcastConfig, ncclResult_t,
            (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
             ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t* config))
SHUNT_EXPORT ncclResult_t pncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                                        ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  struct coll_args a = {sendbuff, recvbuff, count, datatype, ncclSum, comm, stream, 0, NULL, 0};
  return route(&ALLTOALL, &a);
}
SHUNT_ALIAS(ncclAlltoAll, ncclResult_t,
            (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,
             cudaStream_t stream))

SHUNT_EXPORT ncclResult_t pncclAlltoAllConfig(const void* sendbuff, void* recvbuff, size_t count,
                                              ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream,
                                              const ncclCollConfig_t* config) {
  struct coll_args a = {sendbuff, recvbuff, count, datatype, ncclSum, comm, stream, 1, config, 0};
  return route(&ALLTOALL, &a);
}
SHUNT_ALIAS(ncclAlltoAllConfig, ncclResult_t,
            (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,
             cudaStream_t stream, const ncclCollConfig_t* config))

SHUNT_EXPORT ncclResult_t pncclReduce(const void* sendbuff, void* recvbuff, size_t count,
                                      ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                                      cudaStream_t stream) {
  struct coll_args a = {sendbuff, recvbuff, count, datatype, op, comm, stream, 0, NULL, root};
  return route(&REDUCE, &a);
}
SHUNT_ALIAS(ncclReduce, ncclResult_t,
            (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
             int root, ncclComm_t comm, cudaStream_t stream))

SHUNT_EXPORT ncclResult_t pncclReduceConfig(const void* sendbuff, void* recvbuff, size_t count,
                                            ncclDataType_t datatype, ncclRedOp_t op, int root,
                                            ncclComm_t comm, cudaStream_t stream,
                                            const ncclCollConfig_t* config) {
  struct coll_args a = {sendbuff, recvbuff, count, datatype, op, comm, stream, 1, config, root};
  return route(&REDUCE, &a);
}
SHUNT_ALIAS(ncclReduceConfig, ncclResult_t,
            (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
             int root, ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t* config))
