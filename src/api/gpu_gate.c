#include "api/gpu_gate.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "api/launch.h"
#include "api/plans.h"
#include "exec/backend.h"
#include "exec/memkind.h"
#include "util/env.h"
#include "util/log.h"

enum { MODE_AUTO = 0, MODE_ON, MODE_OFF };

static pthread_once_t mode_once = PTHREAD_ONCE_INIT;
static int mode;
/* SHUNT_GPU_ACROSS_HOSTS (default on): whether device calls of a world that spans hosts may run on
 * plans. */
static bool across_hosts;
/* Bound of every wait of a self-check run. A healthy run takes microseconds on a GPU; the
 * bound is for a kernel that never completes. Seconds, from SHUNT_GPU_CHECK_TIMEOUT. */
static int64_t check_timeout_ms;

static void read_mode(void) {
  static const char* const choices[] = {"auto", "on", "off"};
  mode = shunt_env_choice("SHUNT_GPU", NULL, choices, 3, MODE_AUTO);
  check_timeout_ms = shunt_env_int("SHUNT_GPU_CHECK_TIMEOUT", 2, 1, 3600) * 1000;
  static const char* const onoff[] = {"off", "on"};
  across_hosts = shunt_env_choice("SHUNT_GPU_ACROSS_HOSTS", NULL, onoff, 2, 1) == 1;
}

/* Why the device calls of c go to NCCL whatever the self-check says, or NULL: a world that
 * spans hosts where the job asked to keep those on NCCL (SHUNT_GPU_ACROSS_HOSTS=off). The
 * executor's path between hosts (the kernel stages what leaves in mapped host memory and reads
 * what arrives over TCP from there, transport/gpu_fifo.h) has run only on the CUDA stand-in:
 * the knob lets a cluster where it misbehaves keep NCCL without giving up the rest. */
static const char* spans_refusal(const struct shunt_comm* c) {
  if (c->nnodes <= 1 || across_hosts) return NULL;
  return "GPU buffers on ranks of several hosts (SHUNT_GPU_ACROSS_HOSTS=off)";
}

/* The collectives the GPU backend runs: every one plans serve (the others' device calls go to
 * NCCL). */
static bool gpu_serves(enum shunt_coll coll) {
  return shunt_coll_served(coll);
}

/* The entry's plan, or a rooted collective's plan for every root (planset.h: each root's is a plan of
 * its own, ranks renamed, which selection hands out): appended to plans[k..]; the new count. */
static uint32_t add_plans(const struct shunt_plan_entry* e, const struct shunt_plan** plans, uint32_t k,
                          uint32_t max) {
  if (!e->roots) {
    if (k < max) plans[k++] = e->plan;
    return k;
  }
  for (uint32_t r = 0; r < e->plan->ngpus; r++)
    if (e->roots[r].plan && k < max) plans[k++] = e->roots[r].plan;
  return k;
}

static int gpu_mode(void) {
  pthread_once(&mode_once, read_mode);
  return mode;
}

void shunt_gpu_gate_init(struct shunt_comm* c) {
  int m = gpu_mode();
  if (m == MODE_OFF) {
    atomic_store(&c->gpu_verdict, SHUNT_GPU_NCCL);
    return;
  }
  if (spans_refusal(c)) {
    /* The same on every rank (host identities are gathered at init): no check is run anywhere. */
    atomic_store(&c->gpu_verdict, SHUNT_GPU_NCCL);
    if (c->rank == 0 && c->gpu_everywhere)
      SHUNT_INFO(SHUNT_INIT, "communicator of %d ranks on %d hosts: its device calls go to NCCL (%s)", c->nranks,
                 c->nnodes, spans_refusal(c));
    return;
  }
  if (m == MODE_ON) {
    atomic_store(&c->gpu_verdict, SHUNT_GPU_USE);
    return;
  }
  /* Every rank decides from the same gathered facts, so all run the check or none does. */
  if (!c->plans_enabled || !c->gpu_everywhere) return;
  uint32_t want = shunt_plans_query_rpn(c);
  uint32_t n = shunt_planset_count(c->plans), k = 0, n_max = 0;
  for (uint32_t i = 0; i < n; i++) {
    const struct shunt_plan_entry* e = shunt_planset_entry(c->plans, i);
    n_max += e->roots && e->plan ? e->plan->ngpus : 1;
  }
  const struct shunt_plan** plans = calloc(n_max ? n_max : 1, sizeof(*plans));
  if (!plans) {
    /* Cannot list them: no check on this rank would hang its peers; none is run anywhere only
     * if all fail alike, so run it with no plans (it still votes). */
    n = 0;
  }
  for (uint32_t i = 0; i < n; i++) {
    const struct shunt_plan_entry* e = shunt_planset_entry(c->plans, i);
    /* Plans this communicator's placement can select, by selection's own rule. */
    uint32_t rpn = e->plan ? e->plan->ranks_per_node : 0;
    if (e->status == SHUNT_PLAN_OK && e->plan && e->plan->ngpus == (uint32_t)c->nranks &&
        shunt_rpn_matches(rpn, (uint32_t)c->nranks, want) && gpu_serves(e->plan->coll))
      k = add_plans(e, plans, k, n_max);
  }
  if (k == 0) {
    free(plans);
    return; /* no plan could serve a device call: nothing to check (the same on every rank) */
  }
  struct shunt_backend* b = shunt_launch_backend(c, true, c->cuda_dev);
  struct shunt_gpu_verdict_info v;
  bool* unfit = calloc(k, sizeof(*unfit));
  int rc = b && unfit ? shunt_gpu_selfcheck(b, plans, k, (uint64_t)check_timeout_ms, unfit, &v) : -1;
  if (rc == 0 && v.unfit) {
    c->gpu_unfit = calloc(v.unfit, sizeof(*c->gpu_unfit));
    for (uint32_t i = 0; i < k && c->gpu_unfit; i++)
      if (unfit[i]) {
        c->gpu_unfit[c->n_gpu_unfit++] = plans[i];
        SHUNT_INFO(
            SHUNT_INIT,
            "rank %d: plan %s cannot run on this GPU for %d ranks (its blocks cannot all be resident); "
            "its device calls go to NCCL",
            c->rank, plans[i]->name, c->nranks);
      }
    /* Out of memory for the list: no plan is trusted rather than an unfit one. */
    if (!c->gpu_unfit)
      rc = -1, snprintf(v.what, sizeof(v.what), "out of memory"), snprintf(v.plan, sizeof(v.plan), "(none)");
  }
  free(unfit);
  free(plans);
  if (rc == 0) {
    atomic_store(&c->gpu_verdict, SHUNT_GPU_USE);
    SHUNT_INFO(SHUNT_INIT,
               "rank %d: GPU self-check passed: %u plans (%u unfit for this GPU), %u runs in %.1f ms; "
               "device calls run on plans",
               c->rank, k, v.unfit, v.runs, v.ms);
    return;
  }
  atomic_store(&c->gpu_verdict, SHUNT_GPU_NCCL);
  if (!b)
    SHUNT_WARN("rank %d: GPU self-check not run (out of memory); device calls go to NCCL", c->rank);
  else if (v.busy)
    SHUNT_WARN(
        "rank %d: GPU self-check inconclusive: plan %s, %llu bytes, runs given up: %u: %s; this "
        "communicator's device calls go to NCCL, a fallback that may be spurious: the device was busy with "
        "other kernels, no fault of shunt's was seen (a longer SHUNT_GPU_CHECK_TIMEOUT waits them out)",
        c->rank, v.plan, (unsigned long long)v.bytes, v.tries, v.what);
  else
    SHUNT_WARN(
        "rank %d: GPU self-check failed: plan %s, rank %u, %llu bytes: %s; this communicator's device calls "
        "go to NCCL",
        c->rank, v.plan, v.rank, (unsigned long long)v.bytes, v.what);
}

const char* shunt_gpu_gate_plan(const struct shunt_comm* c, const struct shunt_call* call,
                                const struct shunt_plan* plan) {
  if (!call->on_gpu) return NULL;
  for (uint32_t i = 0; i < c->n_gpu_unfit; i++)
    if (c->gpu_unfit[i] == plan)
      return "GPU buffers and the plan's blocks cannot all be resident on this GPU";
  return NULL;
}

const char* shunt_gpu_gate_call(struct shunt_comm* c, struct shunt_call* call, uint64_t in_bytes,
                                uint64_t out_bytes) {
  (void)in_bytes;
  (void)out_bytes;
  enum shunt_mem_kind ks = shunt_mem_kind(call->send);
  /* No output on this rank (a reduce's other ranks): the input alone says where the call runs. */
  bool one = call->recv == call->send || !call->recv;
  enum shunt_mem_kind kr = one ? ks : shunt_mem_kind(call->recv);
  call->on_gpu = false;
  if (ks == SHUNT_MEM_HOST && kr == SHUNT_MEM_HOST) return NULL;
  if (ks != kr) return "one buffer in host memory, the other on the GPU";
  if (!gpu_serves(call->coll))
    return "GPU buffers, and the GPU backend serves only the collectives plans serve";
  const char* spans = gpu_mode() == MODE_OFF ? NULL : spans_refusal(c);
  if (spans) return spans;
  switch (atomic_load(&c->gpu_verdict)) {
    case SHUNT_GPU_USE:
      break;
    case SHUNT_GPU_NCCL:
      return gpu_mode() == MODE_OFF ? "GPU buffers and SHUNT_GPU=off"
                                    : "GPU buffers and the GPU self-check failed";
    default:
      return "GPU buffers and no GPU self-check passed for this communicator";
  }
  int dev = shunt_mem_device(call->send);
  if (dev < 0 || (!one && shunt_mem_device(call->recv) != dev)) return "GPU buffers of different devices";
  if (c->cuda_dev >= 0 && dev != c->cuda_dev) return "GPU buffers of another device than the communicator's";
  call->on_gpu = true;
  call->device = dev;
  return NULL;
}
