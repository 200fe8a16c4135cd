/* The executor kernel and the avg/PreMulSum scaling kernels, written once: gpu_kernel.cu
 * compiles them with nvcc, exec/kcpu/kcpu_kernel.cpp with a host C++ compiler (each device
 * thread a fiber of a host thread), so the code that runs on the GPU is the code CI runs on the
 * CPU.
 *
 * Promises:
 * - shunt_gpu_exec_kernel runs the program's blocks (one CUDA block per plan threadblock, any
 *   number of threads per block); the block that finishes last resets the per-execution state
 *   (barriers, semaphores) and advances the rank's epoch, so a replayed launch needs nothing
 *   from the host. A failed execution never advances the epoch. An execution that ends
 *   (finished, or skipped by a broken world) adds one to the FIFO's finished count.
 * - shunt_gpu_pre_kernel / shunt_gpu_post_kernel scale one contribution (PreMulSum, floating
 *   avg) or divide a sum (integer avg) element by element, grid-stride.
 * Only for inclusion by gpu_kernel.cu and kcpu_kernel.cpp, after the primitives
 * (gpu_xctx.cuh pulls in gpu_device.cuh under nvcc; the CPU build includes its shim first). */
#ifndef SHUNT_EXEC_GPU_KERNEL_CUH
#define SHUNT_EXEC_GPU_KERNEL_CUH

#include <string.h>

#include "exec/gpu/gpu_selfcheck_values.h"
#include "exec/gpu/gpu_xctx.cuh"

/* Counts an ended execution where the proxy reads it: the count kept in device memory, its new
 * value stored into the FIFO (mapped host memory) with a plain system-scope store, since an
 * atomic on mapped host memory is not one across PCIe. One thread per execution writes both. */
XG_FN void shunt_gpu_count_ended(struct shunt_gpu_ctrl* ctrl, const struct shunt_gpu_kargs* k) {
  uint64_t n = xg_ld_vol_u64(&ctrl->ended) + 1;
  xg_st_vol_u64(&ctrl->ended, n);
  __threadfence_system();
  xg_st_release_sys(&k->fifo->finished, n);
}

/* Work of the block that finishes last: every block has read the epoch and finished its ops,
 * so the per-execution state can be reset for the next execution and the epoch advanced. */
static __device__ void shunt_gpu_finish(struct shunt_xctx* X, struct shunt_gpu_ctrl* ctrl, uint64_t epoch) {
  const struct shunt_gpu_kargs* k = X->k;
  if (k->port_used && xg_ld_vol_u64(&ctrl->fifo_head) > xg_ld_vol_u64(&ctrl->fifo_synced)) {
    /* Every trigger of this execution must be complete before the stream moves on (staging
     * copies, the next call reusing the source buffers): one SYNC trigger drains the FIFO,
     * unless nothing went to the proxy since its last completion this kernel saw (puts to
     * peers this process maps are the block's own copies, done by now). Pushed into the FIFO
     * whatever its peer: as a trigger to this rank, xb_port would take it for one the block
     * serves itself, and the kernel would end with the proxy still reading its sources. */
    struct shunt_trigger t;
    memset(&t, 0, sizeof(t));
    t.type = SHUNT_TRIG_SYNC;
    t.peer = (uint16_t)k->rank;
    X->op = shunt_prog_blocks(X->prog)[X->block].nops;
    if (xg_port_push(X, 0, &t, true)) return;
  }
  for (unsigned i = 0; i < SHUNT_GPU_BARRIERS; i++) ctrl->bars[i] = 0;
  /* Plans leave their semaphores as they found them (checked at load); restoring the initial
   * values keeps the next execution right even after a plan that did not. */
  const int64_t* init = shunt_prog_sem_init(X->prog);
  for (uint32_t i = 0; i < X->prog->nsems; i++) k->sems[i] = (long long)init[i];
  xg_st_vol_u32(&ctrl->done_blocks, 0);
  __threadfence();
  xg_st_vol_u64(&ctrl->epoch, epoch + 1);
  __threadfence_system();
  shunt_gpu_count_ended(ctrl, k);
}

/* The reduction a program's reduce steps apply, read from its header's codes (util/vocab.h): the
 * kernel's one reading of them, which tests/ops/test_vocab.c compares with the host's. */
SHUNT_HD struct shunt_red shunt_gpu_prog_red(const struct shunt_program* P) {
  struct shunt_red r = {shunt_dtype_from_code(P->dtype), shunt_red_step_kind(shunt_redop_from_code(P->redop)), 0};
  return r;
}

SHUNT_GPU_ENTRY __launch_bounds__(SHUNT_GPU_MAX_THREADS, 1)
    shunt_gpu_exec_kernel(const __grid_constant__ struct shunt_gpu_kargs k) {
  /* A graph replayed after its communicator ended: its world's peers are unmapped, its program
   * and region kept only so that this read and the graph's copies touch live memory. */
  if (k.host_gate && __syncthreads_or(threadIdx.x == 0 && xg_host_aborted(&k))) return;
  const struct shunt_program* P = k.prog;
  if (k.prog_smem) {
    /* Every op reads its program entry, refs and channels: from shared memory, not global. The
     * program is position-independent (offsets from its header) and 16-byte padded. */
    XG_DYN_SHARED(smem);
    const int4* src = (const int4*)k.prog;
    for (uint32_t i = threadIdx.x; i < k.prog_smem / 16u; i += blockDim.x) smem[i] = src[i];
    __syncthreads();
    P = (const struct shunt_program*)smem;
  }
  struct shunt_gpu_ctrl* ctrl = (struct shunt_gpu_ctrl*)(k.region + k.lay.ctrl);
  struct shunt_xctx X;
  X.prog = P;
  X.block = blockIdx.x;
  X.tid = threadIdx.x;
  X.nthreads = blockDim.x;
  X.op = 0;
  X.k = &k;
  if (xg_ld_vol_u32(k.abort)) {
    /* A broken world: do nothing, but say so, so that the host does not take the output. */
    if (blockIdx.x == 0 && threadIdx.x == 0) {
      struct xg_spin s = {0, 0, 1};
      xg_blocked(&X, &s, SHUNT_GPU_WAIT_NONE, 0, 0, 0, 0, 1, 0);
      shunt_gpu_count_ended(ctrl, &k);
    }
    return;
  }
  /* No block advances the epoch before every block has read it (the completion count below). */
  uint64_t epoch = xg_ld_vol_u64(&ctrl->epoch);
  if (P->nblocks == 0) {
    /* A rank with nothing to do still counts the execution, so its flags stay in step with
     * its peers' (launched with one block). */
    if (threadIdx.x == 0) {
      xg_st_vol_u64(&ctrl->epoch, epoch + 1);
      shunt_gpu_count_ended(ctrl, &k);
    }
    return;
  }
  X.flag = shunt_pkt_flag_for_epoch(epoch);
  X.half = shunt_scratch_at(X.flag, k.lay.scratch_bytes, P->ll, P->double_scratch);
  X.scratch0 = k.region + k.lay.scratch;
  X.base[0] = k.in;
  X.base[1] = k.out;
  X.base[2] = X.scratch0 + X.half;
  X.ll8 = P->pkt == SHUNT_PKT_LL8;
  X.red = shunt_gpu_prog_red(P);

  /* A thread that gave up has recorded why and raised the abort word; it leaves (an exited
   * thread no longer holds up its block's barriers). The thread that gave up need not be
   * thread 0, which may well finish its ops and get here: it looks at the abort word (written
   * and fenced before the failing thread exited, so before the barrier below released), and a
   * block of a failed execution never counts as done, so a failed execution never advances
   * the epoch. */
  if (shunt_x_block(&X)) return;
  __syncthreads();
  if (threadIdx.x != 0) return;
  if (xg_ld_vol_u32(k.abort)) return;
  __threadfence();
  unsigned prev = atomicAdd(&ctrl->done_blocks, 1u);
  if (prev != gridDim.x - 1) return;
  __threadfence();
  shunt_gpu_finish(&X, ctrl, epoch);
}

/* dst[i] = pre(src[i]): PreMulSum / floating avg scaling of one contribution. */
SHUNT_GPU_ENTRY shunt_gpu_pre_kernel(char* dst, const char* src, uint64_t n, struct shunt_red red,
                                     const void* scalar) {
  /* A device-resident PreMulSum scalar is read now, in stream order, as NCCL reads it. */
  if (scalar) red.arg = shunt_dtype_load(scalar, red.ty);
  uint64_t es = shunt_dtype_size(red.ty);
  for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (uint64_t)gridDim.x * blockDim.x)
    shunt_dtype_store(dst + i * es, red.ty, shunt_pre_elem(&red, shunt_dtype_load(src + i * es, red.ty)));
}

/* The self-check's comparison on the device: *first becomes the smallest index i < n where out
 * differs bitwise from the expected result of `kind` (gpu_selfcheck_values.h); it starts at ~0. */
SHUNT_GPU_ENTRY shunt_gpu_check_kernel(const float* out, uint64_t n, uint64_t per, uint32_t nranks,
                                       uint32_t kind, unsigned long long* first) {
  for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (uint64_t)gridDim.x * blockDim.x) {
    float want = shunt_selfcheck_expected(nranks, per, kind, i);
    if (__float_as_uint(out[i]) != __float_as_uint(want)) atomicMin(first, (unsigned long long)i);
  }
}

/* buf[i] = post(buf[i]): integer avg's division. */
SHUNT_GPU_ENTRY shunt_gpu_post_kernel(char* buf, uint64_t n, struct shunt_red red) {
  uint64_t es = shunt_dtype_size(red.ty);
  for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (uint64_t)gridDim.x * blockDim.x)
    shunt_dtype_store(buf + i * es, red.ty, shunt_post_elem(&red, shunt_dtype_load(buf + i * es, red.ty)));
}

#endif
