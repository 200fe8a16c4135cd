/* ncclAllReduce and ncclAllGather: check arguments as NCCL does, pick a plan, run it, or
 * send the call to NCCL. */
#include <inttypes.h>
#include <nccl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/coll_config.h"
#include "api/export.h"
#include "api/gpu_gate.h"
#include "api/group.h"
#include "api/handles.h"
#include "api/launch.h"
#include "api/plans.h"
#include "comm/redop.h"
#include "api/unavailable.h"
#include "comm/comm.h"
#include "transport/cuda_driver.h"
#include "exec/lower.h"
#include "exec/split.h"
#include "fallback/real_nccl.h"
#include "util/log.h"

enum { FORCE_ALLREDUCE = 1, FORCE_ALLGATHER = 2 };

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
      force_mask |= FORCE_ALLREDUCE | FORCE_ALLGATHER;
    else if (!strcmp(t, "allreduce"))
      force_mask |= FORCE_ALLREDUCE;
    else if (!strcmp(t, "allgather"))
      force_mask |= FORCE_ALLGATHER;
    else {
      SHUNT_WARN(
          "SHUNT_FORCE_FALLBACK=%s is not valid (accepted: all, allreduce, allgather, a comma list, or 0); "
          "using 0",
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
  if ((int)dt < 0 || (int)dt >= ncclNumTypes) {
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
  uint64_t es = shunt_dtype_size((enum shunt_dtype)dt);
  if (times == 0) times = 1;
  if (es && (uint64_t)count > UINT64_MAX / es / times) {
    SHUNT_WARN("%s: count %zu of %s elements%s is more bytes than any buffer holds", fn, count,
               dtype_name(dt), times > 1 ? " on every rank" : "");
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

/* Whether the selected plan can be lowered for these sizes on every rank; the same answer
 * on every rank, so no rank runs a plan that another refuses. Sets sel->why_not when not. */
static bool lowerable(struct shunt_selection* sel, const struct shunt_call* call) {
  static _Thread_local char reason[256];
  struct shunt_call_shape shape = {call->in_bytes, call->out_bytes, call->dtype, call->op, 0, 0, false};
  if (shunt_split_check(sel->entry->plan, &shape, reason, sizeof(reason))) return true;
  sel->why_not = reason;
  sel->entry = NULL;
  return false;
}

/* A queued call names its communicator by handle and serial, holding no reference: the
 * communicator may be aborted before the group ends (by this very thread, even), and the call
 * must then fail rather than keep it alive or touch freed memory. */
struct plan_job {
  ncclComm_t handle;
  uint64_t serial;
  struct shunt_call call;
  void* completion_event; /* ncclCollConfig_t.launchCompletionEvent, or NULL */
};

static ncclResult_t run_plan_job(void* arg) {
  struct plan_job* j = arg;
  SHUNT_COMM_REF c = shunt_handles_get(j->handle);
  if (!c || c->serial != j->serial) {
    SHUNT_WARN("a queued collective's communicator was destroyed before the group ended");
    return ncclInvalidUsage;
  }
  ncclResult_t rc = shunt_launch(c, &j->call);
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

/* Either runs `call` through its plan (queued in a group) or explains why not. */
static ncclResult_t serve(struct shunt_comm* c, struct shunt_call* call, const struct shunt_coll_opts* opts) {
  struct plan_job* j = malloc(sizeof(*j));
  if (!j) {
    SHUNT_WARN("out of memory queueing a collective");
    return ncclSystemError;
  }
  j->handle = c->handle;
  j->serial = c->serial;
  j->call = *call;
  j->completion_event = opts->completion_event;
  atomic_store(&c->last_plan, call->entry->plan->name);
  return shunt_group_enqueue(c, run_plan_job, j, free);
}

/* Resolves the reduction op: builtin, or a PreMulSum this communicator knows. */
static ncclResult_t resolve_op(const char* fn, struct shunt_comm* c, ncclRedOp_t op, ncclDataType_t dt,
                               struct shunt_call* call) {
  if (op >= 0 && op < ncclNumOps) {
    call->op = (enum shunt_redop)op;
    return ncclSuccess;
  }
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

/* ncclAllReduce, and ncclAllReduceConfig when with_config (config may then be NULL, as NCCL
 * allows): the caller's config goes to NCCL untouched. */
static ncclResult_t allreduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                              ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream, int with_config,
                              const ncclCollConfig_t* config) {
  SHUNT_COMM_REF c = shunt_handles_get(comm);
  const struct shunt_real_nccl* real = NULL;
  const char* fn = with_config ? "AllReduceConfig" : "AllReduce";
  struct shunt_coll_opts opts;
  if (!c) goto forward; /* not ours: NCCL's to judge */
  ncclResult_t rc = shunt_handles_ready(fn, c);
  if (rc == ncclSuccess) rc = check_args(fn, sendbuff, recvbuff, count, datatype);
  if (rc == ncclSuccess) rc = shunt_coll_opts_read(fn, config, &opts);
  if (rc != ncclSuccess) return rc;
  struct shunt_call call = {.coll = SHUNT_COLL_ALLREDUCE,
                            .send = sendbuff,
                            .recv = recvbuff,
                            .dtype = (enum shunt_dtype)datatype,
                            .stream = stream};
  if ((rc = resolve_op(fn, c, op, datatype, &call)) != ncclSuccess) return rc;
  if ((rc = check_size(fn, count, datatype, 1)) != ncclSuccess) return rc;
  uint64_t bytes = (uint64_t)count * shunt_dtype_size(call.dtype);
  call.in_bytes = call.out_bytes = bytes;
  const char* why = NULL;
  if (count == 0)
    why = "empty";
  else if (forced(FORCE_ALLREDUCE))
    why = "SHUNT_FORCE_FALLBACK";
  else if (opts.to_nccl)
    why = opts.to_nccl;
  else if (!c->plans_enabled)
    why = "plans disabled for this communicator";
  else if ((why = shunt_gpu_gate_call(c, &call, bytes, bytes)) != NULL) {
    /* asked once per call: the answer is the reason */
  } else if (sendbuff != recvbuff && (const char*)sendbuff < (const char*)recvbuff + bytes &&
             (const char*)recvbuff < (const char*)sendbuff + bytes)
    why = "send and receive buffers partly overlap";
  else {
    struct shunt_select_query q = {.coll = SHUNT_COLL_ALLREDUCE,
                                   .nranks = (uint32_t)c->nranks,
                                   .ranks_per_node = shunt_plans_query_rpn(c),
                                   .inplace = sendbuff == recvbuff,
                                   .dtype = call.dtype,
                                   .op = call.op,
                                   .bytes = bytes,
                                   .only = opts.only_plan};
    struct shunt_selection sel = shunt_planset_select(c->plans, &q);
    if (sel.entry && (sel.why_not = shunt_gpu_gate_plan(c, &call, sel.entry->plan)) != NULL) sel.entry = NULL;
    if (sel.entry && lowerable(&sel, &call)) {
      call.entry = sel.entry;
      SHUNT_INFO(SHUNT_CALL, "%s %" PRIu64 " bytes %s %s -> plan %s", fn, bytes, dtype_name(datatype),
                 op_name(op), sel.entry->plan->name);
      return serve(c, &call, &opts);
    }
    why = sel.why_not;
  }
  SHUNT_INFO(SHUNT_CALL, "%s %" PRIu64 " bytes %s %s -> nccl (%s)", fn, bytes, dtype_name(datatype),
             op_name(op), why);
  atomic_store(&c->last_plan, (const char*)NULL);
  if (!c->real) return count == 0 ? ncclSuccess : no_path(fn, why);
  comm = c->real;
forward:
  real = shunt_real_nccl();
  if (with_config) {
    if (!real || !real->ncclAllReduceConfig) return shunt_unavailable("ncclAllReduceConfig", real);
    rc = real->ncclAllReduceConfig(sendbuff, recvbuff, count, datatype, op, comm, stream, config);
  } else {
    if (!real || !real->ncclAllReduce) return shunt_unavailable("ncclAllReduce", real);
    rc = real->ncclAllReduce(sendbuff, recvbuff, count, datatype, op, comm, stream);
  }
  if (rc != ncclSuccess && rc != ncclInProgress) shunt_note_real_failure();
  return rc;
}

SHUNT_EXPORT ncclResult_t pncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                         ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                         cudaStream_t stream) {
  return allreduce(sendbuff, recvbuff, count, datatype, op, comm, stream, 0, NULL);
}
SHUNT_ALIAS(ncclAllReduce, ncclResult_t,
            (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
             ncclComm_t comm, cudaStream_t stream))

SHUNT_EXPORT ncclResult_t pncclAllReduceConfig(const void* sendbuff, void* recvbuff, size_t count,
                                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                               cudaStream_t stream, const ncclCollConfig_t* config) {
  return allreduce(sendbuff, recvbuff, count, datatype, op, comm, stream, 1, config);
}
SHUNT_ALIAS(ncclAllReduceConfig, ncclResult_t,
            (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
             ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t* config))

/* ncclAllGather, and ncclAllGatherConfig when with_config. */
static ncclResult_t allgather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                              ncclComm_t comm, cudaStream_t stream, int with_config,
                              const ncclCollConfig_t* config) {
  SHUNT_COMM_REF c = shunt_handles_get(comm);
  const struct shunt_real_nccl* real = NULL;
  const char* fn = with_config ? "AllGatherConfig" : "AllGather";
  struct shunt_coll_opts opts;
  if (!c) goto forward;
  ncclResult_t rc = shunt_handles_ready(fn, c);
  if (rc == ncclSuccess) rc = check_args(fn, sendbuff, recvbuff, sendcount, datatype);
  if (rc == ncclSuccess) rc = shunt_coll_opts_read(fn, config, &opts);
  if (rc == ncclSuccess) rc = check_size(fn, sendcount, datatype, (uint64_t)c->nranks);
  if (rc != ncclSuccess) return rc;
  uint64_t per = (uint64_t)sendcount * shunt_dtype_size((enum shunt_dtype)datatype);
  uint64_t total = per * (uint64_t)c->nranks;
  struct shunt_call call = {.coll = SHUNT_COLL_ALLGATHER,
                            .send = sendbuff,
                            .recv = recvbuff,
                            .in_bytes = per,
                            .out_bytes = total,
                            .dtype = (enum shunt_dtype)datatype,
                            .op = SHUNT_REDOP_SUM,
                            .stream = stream};
  bool inplace = shunt_select_inplace(SHUNT_COLL_ALLGATHER, sendbuff, recvbuff, (uint32_t)c->rank, per);
  const char* why = NULL;
  if (sendcount == 0)
    why = "empty";
  else if (forced(FORCE_ALLGATHER))
    why = "SHUNT_FORCE_FALLBACK";
  else if (opts.to_nccl)
    why = opts.to_nccl;
  else if (!c->plans_enabled)
    why = "plans disabled for this communicator";
  else if ((why = shunt_gpu_gate_call(c, &call, per, total)) != NULL) {
    /* asked once per call: the answer is the reason */
  } else if (!inplace && (const char*)sendbuff < (const char*)recvbuff + total &&
             (const char*)recvbuff < (const char*)sendbuff + per)
    why = "send and receive buffers partly overlap";
  else {
    struct shunt_select_query q = {.coll = SHUNT_COLL_ALLGATHER,
                                   .nranks = (uint32_t)c->nranks,
                                   .ranks_per_node = shunt_plans_query_rpn(c),
                                   .inplace = inplace,
                                   .dtype = call.dtype,
                                   .op = SHUNT_REDOP_SUM,
                                   .bytes = total,
                                   .only = opts.only_plan};
    struct shunt_selection sel = shunt_planset_select(c->plans, &q);
    if (sel.entry && (sel.why_not = shunt_gpu_gate_plan(c, &call, sel.entry->plan)) != NULL) sel.entry = NULL;
    if (sel.entry && lowerable(&sel, &call)) {
      call.entry = sel.entry;
      SHUNT_INFO(SHUNT_CALL, "%s %" PRIu64 " bytes %s -> plan %s", fn, total, dtype_name(datatype),
                 sel.entry->plan->name);
      return serve(c, &call, &opts);
    }
    why = sel.why_not;
  }
  SHUNT_INFO(SHUNT_CALL, "%s %" PRIu64 " bytes %s -> nccl (%s)", fn, total, dtype_name(datatype), why);
  atomic_store(&c->last_plan, (const char*)NULL);
  if (!c->real) return sendcount == 0 ? ncclSuccess : no_path(fn, why);
  comm = c->real;
forward:
  real = shunt_real_nccl();
  if (with_config) {
    if (!real || !real->ncclAllGatherConfig) return shunt_unavailable("ncclAllGatherConfig", real);
    rc = real->ncclAllGatherConfig(sendbuff, recvbuff, sendcount, datatype, comm, stream, config);
  } else {
    if (!real || !real->ncclAllGather) return shunt_unavailable("ncclAllGather", real);
    rc = real->ncclAllGather(sendbuff, recvbuff, sendcount, datatype, comm, stream);
  }
  if (rc != ncclSuccess && rc != ncclInProgress) shunt_note_real_failure();
  return rc;
}

SHUNT_EXPORT ncclResult_t pncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                         ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  return allgather(sendbuff, recvbuff, sendcount, datatype, comm, stream, 0, NULL);
}
SHUNT_ALIAS(ncclAllGather, ncclResult_t,
            (const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm,
             cudaStream_t stream))

SHUNT_EXPORT ncclResult_t pncclAllGatherConfig(const void* sendbuff, void* recvbuff, size_t sendcount,
                                               ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream,
                                               const ncclCollConfig_t* config) {
  return allgather(sendbuff, recvbuff, sendcount, datatype, comm, stream, 1, config);
}
SHUNT_ALIAS(ncclAllGatherConfig, ncclResult_t,
            (const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm,
             cudaStream_t stream, const ncclCollConfig_t* config))
