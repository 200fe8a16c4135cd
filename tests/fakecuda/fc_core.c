/* The stand-in's devices, contexts, errors and faults (fake_cuda.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake_cuda.h"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int ndev = 1, max_threads = 32, sms = 8, run_threads = 4;
static struct fc_ctx ctxs[FC_MAX_DEVICES];
static __thread struct fc_ctx* current;

static pthread_mutex_t fault_mu = PTHREAD_MUTEX_INITIALIZER;
static int fault_kind;
static long fault_at;

static void parse_fault(const char* v) {
  fault_kind = 0;
  fault_at = 0;
  if (!v || !*v) return;
  if (!strncmp(v, "corrupt:", 8)) fault_kind = 'c', fault_at = atol(v + 8);
  if (!strncmp(v, "skip:", 5)) fault_kind = 's', fault_at = atol(v + 5);
}

static void init(void) {
  const char* v = getenv("FAKECUDA_DEVICES");
  if (v && atoi(v) > 0) ndev = atoi(v) > FC_MAX_DEVICES ? FC_MAX_DEVICES : atoi(v);
  if ((v = getenv("FAKECUDA_MAX_THREADS")) && atoi(v) > 0) max_threads = atoi(v);
  if ((v = getenv("FAKECUDA_SMS")) && atoi(v) > 0) sms = atoi(v);
  if ((v = getenv("FAKECUDA_RUN_THREADS")) && atoi(v) > 0) run_threads = atoi(v);
  for (int d = 0; d < FC_MAX_DEVICES; d++) ctxs[d].device = d;
  parse_fault(getenv("FAKECUDA_FAULT"));
}

static pthread_once_t lenient_once = PTHREAD_ONCE_INIT;
static char lenient_list[512];
static void lenient_init(void) {
  const char* v = getenv("FAKECUDA_LENIENT");
  snprintf(lenient_list, sizeof(lenient_list), ",%s,", v ? v : "");
}
bool fc_lenient(const char* rule) {
  pthread_once(&lenient_once, lenient_init);
  char key[96];
  snprintf(key, sizeof(key), ",%s,", rule);
  return strstr(lenient_list, key) != NULL;
}

int fc_devices(void) {
  pthread_once(&once, init);
  return ndev;
}
int fc_max_threads(void) {
  pthread_once(&once, init);
  return max_threads;
}
int fc_run_threads(void) {
  pthread_once(&once, init);
  return run_threads;
}
struct fc_ctx* fc_ctx_of(int device) {
  return device >= 0 && device < fc_devices() ? &ctxs[device] : NULL;
}
struct fc_ctx* fc_current(void) {
  return current;
}

int fc_fault_for(long n) {
  pthread_once(&once, init);
  pthread_mutex_lock(&fault_mu);
  int k = fault_at == n ? fault_kind : 0;
  pthread_mutex_unlock(&fault_mu);
  return k;
}

/* Sets the fault spec (as FAKECUDA_FAULT) for launches counted from now on. */
FC_EXPORT void fakecuda_fault(const char* spec);

FC_EXPORT int cuInit(unsigned flags) {
  (void)flags;
  pthread_once(&once, init);
  return FC_SUCCESS;
}
FC_EXPORT int cuDriverGetVersion(int* v) {
  *v = 13000;
  return FC_SUCCESS;
}
FC_EXPORT int cuDeviceGetCount(int* n) {
  *n = fc_devices();
  return FC_SUCCESS;
}
FC_EXPORT int cuDeviceGet(int* dev, int ordinal) {
  if (ordinal < 0 || ordinal >= fc_devices()) return FC_ERROR_INVALID_DEVICE;
  *dev = ordinal;
  return FC_SUCCESS;
}
FC_EXPORT int cuDeviceGetName(char* name, int len, int dev) {
  if (!fc_ctx_of(dev)) return FC_ERROR_INVALID_DEVICE;
  snprintf(name, (size_t)len, "CUDA stand-in %d", dev);
  return FC_SUCCESS;
}
FC_EXPORT int cuDeviceGetAttribute(int* v, int attr, int dev) {
  if (!fc_ctx_of(dev)) return FC_ERROR_INVALID_DEVICE;
  if (attr != 16 /* multiprocessor count */) return FC_ERROR_INVALID_VALUE;
  *v = sms;
  return FC_SUCCESS;
}
/* The pid as the domain: every process's devices are GPUs of their own. */
FC_EXPORT int cuDeviceGetPCIBusId(char* buf, int len, int dev) {
  if (!fc_ctx_of(dev)) return FC_ERROR_INVALID_DEVICE;
  snprintf(buf, (size_t)len, "%04x:%02x:00.0", (unsigned)getpid() & 0xffffu, dev + 1);
  return FC_SUCCESS;
}
FC_EXPORT int cuDeviceGetByPCIBusId(int* dev, const char* id) {
  unsigned dom = 0, bus = 0;
  if (sscanf(id, "%x:%x:", &dom, &bus) != 2 || dom != ((unsigned)getpid() & 0xffffu) || bus < 1 ||
      (int)bus > fc_devices())
    return FC_ERROR_INVALID_DEVICE;
  *dev = (int)bus - 1;
  return FC_SUCCESS;
}
FC_EXPORT int cuDeviceGetP2PAttribute(int* v, int attr, int a, int b) {
  (void)attr;
  if (!fc_ctx_of(a) || !fc_ctx_of(b)) return FC_ERROR_INVALID_DEVICE;
  *v = 1;
  return FC_SUCCESS;
}
FC_EXPORT int cuDeviceCanAccessPeer(int* v, int a, int b) {
  if (!fc_ctx_of(a) || !fc_ctx_of(b)) return FC_ERROR_INVALID_DEVICE;
  *v = a != b;
  return FC_SUCCESS;
}
FC_EXPORT int cuDevicePrimaryCtxRetain(struct fc_ctx** ctx, int dev) {
  if (!fc_ctx_of(dev)) return FC_ERROR_INVALID_DEVICE;
  *ctx = fc_ctx_of(dev);
  return FC_SUCCESS;
}
FC_EXPORT int cuDevicePrimaryCtxRelease_v2(int dev) {
  return fc_ctx_of(dev) ? FC_SUCCESS : FC_ERROR_INVALID_DEVICE;
}
FC_EXPORT int cuCtxGetCurrent(struct fc_ctx** ctx) {
  *ctx = current;
  return FC_SUCCESS;
}
FC_EXPORT int cuCtxSetCurrent(struct fc_ctx* ctx) {
  current = ctx;
  return FC_SUCCESS;
}
FC_EXPORT int cuCtxGetDevice(int* dev) {
  if (!current) return FC_ERROR_INVALID_CONTEXT;
  *dev = current->device;
  return FC_SUCCESS;
}
FC_EXPORT int cuCtxEnablePeerAccess(struct fc_ctx* peer, unsigned flags) {
  (void)flags;
  if (!current || !peer) return FC_ERROR_INVALID_CONTEXT;
  if (__atomic_exchange_n(&current->peer_enabled[peer->device], 1, __ATOMIC_RELAXED))
    return FC_ERROR_PEER_ACCESS_ALREADY_ENABLED;
  return FC_SUCCESS;
}

FC_EXPORT int cuGetErrorString(int e, const char** s) {
  switch (e) {
    case FC_SUCCESS: *s = "no error"; break;
    case FC_ERROR_INVALID_VALUE: *s = "invalid argument"; break;
    case FC_ERROR_OUT_OF_MEMORY: *s = "out of memory"; break;
    case FC_ERROR_INVALID_DEVICE: *s = "invalid device ordinal"; break;
    case FC_ERROR_INVALID_IMAGE: *s = "device kernel image is invalid"; break;
    case FC_ERROR_INVALID_CONTEXT: *s = "invalid device context"; break;
    case FC_ERROR_INVALID_HANDLE: *s = "invalid resource handle"; break;
    case FC_ERROR_NOT_FOUND: *s = "named symbol not found"; break;
    case FC_ERROR_NOT_READY: *s = "device not ready"; break;
    case FC_ERROR_PEER_ACCESS_ALREADY_ENABLED: *s = "peer access is already enabled"; break;
    case FC_ERROR_LAUNCH_FAILED: *s = "unspecified launch failure"; break;
    case FC_ERROR_STREAM_CAPTURE_UNSUPPORTED: *s = "operation not permitted when stream is capturing"; break;
    case FC_ERROR_STREAM_CAPTURE_INVALIDATED: *s = "operation failed due to a previous error during capture"; break;
    default: *s = NULL; return FC_ERROR_INVALID_VALUE;
  }
  return FC_SUCCESS;
}

FC_EXPORT void fakecuda_fault(const char* spec) {
  pthread_once(&once, init);
  pthread_mutex_lock(&fault_mu);
  parse_fault(spec);
  pthread_mutex_unlock(&fault_mu);
}
