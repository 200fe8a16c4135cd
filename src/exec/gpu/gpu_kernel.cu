/* The launcher of the GPU backend (gpu_run.h) and the kernels' CUDA build (gpu_kernel.cuh).
 * CUDA C with C linkage for everything the host code calls. */
#include <stdio.h>
#include <string.h>

#include "exec/gpu/gpu_kernel.cuh"
#include "exec/gpu/gpu_run.h"
#include "exec/gpu/gpu_steps.h"

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

extern "C" int shunt_gpu_coresident_blocks(int device, uint32_t threads, uint32_t smem, uint32_t* out) {
  int per_sm = 0, sms = 0, cur = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) return -1;
  /* The occupancy query answers for the calling thread's current device: ask on `device`. */
  if (cudaGetDevice(&cur) != cudaSuccess) return -1;
  if (cur != device && cudaSetDevice(device) != cudaSuccess) return -1;
  cudaError_t e =
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, shunt_gpu_exec_kernel, (int)threads, smem);
  if (cur != device) cudaSetDevice(cur);
  if (e != cudaSuccess) return -1;
  *out = (uint32_t)per_sm * (uint32_t)sms;
  return 0;
}

/* Every step is a stream operation, in gpu_steps.h's order. */
static int enqueue(struct shunt_gpu_steps st, struct shunt_gpu_kargs k, const struct shunt_gpu_prog* gp,
                   const struct shunt_program* p, cudaStream_t stream, char* err, size_t len) {
  cudaError_t e = cudaSuccess;
#define CU(x)                                                                                \
  do {                                                                                       \
    if ((e = (x)) != cudaSuccess) FAIL(SHUNT_GPU_CUDA, "%s: %s", #x, cudaGetErrorString(e)); \
  } while (0)
  if (st.seed_bytes) CU(cudaMemcpyAsync(st.seed_dst, st.seed_src, st.seed_bytes, cudaMemcpyDefault, stream));
  /* cudaLaunchKernel returns this launch's own error: cudaGetLastError after a <<<>>> launch
   * would also return an error an earlier, unrelated call of the process left behind. */
  if (st.pre_n) {
    void* a[] = {&st.pre_dst, &st.pre_src, &st.pre_n, &st.pre_red};
    CU(cudaLaunchKernel((const void*)shunt_gpu_pre_kernel, elem_grid(st.pre_n), 256, a, 0, stream));
  }
  if (st.copy_in_bytes)
    CU(cudaMemcpyAsync(st.copy_in_dst, st.copy_in_src, st.copy_in_bytes, cudaMemcpyDefault, stream));
  shunt_gpu_kargs_run(&k, gp->dev, gp->sems, &st, gp->port_used, gp->smem);
  void* ka[] = {&k};
  CU(cudaLaunchKernel((const void*)shunt_gpu_exec_kernel, p->nblocks ? p->nblocks : 1, gp->threads, ka,
                      gp->smem, stream));
  if (st.post_n) {
    void* a[] = {&st.out, &st.post_n, &st.post_red};
    CU(cudaLaunchKernel((const void*)shunt_gpu_post_kernel, elem_grid(st.post_n), 256, a, 0, stream));
  }
  if (st.back_bytes) CU(cudaMemcpyAsync(st.back_dst, st.back_src, st.back_bytes, cudaMemcpyDefault, stream));
#undef CU
  return SHUNT_GPU_OK;
}

extern "C" int shunt_gpu_launch(const struct shunt_gpu_run* run, cudaStream_t stream, char* err, size_t len) {
  if (err && len) err[0] = 0;
  if (!run || !run->world || !run->prog || !run->prog->host || !run->prog->dev)
    FAIL(SHUNT_GPU_INVALID, "no world or no program");
  struct shunt_gpu_world* w = run->world;
  const struct shunt_gpu_prog* gp = run->prog;
  const struct shunt_program* p = gp->host;
  struct shunt_gpu_kargs k;
  memset(&k, 0, sizeof(k));
  shunt_gpu_world_kargs(w, &k);
  if (!shunt_gpu_prog_fits(p, k.rank, k.nranks, &k.lay, err, len)) return SHUNT_GPU_INVALID;
  if (shunt_gpu_world_broken(w)) FAIL(SHUNT_GPU_INVALID, "an earlier run on this world failed");
  /* The kernel and the staging copies go to the calling thread's current device, and every
   * address in them (region, peers, FIFO) belongs to the world's. */
  int cur_dev = -1;
  if (cudaGetDevice(&cur_dev) != cudaSuccess || cur_dev != shunt_gpu_world_device(w))
    FAIL(SHUNT_GPU_INVALID, "the current device is %d, the world's is %d", cur_dev,
         shunt_gpu_world_device(w));

  struct shunt_gpu_steps st;
  const char* why =
      shunt_gpu_steps_plan(p, k.nranks, run->in, run->out, run->premul_scalar, shunt_gpu_world_stage(w, 0),
                           shunt_gpu_world_stage(w, 1), k.lay.input_bytes, k.lay.output_bytes, &st);
  if (why)
    FAIL(SHUNT_GPU_INVALID, "%s (buffers of %llu/%llu bytes, staging %llu/%llu)", why,
         (unsigned long long)p->in_bytes, (unsigned long long)p->out_bytes,
         (unsigned long long)k.lay.input_bytes, (unsigned long long)k.lay.output_bytes);

  /* One launch of a world at a time, after the previous one whatever its stream. */
  if (shunt_gpu_world_order_begin(w, stream, err, len) != 0) return SHUNT_GPU_CUDA;
  int rc = enqueue(st, k, gp, p, stream, err, len);
  if (shunt_gpu_world_order_end(w, stream, rc == SHUNT_GPU_OK, err, len) != 0 && rc == SHUNT_GPU_OK)
    rc = SHUNT_GPU_CUDA;
  return rc;
}
