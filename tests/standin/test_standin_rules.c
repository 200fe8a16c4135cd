/* The stand-in's own rules (tests/fakecuda/README.md), each asked directly: what a driver call
 * returns where CUDA refuses it. Run with FAKECUDA_DEVICES=2. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "fakecuda/fake_cuda_api.h"

int cuDevicePrimaryCtxRelease_v2(int dev);
int cuDevicePrimaryCtxReset_v2(int dev);
int cuCtxGetId(fc_handle ctx, unsigned long long* id);
int cuDeviceGetCount(int* n);
int cuDeviceGetP2PAttribute(int* v, int attr, int a, int b);
int cuDeviceGetAttribute(int* v, int attr, int dev);
int cuMemHostAlloc(void** p, size_t bytes, unsigned flags);
int cuMemFreeHost(void* p);
int cuMemHostGetDevicePointer_v2(unsigned long long* d, void* p, unsigned flags);
int cuEventCreate(fc_handle* e, unsigned flags);
int cuEventRecord(fc_handle e, fc_handle stream);
int cuEventQuery(fc_handle e);
int cuEventSynchronize(fc_handle e);
int cuEventDestroy_v2(fc_handle e);
int cuEventElapsedTime_v2(float* ms, fc_handle a, fc_handle b);
int cuMemsetD8Async(unsigned long long dst, unsigned char v, size_t n, fc_handle stream);
int cuThreadExchangeStreamCaptureMode(int* mode);
int cuModuleLoadData(fc_handle* mod, const void* image);
int cuModuleGetFunction(fc_handle* f, fc_handle mod, const char* name);
int cuLaunchKernel(fc_handle f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned smem, fc_handle stream, void** params, void** extra);
int fakecuda_primary_retains(int device);

enum {
  NOT_INITIALIZED = 3,
  INVALID_VALUE = 1,
  INVALID_IMAGE = 200,
  INVALID_CONTEXT = 201,
  INVALID_HANDLE = 400,
  NOT_FOUND = 500,
  CAPTURE_UNSUPPORTED = 900,
  CAPTURE_INVALIDATED = 901,
  CAPTURE_IMPLICIT = 906
};

static const char ptx[] =
    ".version 7.0\n.target sm_70\n.address_size 64\n.visible .entry shunt_gpu_pre_kernel()\n{\n\tret;\n}\n";

int main(void) {
  int n = 0;
  fc_handle ctx = NULL, st = NULL, blocking = NULL, ev = NULL, g = NULL, mod = NULL, f = NULL;
  /* cuInit first. */
  CHECK_EQ_INT(cuDeviceGetCount(&n), NOT_INITIALIZED);
  CHECK_EQ_INT(cuDevicePrimaryCtxRetain(&ctx, 0), NOT_INITIALIZED);
  CHECK_EQ_INT(cuInit(0), 0);
  CHECK_EQ_INT(cuDeviceGetCount(&n), 0);
  CHECK_EQ_INT(n, 2);
  /* A current context where the driver needs one. */
  unsigned long long d = 0;
  void* h = NULL;
  CHECK_EQ_INT(cuMemAlloc_v2(&d, 64), INVALID_CONTEXT);
  CHECK_EQ_INT(cuMemHostAlloc(&h, 64, 0), INVALID_CONTEXT);
  CHECK_EQ_INT(cuStreamCreate(&st, 1), INVALID_CONTEXT);
  CHECK_EQ_INT(cuEventCreate(&ev, 2), INVALID_CONTEXT);
  CHECK_EQ_INT(cuModuleLoadData(&mod, ptx), INVALID_CONTEXT);
  /* Counted retains; the last release makes a new context under the same handle. */
  int before = fakecuda_primary_retains(0);
  unsigned long long id0 = 0, id1 = 0;
  CHECK_EQ_INT(cuDevicePrimaryCtxRetain(&ctx, 0), 0);
  CHECK_EQ_INT(fakecuda_primary_retains(0), before + 1);
  CHECK_EQ_INT(cuCtxGetId(ctx, &id0), 0);
  CHECK_EQ_INT(cuDevicePrimaryCtxRelease_v2(0), 0);
  CHECK_EQ_INT(cuDevicePrimaryCtxRelease_v2(0), INVALID_CONTEXT);
  CHECK_EQ_INT(cuDevicePrimaryCtxRetain(&ctx, 0), 0);
  CHECK_EQ_INT(cuCtxGetId(ctx, &id1), 0);
  CHECK_MSG(id0 != id1, "the primary context released by all came back as the same context");
  CHECK_EQ_INT(cuCtxSetCurrent(ctx), 0);
  /* Mapped pinned memory needs DEVICEMAP. */
  CHECK_EQ_INT(cuMemHostAlloc(&h, 64, 1 /* PORTABLE */), 0);
  CHECK_EQ_INT(cuMemHostGetDevicePointer_v2(&d, h, 0), INVALID_VALUE);
  CHECK_EQ_INT(cuMemFreeHost(h), 0);
  CHECK_EQ_INT(cuMemHostAlloc(&h, 64, 2 /* DEVICEMAP */), 0);
  CHECK_EQ_INT(cuMemHostGetDevicePointer_v2(&d, h, 0), 0);
  CHECK_EQ_INT(cuMemFreeHost(h), 0);
  /* Unknown handles. */
  int token = 0;
  CHECK_EQ_INT(cuStreamCreate(&st, 1), 0);
  CHECK_EQ_INT(cuEventRecord((fc_handle)&token, st), INVALID_HANDLE);
  CHECK_EQ_INT(cuStreamSynchronize((fc_handle)&token), INVALID_HANDLE);
  /* Images: the placeholder a build without nvcc carries does not load; PTX does, and holds
   * only the kernels it names; a launch passes every declared parameter. */
  CHECK_EQ_INT(cuModuleLoadData(&mod, "shunt: built without nvcc, no GPU kernels"), INVALID_IMAGE);
  CHECK_EQ_INT(cuModuleLoadData(&mod, ptx), 0);
  CHECK_EQ_INT(cuModuleGetFunction(&f, mod, "shunt_gpu_exec_kernel"), NOT_FOUND);
  CHECK_EQ_INT(cuModuleGetFunction(&f, mod, "shunt_gpu_pre_kernel"), 0);
  CHECK_EQ_INT(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, st, NULL, NULL), INVALID_VALUE);
  void* three[] = {&d, &d, &d, NULL};
  CHECK_EQ_INT(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, st, three, NULL), INVALID_VALUE);
  /* A module of a context that was reset is gone. */
  CHECK_EQ_INT(cuDevicePrimaryCtxReset_v2(0), 0);
  CHECK_EQ_INT(cuModuleGetFunction(&f, mod, "shunt_gpu_pre_kernel"), INVALID_HANDLE);
  /* Capture in global mode: an unsafe call from a thread not relaxed fails and invalidates. */
  CHECK_EQ_INT(cuMemAlloc_v2(&d, 256), 0);
  CHECK_EQ_INT(cuEventCreate(&ev, 2), 0);
  CHECK_EQ_INT(cuEventRecord(ev, st), 0);
  CHECK_EQ_INT(cuStreamCreate(&blocking, 0), 0);
  CHECK_EQ_INT(cuStreamBeginCapture_v2(st, 0), 0);
  CHECK_EQ_INT(cuEventQuery(ev), CAPTURE_UNSUPPORTED);
  CHECK_EQ_INT(cuStreamEndCapture(st, &g), CAPTURE_INVALIDATED);
  CHECK_EQ_INT(cuStreamBeginCapture_v2(st, 0), 0);
  CHECK_EQ_INT(cuEventSynchronize(ev), CAPTURE_UNSUPPORTED);
  CHECK_EQ_INT(cuStreamEndCapture(st, &g), CAPTURE_INVALIDATED);
  /* ... and in relaxed mode it is allowed, and the capture stays valid. */
  CHECK_EQ_INT(cuStreamBeginCapture_v2(st, 0), 0);
  int mode = 2;
  CHECK_EQ_INT(cuThreadExchangeStreamCaptureMode(&mode), 0);
  CHECK_EQ_INT(cuEventSynchronize(ev), 0);
  CHECK_EQ_INT(cuThreadExchangeStreamCaptureMode(&mode), 0);
  CHECK_EQ_INT(cuStreamEndCapture(st, &g), 0);
  CHECK_EQ_INT(cuGraphDestroy(g), 0);
  /* Legacy-stream work while a blocking stream captures: CAPTURE_IMPLICIT, in any mode. */
  CHECK_EQ_INT(cuStreamBeginCapture_v2(blocking, 2 /* relaxed */), 0);
  CHECK_EQ_INT(cuMemsetD8Async(d, 1, 256, NULL), CAPTURE_IMPLICIT);
  CHECK_EQ_INT(cuStreamEndCapture(blocking, &g), CAPTURE_INVALIDATED);
  /* A non-blocking stream's capture does not mind the legacy stream. */
  CHECK_EQ_INT(cuStreamBeginCapture_v2(st, 2), 0);
  CHECK_EQ_INT(cuMemsetD8Async(d, 1, 256, NULL), 0);
  CHECK_EQ_INT(cuStreamEndCapture(st, &g), 0);
  CHECK_EQ_INT(cuGraphDestroy(g), 0);
  /* cuEventElapsedTime: an invalid handle for an event never recorded, or made with
   * CU_EVENT_DISABLE_TIMING (ev); the time once both records completed. */
  fc_handle t0 = NULL, t1 = NULL;
  float ms = -1;
  CHECK_EQ_INT(cuEventCreate(&t0, 0), 0);
  CHECK_EQ_INT(cuEventCreate(&t1, 0), 0);
  CHECK_EQ_INT(cuEventRecord(t0, st), 0);
  CHECK_EQ_INT(cuEventElapsedTime_v2(&ms, t0, t1), INVALID_HANDLE);
  CHECK_EQ_INT(cuEventRecord(t1, st), 0);
  CHECK_EQ_INT(cuStreamSynchronize(st), 0);
  CHECK_EQ_INT(cuEventElapsedTime_v2(&ms, t0, t1), 0);
  CHECK(ms >= 0);
  CHECK_EQ_INT(cuEventElapsedTime_v2(&ms, ev, t1), INVALID_HANDLE);
  cuEventDestroy_v2(t0);
  cuEventDestroy_v2(t1);
  /* Peers per pair, MPS state. */
  int v = -1;
  CHECK_EQ_INT(cuDeviceGetP2PAttribute(&v, 3 /* native atomics */, 0, 1), 0);
  CHECK_EQ_INT(v, getenv("FAKECUDA_PEER_ATOMICS") ? 0 : 1);
  CHECK_EQ_INT(cuDeviceGetAttribute(&v, 133 /* MPS enabled */, 0), 0);
  CHECK_EQ_INT(v, 0);
  CHECK_EQ_INT(cuStreamSynchronize(NULL), 0);
  cuEventDestroy_v2(ev);
  cuStreamDestroy_v2(st);
  cuStreamDestroy_v2(blocking);
  cuMemFree_v2(d);
  CHECK_EQ_INT(cuDevicePrimaryCtxRelease_v2(0), 0);
  CHECK_EQ_INT(fakecuda_primary_retains(0), before);
  CHECK_DONE();
}
