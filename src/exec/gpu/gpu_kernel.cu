/* The executor kernel, the scaling kernels and the launcher (gpu_run.h). CUDA C with C linkage
 * for everything the host code calls. */
#include <stdio.h>
#include <string.h>

#include "exec/bind.h"
#include "exec/gpu/gpu_run.h"
#include "exec/gpu/gpu_xctx.cuh"

/* The op applied at reduce steps: avg and PreMulSum are sums of scaled contributions. */
static __host__ __device__ inline int shunt_gpu_step_kind(unsigned redop) {
  return (redop == SHUNT_REDOP_AVG || redop == SHUNT_REDOP_PREMULSUM) ? SHUNT_RED_SUM : (int)redop;
}

/* Work of the block that finishes last: every block has read the epoch and finished its ops,
 * so the per-execution state can be reset for the next execution and the epoch advanced. */
static __device__ void shunt_gpu_finish(struct shunt_xctx* X, struct shunt_gpu_ctrl* ctrl, uint64_t epoch) {
  const struct shunt_gpu_kargs* k = X->k;
  if (k->port_used) {
    /* Every trigger of this execution must be complete before the stream moves on (staging
     * copies, the next call reusing the source buffers): one SYNC trigger drains the FIFO. */
    struct shunt_trigger t;
    memset(&t, 0, sizeof(t));
    t.type = SHUNT_TRIG_SYNC;
    t.peer = (uint16_t)k->rank;
    X->op = shunt_prog_blocks(X->prog)[X->block].nops;
    if (xb_port(X, 0, &t, true)) return;
  }
  for (unsigned i = 0; i < SHUNT_GPU_BARRIERS; i++) ctrl->bars[i] = 0;
  /* Plans leave their semaphores as they found them (checked at load); restoring the initial
   * values keeps the next execution right even after a plan that did not. */
  const int64_t* init = shunt_prog_sem_init(X->prog);
  for (uint32_t i = 0; i < X->prog->nsems; i++) k->sems[i] = (long long)init[i];
  ctrl->done_blocks = 0;
  __threadfence();
  *(volatile uint64_t*)&ctrl->epoch = epoch + 1;
  __threadfence_system();
}

extern "C" __global__ void __launch_bounds__(SHUNT_GPU_MAX_THREADS, 1)
    shunt_gpu_exec_kernel(const __grid_constant__ struct shunt_gpu_kargs k) {
  const struct shunt_program* P = k.prog;
  struct shunt_gpu_ctrl* ctrl = (struct shunt_gpu_ctrl*)(k.region + k.lay.ctrl);
  struct shunt_xctx X;
  X.prog = P;
  X.block = blockIdx.x;
  X.tid = threadIdx.x;
  X.nthreads = blockDim.x;
  X.op = 0;
  X.k = &k;
  if (xg_ld_volatile_u32(k.abort)) {
    /* A broken world: do nothing, but say so, so that the host does not take the output. */
    if (blockIdx.x == 0 && threadIdx.x == 0) {
      struct xg_spin s = {0, 0, 1};
      xg_blocked(&X, &s, SHUNT_GPU_WAIT_NONE, 0, 0, 0, 0, 1, 0);
    }
    return;
  }
  /* No block advances the epoch before every block has read it (the completion count below). */
  uint64_t epoch = *(volatile uint64_t*)&ctrl->epoch;
  if (P->nblocks == 0) {
    /* A rank with nothing to do still counts the execution, so its flags stay in step with
     * its peers' (launched with one block). */
    if (threadIdx.x == 0) *(volatile uint64_t*)&ctrl->epoch = epoch + 1;
    return;
  }
  X.flag = shunt_pkt_flag_for_epoch(epoch);
  X.half = shunt_pkt_half(X.flag, k.lay.scratch_bytes, P->double_scratch);
  X.scratch0 = k.region + k.lay.scratch;
  X.base[0] = k.in;
  X.base[1] = k.out;
  X.base[2] = X.scratch0 + X.half;
  X.ll8 = P->pkt == SHUNT_PKT_LL8;
  X.esize = (uint32_t)shunt_ty_size(P->dtype);
  if (X.esize == 0) X.esize = 1;
  X.red.ty = P->dtype;
  X.red.kind = shunt_gpu_step_kind(P->redop);
  X.red.arg = 0;

  /* A thread that gave up has recorded why and raised the abort word; it leaves (an exited
   * thread no longer holds up its block's barriers). The thread that gave up need not be
   * thread 0, which may well finish its ops and get here: it looks at the abort word (written
   * and fenced before the failing thread exited, so before the barrier below released), and a
   * block of a failed execution never counts as done, so a failed execution never advances
   * the epoch. */
  if (shunt_x_block(&X)) return;
  __syncthreads();
  if (threadIdx.x != 0) return;
  if (xg_ld_volatile_u32(k.abort)) return;
  __threadfence();
  unsigned prev = atomicAdd(&ctrl->done_blocks, 1u);
  if (prev != gridDim.x - 1) return;
  __threadfence();
  shunt_gpu_finish(&X, ctrl, epoch);
}

/* dst[i] = pre(src[i]): PreMulSum / floating avg scaling of one contribution. */
extern "C" __global__ void shunt_gpu_pre_kernel(char* dst, const char* src, uint64_t n,
                                                struct shunt_red red) {
  uint64_t es = shunt_ty_size(red.ty);
  for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (uint64_t)gridDim.x * blockDim.x)
    shunt_ty_store(dst + i * es, red.ty, shunt_pre_elem(&red, shunt_ty_load(src + i * es, red.ty)));
}

/* buf[i] = post(buf[i]): integer avg's division. */
extern "C" __global__ void shunt_gpu_post_kernel(char* buf, uint64_t n, struct shunt_red red) {
  uint64_t es = shunt_ty_size(red.ty);
  for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (uint64_t)gridDim.x * blockDim.x)
    shunt_ty_store(buf + i * es, red.ty, shunt_post_elem(&red, shunt_ty_load(buf + i * es, red.ty)));
}

/* ---- Launcher ------------------------------------------------------------------------------------- */

#define FAIL(code, ...)                              \
  do {                                               \
    if (err && len) snprintf(err, len, __VA_ARGS__); \
    return (code);                                   \
  } while (0)

static unsigned elem_grid(uint64_t n) {
  uint64_t g = (n + 255) / 256;
  return (unsigned)(g == 0 ? 1 : g > 1024 ? 1024 : g);
}

/* CUDA loads a module's kernels lazily (CUDA_MODULE_LOADING=LAZY, the default since 12.2), at
 * their first launch, and loading waits for the device's running kernels. A rank's kernel that
 * waits for a peer on the same GPU while that peer's thread loads a kernel for its first
 * launch would then deadlock until the device timeout: every kernel is loaded here, before
 * any run of the world, while no executor kernel is running. */
extern "C" int shunt_gpu_load_kernels(void) {
  struct cudaFuncAttributes a;
  if (cudaFuncGetAttributes(&a, shunt_gpu_exec_kernel) != cudaSuccess) return -1;
  if (cudaFuncGetAttributes(&a, shunt_gpu_pre_kernel) != cudaSuccess) return -1;
  if (cudaFuncGetAttributes(&a, shunt_gpu_post_kernel) != cudaSuccess) return -1;
  return 0;
}

extern "C" int shunt_gpu_coresident_blocks(int device, uint32_t threads, uint32_t* out) {
  int per_sm = 0, sms = 0, cur = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) return -1;
  /* The occupancy query answers for the calling thread's current device: ask on `device`. */
  if (cudaGetDevice(&cur) != cudaSuccess) return -1;
  if (cur != device && cudaSetDevice(device) != cudaSuccess) return -1;
  cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, shunt_gpu_exec_kernel, (int)threads, 0);
  if (cur != device) cudaSetDevice(cur);
  if (e != cudaSuccess) return -1;
  *out = (uint32_t)per_sm * (uint32_t)sms;
  return 0;
}

extern "C" int shunt_gpu_launch(const struct shunt_gpu_run* run, cudaStream_t stream, char* err, size_t len) {
  if (err && len) err[0] = 0;
  if (!run || !run->world || !run->prog || !run->prog->host || !run->prog->dev)
    FAIL(SHUNT_GPU_INVALID, "no world or no program");
  struct shunt_gpu_world* w = run->world;
  const struct shunt_gpu_prog* gp = run->prog;
  const struct shunt_program* p = gp->host;
  if (p->magic != SHUNT_PROG_MAGIC) FAIL(SHUNT_GPU_INVALID, "not a program");
  uint32_t rank = shunt_gpu_world_rank(w), nranks = shunt_gpu_world_nranks(w);
  if (p->rank != rank || p->nranks != nranks)
    FAIL(SHUNT_GPU_INVALID, "program for rank %u of %u launched on rank %u of %u", p->rank, p->nranks, rank,
         nranks);
  if (shunt_gpu_world_broken(w)) FAIL(SHUNT_GPU_INVALID, "an earlier run on this world failed");
  /* The kernel and the staging copies go to the calling thread's current device, and every
   * address in them (region, peers, FIFO) belongs to the world's. */
  int cur_dev = -1;
  if (cudaGetDevice(&cur_dev) != cudaSuccess || cur_dev != shunt_gpu_world_device(w))
    FAIL(SHUNT_GPU_INVALID, "the current device is %d, the world's is %d", cur_dev, shunt_gpu_world_device(w));

  struct shunt_gpu_kargs k;
  memset(&k, 0, sizeof(k));
  shunt_gpu_world_kargs(w, &k);
  uint64_t cap = p->double_scratch ? k.lay.scratch_bytes / 2 : k.lay.scratch_bytes;
  if (p->scratch_bytes > cap)
    FAIL(SHUNT_GPU_INVALID, "plan needs %llu bytes of scratch per half, the world has %llu",
         (unsigned long long)p->scratch_bytes, (unsigned long long)cap);

  /* How avg and PreMulSum reach NCCL's result with a plan that sums each contribution once
   * (exec/elem.h): scale before (floating avg, PreMulSum) or divide after (integer avg). */
  bool pre = false, postdiv = false;
  if (p->coll == SHUNT_COLL_ALLREDUCE) {
    if (p->dtype >= SHUNT_DT_COUNT || p->redop > SHUNT_REDOP_PREMULSUM)
      FAIL(SHUNT_GPU_INVALID, "dtype %u with op %u is not computed by the GPU executor", p->dtype, p->redop);
    if (p->redop == SHUNT_REDOP_PREMULSUM) pre = true;
    if (p->redop == SHUNT_REDOP_AVG) {
      if (shunt_ty_is_float(p->dtype))
        pre = true;
      else
        postdiv = true;
    }
    if (p->redop == SHUNT_REDOP_PREMULSUM && !run->premul_scalar)
      FAIL(SHUNT_GPU_INVALID, "PreMulSum without a scalar");
  }
  uint64_t es = shunt_ty_size(p->dtype);
  if (es == 0) es = 1;
  char* stage_in = shunt_gpu_world_stage(w, 0);
  char* stage_out = shunt_gpu_world_stage(w, 1);
  const char* user_in = (const char*)run->in;
  char* user_out = (char*)run->out;
  /* The same binding decision as the host backend's (exec/bind.h). */
  struct shunt_bind bd;
  const char* why =
      shunt_bind_decide(p, user_in, user_out, pre, stage_in, k.lay.input_bytes, k.lay.output_bytes, &bd);
  if (why)
    FAIL(SHUNT_GPU_INVALID, "%s (buffers of %llu/%llu bytes, staging %llu/%llu)", why,
         (unsigned long long)p->in_bytes, (unsigned long long)p->out_bytes,
         (unsigned long long)k.lay.input_bytes, (unsigned long long)k.lay.output_bytes);
  bool alias = bd.alias, stage_o = bd.stage_out, stage_i = bd.stage_in;
  struct shunt_red red;
  red.ty = p->dtype;
  red.kind = SHUNT_RED_PREMULSUM;
  red.arg = 0;
  if (pre)
    red.arg = p->redop == SHUNT_REDOP_PREMULSUM ? shunt_ty_load(run->premul_scalar, p->dtype)
                                                : shunt_avg_scalar(p->dtype, (int)nranks);

  /* Bind the buffers, as the host backend does. Every step is a stream operation. */
  cudaError_t e = cudaSuccess;
#define CU(x)                                                                                \
  do {                                                                                       \
    if ((e = (x)) != cudaSuccess) FAIL(SHUNT_GPU_CUDA, "%s: %s", #x, cudaGetErrorString(e)); \
  } while (0)
  char* out = stage_o ? stage_out : user_out;
  if (stage_o && alias && user_out != stage_out)
    CU(cudaMemcpyAsync(stage_out, user_out, p->out_bytes, cudaMemcpyDefault, stream));
  char* in;
  if (stage_i) {
    in = stage_in;
    const char* src = alias && stage_o ? out + (user_in - user_out) : user_in;
    if (pre) {
      shunt_gpu_pre_kernel<<<elem_grid(p->in_bytes / es), 256, 0, stream>>>(in, src, p->in_bytes / es, red);
      CU(cudaGetLastError());
    } else if (in != src && p->in_bytes) {
      CU(cudaMemcpyAsync(in, src, p->in_bytes, cudaMemcpyDefault, stream));
    }
  } else if (alias) {
    in = out + (user_in - user_out);
    if (pre) {
      shunt_gpu_pre_kernel<<<elem_grid(p->in_bytes / es), 256, 0, stream>>>(in, in, p->in_bytes / es, red);
      CU(cudaGetLastError());
    }
  } else {
    in = (char*)(uintptr_t)user_in; /* read only: no op of a plan writes its input */
  }

  k.prog = gp->dev;
  k.sems = gp->sems;
  k.in = in;
  k.out = out;
  k.port_used = gp->port_used ? 1u : 0u;
  k.in_view = alias ? 1u : 0u;
  shunt_gpu_exec_kernel<<<p->nblocks ? p->nblocks : 1, gp->threads, 0, stream>>>(k);
  CU(cudaGetLastError());
  if (postdiv) {
    struct shunt_red div;
    div.ty = p->dtype;
    div.kind = SHUNT_RED_SUMPOSTDIV;
    div.arg = nranks;
    shunt_gpu_post_kernel<<<elem_grid(p->out_bytes / es), 256, 0, stream>>>(out, p->out_bytes / es, div);
    CU(cudaGetLastError());
  }
  if (out != user_out && p->out_bytes)
    CU(cudaMemcpyAsync(user_out, out, p->out_bytes, cudaMemcpyDefault, stream));
#undef CU
  return SHUNT_GPU_OK;
}
