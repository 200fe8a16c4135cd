/* The stand-in's co-residency rule (tests/fakecuda/README.md): a kernel whose blocks find no free
 * slot on its device waits, before it runs, until another kernel (here another application's,
 * fakecuda_occupy) gives slots back; another device's kernels do not wait. Run with
 * FAKECUDA_DEVICES=2. */
#include <stdint.h>
#include <time.h>

#include "common/check.h"
#include "fakecuda/fake_cuda_api.h"

int cuDevicePrimaryCtxRelease_v2(int dev);
int cuDeviceGetAttribute(int* v, int attr, int dev);
int cuModuleLoadData(fc_handle* mod, const void* image);
int cuModuleGetFunction(fc_handle* f, fc_handle mod, const char* name);
int cuLaunchKernel(fc_handle f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned smem, fc_handle stream, void** params, void** extra);
int cuStreamQuery(fc_handle s);
int fakecuda_occupy(int device, int slots, int ms);
int fakecuda_resident_slots(int device);

#define NOT_READY 600
#define BUSY_MS 400

static const char ptx[] =
    ".version 7.0\n.target sm_70\n.address_size 64\n.visible .entry shunt_bench_empty()\n{\n\tret;\n}\n";

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Launches the empty kernel on device dev while device 0 is full; the ms until it completed. */
static double launch_ms(int dev, int* ready_at_once) {
  fc_handle ctx = NULL, st = NULL, mod = NULL, f = NULL;
  CHECK_EQ_INT(cuDevicePrimaryCtxRetain(&ctx, dev), 0);
  CHECK_EQ_INT(cuCtxSetCurrent(ctx), 0);
  CHECK_EQ_INT(cuStreamCreate(&st, 1), 0);
  CHECK_EQ_INT(cuModuleLoadData(&mod, ptx), 0);
  CHECK_EQ_INT(cuModuleGetFunction(&f, mod, "shunt_bench_empty"), 0);
  double t0 = now_ms();
  CHECK_EQ_INT(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, st, NULL, NULL), 0);
  struct timespec pause = {0, 50 * 1000000L};
  nanosleep(&pause, NULL);
  *ready_at_once = cuStreamQuery(st) == 0;
  CHECK_EQ_INT(cuStreamSynchronize(st), 0);
  double ms = now_ms() - t0;
  CHECK_EQ_INT(cuStreamDestroy_v2(st), 0);
  CHECK_EQ_INT(cuCtxSetCurrent(NULL), 0);
  CHECK_EQ_INT(cuDevicePrimaryCtxRelease_v2(dev), 0);
  return ms;
}

int main(void) {
  CHECK_EQ_INT(cuInit(0), 0);
  int sms = 0;
  CHECK_EQ_INT(cuDeviceGetAttribute(&sms, 16 /* multiprocessor count */, 0), 0);
  int slots = sms * 16;
  /* Every slot of device 0 held for a while. */
  CHECK_EQ_INT(fakecuda_occupy(0, slots, BUSY_MS), 0);
  CHECK_EQ_INT(fakecuda_resident_slots(0), slots);
  int ready = 0;
  /* Device 1 is idle: its kernel runs at once. */
  double other = launch_ms(1, &ready);
  CHECK_MSG(ready, "device 1's kernel waited for device 0's slots (%.0f ms)", other);
  /* Device 0's kernel waits until the slots are given back. */
  double waited = launch_ms(0, &ready);
  CHECK_MSG(!ready, "device 0's kernel ran while every block slot was held");
  CHECK_MSG(waited >= BUSY_MS - 100, "device 0's kernel completed after %.0f ms, before the slots were free",
            waited);
  CHECK_EQ_INT(fakecuda_resident_slots(0), 0);
  CHECK_DONE();
}
