#include "exec/gpu/gpu_kernels.h"

#include <pthread.h>
#include <stdio.h>

#include "util/status.h"

#define MAX_DEVICES 64

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
/* Per device ordinal, the module of the context it was loaded in: a module dies with its
 * context, and a primary context reset (cudaDeviceReset) or released by all its retainers
 * comes back as a new context, under the same handle but with a new identity (cuCtxGetId).
 * A module is kept for the life of its context, as the runtime keeps its own. */
static struct shunt_gpu_kernels loaded[MAX_DEVICES];
static int have[MAX_DEVICES];
static CUcontext loaded_ctx[MAX_DEVICES];
static unsigned long long loaded_id[MAX_DEVICES];

static int load(const struct shunt_cu* cu, struct shunt_gpu_kernels* k, char* err, size_t len) {
  size_t bytes = 0;
  int built = 0;
  const void* image = shunt_gpu_image(&bytes, &built);
  CUmodule mod = NULL;
  CUresult e = cu->ModuleLoadData(&mod, image);
  if (e != CUDA_SUCCESS) {
    snprintf(err, len, "loading the GPU kernels: %s%s", shunt_cu_error(e),
             built ? "" : " (libshunt was built without nvcc: it has no GPU kernels)");
    return SHUNT_E_CUDA;
  }
  static const char* const names[] = {"shunt_gpu_exec_kernel", "shunt_gpu_pre_kernel", "shunt_gpu_post_kernel",
                                      "shunt_gpu_check_kernel"};
  CUfunction* fns[] = {&k->exec, &k->pre, &k->post, &k->check};
  for (int i = 0; i < 4; i++) {
    int attr = 0;
    if ((e = cu->ModuleGetFunction(fns[i], mod, names[i])) != CUDA_SUCCESS ||
        (e = cu->FuncGetAttribute(&attr, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, *fns[i])) != CUDA_SUCCESS) {
      snprintf(err, len, "GPU kernel %s: %s", names[i], shunt_cu_error(e));
      return SHUNT_E_CUDA;
    }
  }
  return 0;
}

int shunt_gpu_kernels_get(const struct shunt_cu* cu, CUdevice dev, struct shunt_gpu_kernels* out, char* err,
                          size_t len) {
  if (dev < 0 || dev >= MAX_DEVICES) {
    snprintf(err, len, "device %d: at most %d devices are supported", dev, MAX_DEVICES);
    return SHUNT_E_INVALID;
  }
  /* The current context (the device's primary one) and its identity: without cuCtxGetId (a
   * driver before CUDA 12) a reset under the same handle cannot be told apart. */
  CUcontext ctx = NULL;
  unsigned long long id = 0;
  CUresult e = cu->CtxGetCurrent(&ctx);
  if (e == CUDA_SUCCESS && !ctx) e = CUDA_ERROR_INVALID_CONTEXT;
  if (e == CUDA_SUCCESS && cu->CtxGetId) e = cu->CtxGetId(ctx, &id);
  if (e != CUDA_SUCCESS) {
    snprintf(err, len, "device %d: no current context to load the GPU kernels in: %s", dev,
             shunt_cu_error(e));
    return SHUNT_E_CUDA;
  }
  pthread_mutex_lock(&mu);
  int rc = 0;
  if (!have[dev] || loaded_ctx[dev] != ctx || loaded_id[dev] != id) {
    have[dev] = 0;
    rc = load(cu, &loaded[dev], err, len);
    if (rc == 0) have[dev] = 1, loaded_ctx[dev] = ctx, loaded_id[dev] = id;
  }
  if (rc == 0) *out = loaded[dev];
  pthread_mutex_unlock(&mu);
  return rc;
}

int shunt_gpu_coresident_blocks(const struct shunt_cu* cu, const struct shunt_gpu_kernels* k, CUdevice dev,
                                uint32_t threads, uint32_t smem, uint32_t* out) {
  int per_sm = 0, sms = 0;
  if (cu->DeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev) != CUDA_SUCCESS)
    return SHUNT_E_CUDA;
  if (cu->OccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k->exec, (int)threads, smem) != CUDA_SUCCESS)
    return SHUNT_E_CUDA;
  *out = (uint32_t)per_sm * (uint32_t)sms;
  return 0;
}
