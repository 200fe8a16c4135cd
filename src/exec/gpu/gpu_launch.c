/* The launcher of the GPU backend (gpu_run.h): stream operations through the driver. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "transport/cu.h"
#include "exec/gpu/gpu_kernels.h"
#include "exec/gpu/gpu_run.h"
#include "exec/gpu/gpu_steps.h"
#include "util/status.h"

#define DP(p) ((CUdeviceptr)(uintptr_t)(p))

static unsigned elem_grid(uint64_t n) {
  uint64_t g = (n + 255) / 256;
  return (unsigned)(g == 0 ? 1 : g > 1024 ? 1024 : g);
}

/* Every step is a stream operation, in exec/steps.h's order. cuLaunchKernel returns this
 * launch's own error (no error state is left behind for later calls to find). A failure is
 * SHUNT_E_CUDA naming the driver call and the step ("cuLaunchKernel(exec): CUDA_ERROR_..."). */
static int enqueue(struct shunt_gpu_world* w, const struct shunt_cu* cu, const struct shunt_gpu_kernels* fn,
                   struct shunt_steps st, struct shunt_gpu_kargs k, struct shunt_gpu_prog* gp,
                   const struct shunt_program* p, const struct shunt_gpu_run* zc, CUstream stream, char* err,
                   size_t len) {
  CUresult e = CUDA_SUCCESS;
#define CU(call, x)                                                                             \
  do {                                                                                          \
    if ((e = (x)) != CUDA_SUCCESS) SHUNT_FAIL(SHUNT_E_CUDA, "%s: %s", call, shunt_cu_error(e)); \
  } while (0)
  if (!gp->uploaded) {
    int cs = CU_STREAM_CAPTURE_STATUS_NONE;
    if (cu->StreamIsCapturing(stream, &cs) != CUDA_SUCCESS) cs = CU_STREAM_CAPTURE_STATUS_NONE;
    SHUNT_TRY(shunt_gpu_prog_upload(gp, stream, cs != CU_STREAM_CAPTURE_STATUS_NONE, err, len));
  }
  if (st.seed_bytes)
    CU("cuMemcpyAsync(seed)", cu->MemcpyAsync(DP(st.seed_dst), DP(st.seed_src), st.seed_bytes, stream));
  if (st.pre_n) {
    void* a[] = {&st.pre_dst, &st.pre_src, &st.pre_n, &st.pre_red, &st.pre_scalar};
    CU("cuLaunchKernel(pre)",
       cu->LaunchKernel(fn->pre, elem_grid(st.pre_n), 1, 1, 256, 1, 1, 0, stream, a, NULL));
  }
  if (st.copy_in_bytes)
    CU("cuMemcpyAsync(copy in)",
       cu->MemcpyAsync(DP(st.copy_in_dst), DP(st.copy_in_src), st.copy_in_bytes, stream));
  shunt_gpu_kargs_run(&k, gp->dev, gp->sems, &st, gp->port_used, gp->smem);
  if (st.zc_in) k.zc_in = zc->zc_in, k.zc_in_off = zc->zc_in_off;
  if (st.zc_out) k.zc_out = zc->zc_out, k.zc_out_off = zc->zc_out_off;
  void* ka[] = {&k};
  bool graph = shunt_gpu_world_expect(w, stream);
  k.host_gate = graph;
  e = cu->LaunchKernel(fn->exec, p->nblocks ? p->nblocks : 1, 1, 1, gp->threads, 1, 1, gp->smem, stream, ka,
                       NULL);
  if (e != CUDA_SUCCESS) {
    shunt_gpu_world_unexpect(w, graph);
    SHUNT_FAIL(SHUNT_E_CUDA, "cuLaunchKernel(exec): %s", shunt_cu_error(e));
  }
  if (st.post_n) {
    void* a[] = {&st.out, &st.post_n, &st.post_red};
    CU("cuLaunchKernel(post)",
       cu->LaunchKernel(fn->post, elem_grid(st.post_n), 1, 1, 256, 1, 1, 0, stream, a, NULL));
  }
  if (st.back_bytes)
    CU("cuMemcpyAsync(copy out)", cu->MemcpyAsync(DP(st.back_dst), DP(st.back_src), st.back_bytes, stream));
#undef CU
  return SHUNT_OK;
}

int shunt_gpu_launch(const struct shunt_gpu_run* run, struct CUstream_st* stream, char* err, size_t len) {
  if (err && len) err[0] = 0;
  if (!run || !run->world || !run->prog || !run->prog->host || !run->prog->dev)
    SHUNT_FAIL(SHUNT_E_INVALID, "no world or no program");
  struct shunt_gpu_world* w = run->world;
  struct shunt_gpu_prog* gp = run->prog;
  const struct shunt_program* p = gp->host;
  const struct shunt_cu* cu = shunt_gpu_world_cu(w);
  struct shunt_gpu_kargs k;
  memset(&k, 0, sizeof(k));
  shunt_gpu_world_kargs(w, &k);
  if (run->timeout_ns) k.timeout_ns = run->timeout_ns;
  if (!shunt_gpu_prog_fits(p, k.rank, k.nranks, &k.lay, err, len)) return SHUNT_E_INVALID;
  if (shunt_gpu_world_broken(w)) SHUNT_FAIL(SHUNT_E_INVALID, "an earlier run on this world failed");

  struct shunt_steps st;
  struct shunt_steps_bufs bufs = {run->in,
                                  run->out,
                                  run->premul_scalar,
                                  run->premul_on_device,
                                  shunt_gpu_world_stage(w, 0),
                                  shunt_gpu_world_stage(w, 1),
                                  k.lay.input_bytes,
                                  k.lay.output_bytes,
                                  run->zc_in != NULL,
                                  run->zc_out != NULL};
  const char* why = shunt_steps_plan(p, k.nranks, &bufs, &st);
  if (why)
    SHUNT_FAIL(SHUNT_E_INVALID, "%s (buffers of %llu/%llu bytes, staging %llu/%llu)", why,
               (unsigned long long)p->in_bytes, (unsigned long long)p->out_bytes,
               (unsigned long long)k.lay.input_bytes, (unsigned long long)k.lay.output_bytes);

  /* The kernels and copies go to the world's context (a legacy-default-stream launch takes the
   * current one); the caller's is put back. */
  struct shunt_cu_guard g = shunt_cu_enter(cu, shunt_gpu_world_ctx(w), 0);
  /* One launch of a world at a time, after the previous one whatever its stream. */
  int rc;
  if (run->ordered) {
    rc = enqueue(w, cu, shunt_gpu_world_fns(w), st, k, gp, p, run, stream, err, len);
  } else if ((rc = shunt_gpu_world_order_begin(w, stream, err, len)) == SHUNT_OK) {
    rc = enqueue(w, cu, shunt_gpu_world_fns(w), st, k, gp, p, run, stream, err, len);
    /* A failure of the launch itself is the one reported. */
    char why[256];
    int end = shunt_gpu_world_order_end(w, stream, rc == SHUNT_OK, why, sizeof(why));
    if (end != SHUNT_OK && rc == SHUNT_OK) {
      shunt_setf(err, len, "%s", why);
      rc = end;
    }
  }
  shunt_cu_leave(&g);
  return rc;
}
