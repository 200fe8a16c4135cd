/* The stand-in's devices, contexts, errors and faults (fake_cuda.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exec/kcpu/kcpu_kernel.h"
#include "fake_cuda.h"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int ndev = 1, max_threads = 32, sms = 8, run_threads = 4;
/* FAKECUDA_VISIBLE: the physical devices this process sees, in ordinal order (as
 * CUDA_VISIBLE_DEVICES); -1 when not set (each process's devices are GPUs of its own). */
static int visible[FC_MAX_DEVICES] = {-1};
static struct fc_ctx ctxs[FC_MAX_DEVICES];
static __thread struct fc_ctx* current;
static int inited; /* cuInit ran */

/* Primary contexts' retain counts and every context's identity. */
static pthread_mutex_t ctx_mu = PTHREAD_MUTEX_INITIALIZER;
static int retains[FC_MAX_DEVICES];
static unsigned long long next_ctx_id = 1;
static char lenient[256];

static pthread_mutex_t fault_mu = PTHREAD_MUTEX_INITIALIZER;
static int fault_kind;
static long fault_at;

static void parse_fault(const char* v) {
  fault_kind = 0;
  fault_at = 0;
  if (!v || !*v) return;
  if (!strncmp(v, "corrupt:", 8)) fault_kind = 'c', fault_at = atol(v + 8);
  if (!strncmp(v, "skip:", 5)) fault_kind = 's', fault_at = atol(v + 5);
  if (!strncmp(v, "late:", 5)) fault_kind = 'l', fault_at = atol(v + 5);
  if (!strncmp(v, "refuse:", 7)) fault_kind = 'r', fault_at = atol(v + 7);
}

static void init(void) {
  const char* v = getenv("FAKECUDA_DEVICES");
  if (v && atoi(v) > 0) ndev = atoi(v) > FC_MAX_DEVICES ? FC_MAX_DEVICES : atoi(v);
  if ((v = getenv("FAKECUDA_MAX_THREADS")) && atoi(v) > 0) max_threads = atoi(v);
  if ((v = getenv("FAKECUDA_SMS")) && atoi(v) > 0) sms = atoi(v);
  if ((v = getenv("FAKECUDA_RUN_THREADS")) && atoi(v) > 0) run_threads = atoi(v);
  /* A device read of mapped host memory is a PCIe round trip, about 1 us (FAKECUDA_PCIE_NS). */
  v = getenv("FAKECUDA_PCIE_NS");
  shunt_kcpu_set_pcie_ns(v && *v ? atoll(v) : 1000);
  for (int d = 0; d < FC_MAX_DEVICES; d++)
    ctxs[d] = (struct fc_ctx){.device = d, .primary = true, .id = next_ctx_id++};
  parse_fault(getenv("FAKECUDA_FAULT"));
  if ((v = getenv("FAKECUDA_VISIBLE")) && *v) {
    int n = 0;
    for (const char* p = v; *p && n < FC_MAX_DEVICES;) {
      char* end = NULL;
      long d = strtol(p, &end, 10);
      if (end == p || d < 0 || d >= FC_MAX_DEVICES) break;
      visible[n++] = (int)d;
      p = *end == ',' ? end + 1 : end;
    }
    ndev = n;
  }
  if ((v = getenv("FAKECUDA_LENIENT"))) snprintf(lenient, sizeof(lenient), ",%s,", v);
}

bool fc_lenient(const char* rule) {
  pthread_once(&once, init);
  char key[64];
  snprintf(key, sizeof(key), ",%s,", rule);
  return strstr(lenient, key) != NULL;
}

int fc_initialized(void) {
  return __atomic_load_n(&inited, __ATOMIC_ACQUIRE) ? FC_SUCCESS : FC_ERROR_NOT_INITIALIZED;
}
int fc_need_ctx(void) {
  if (!__atomic_load_n(&inited, __ATOMIC_ACQUIRE)) return FC_ERROR_NOT_INITIALIZED;
  return current && __atomic_load_n(&current->id, __ATOMIC_RELAXED) ? FC_SUCCESS : FC_ERROR_INVALID_CONTEXT;
}

/* A primary context released by its last retainer, or reset: the same handle names a new
 * context from now on. Caller holds ctx_mu. */
static void renew(struct fc_ctx* c) {
  __atomic_store_n(&c->id, next_ctx_id++, __ATOMIC_RELAXED);
  memset(c->peer_enabled, 0, sizeof(c->peer_enabled));
}

/* Retains of device's primary context not yet released (a test asks: a library that retains
 * must release). */
FC_EXPORT int fakecuda_primary_retains(int device) {
  pthread_mutex_lock(&ctx_mu);
  int n = device >= 0 && device < FC_MAX_DEVICES ? retains[device] : -1;
  pthread_mutex_unlock(&ctx_mu);
  return n;
}

/* As a leak checker would: retains never released are named at exit. */
__attribute__((destructor)) static void report_leaks(void) {
  for (int d = 0; d < FC_MAX_DEVICES; d++)
    if (retains[d] > 0)
      fprintf(stderr, "fakecuda: device %d's primary context: %d retain(s) never released\n", d, retains[d]);
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
int fc_sms(void) {
  pthread_once(&once, init);
  return sms;
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

/* FAKECUDA_DMA_BUF=0: the devices report no dma-buf support (default: supported, as an H100). */
bool fc_dma_buf(void) {
  const char* v = getenv("FAKECUDA_DMA_BUF");
  return !v || strcmp(v, "0") != 0;
}

FC_EXPORT int cuInit(unsigned flags) {
  if (flags != 0) return FC_ERROR_INVALID_VALUE;
  pthread_once(&once, init);
  __atomic_store_n(&inited, 1, __ATOMIC_RELEASE);
  return FC_SUCCESS;
}
FC_EXPORT int cuDriverGetVersion(int* v) {
  *v = 13000;
  return FC_SUCCESS;
}
FC_EXPORT int cuDeviceGetCount(int* n) {
  FC_NEED_INIT();
  *n = fc_devices();
  return FC_SUCCESS;
}
FC_EXPORT int cuDeviceGet(int* dev, int ordinal) {
  FC_NEED_INIT();
  if (ordinal < 0 || ordinal >= fc_devices()) return FC_ERROR_INVALID_DEVICE;
  *dev = ordinal;
  return FC_SUCCESS;
}
FC_EXPORT int cuDeviceGetName(char* name, int len, int dev) {
  FC_NEED_INIT();
  if (!fc_ctx_of(dev)) return FC_ERROR_INVALID_DEVICE;
  snprintf(name, (size_t)len, "CUDA stand-in %d", dev);
  return FC_SUCCESS;
}
FC_EXPORT int cuDeviceGetAttribute(int* v, int attr, int dev) {
  FC_NEED_INIT();
  if (!fc_ctx_of(dev)) return FC_ERROR_INVALID_DEVICE;
  if (attr == 124) { /* CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED */
    *v = fc_dma_buf();
    return FC_SUCCESS;
  }
  if (attr == 133) { /* MPS enabled: this process is a client of an MPS server (FAKECUDA_MPS=1) */
    const char* m = getenv("FAKECUDA_MPS");
    *v = m && !strcmp(m, "1");
    return FC_SUCCESS;
  }
  if (attr != 16 /* multiprocessor count */) return FC_ERROR_INVALID_VALUE;
  *v = sms;
  return FC_SUCCESS;
}
/* The physical device behind ordinal dev. */
static int physical(int dev) {
  pthread_once(&once, init);
  return visible[0] < 0 ? dev : visible[dev];
}

/* Bus ids: with FAKECUDA_VISIBLE, physical devices of one machine that every process of the
 * test shares (domain 0); without, the pid as the domain: every process's devices are GPUs of
 * their own. */
FC_EXPORT int cuDeviceGetPCIBusId(char* buf, int len, int dev) {
  FC_NEED_INIT();
  if (!fc_ctx_of(dev)) return FC_ERROR_INVALID_DEVICE;
  fc_bus_id(physical(dev), buf, (size_t)len);
  return FC_SUCCESS;
}
/* A device not visible to this process cannot be asked by ordinal, nor found by bus id. */
FC_EXPORT int cuDeviceGetByPCIBusId(int* dev, const char* id) {
  FC_NEED_INIT();
  int p = fc_bus_physical(id);
  for (int d = 0; d < fc_devices() && p >= 0; d++)
    if (physical(d) == p) {
      *dev = d;
      return FC_SUCCESS;
    }
  return FC_ERROR_INVALID_DEVICE;
}
FC_EXPORT int cuDeviceGetP2PAttribute(int* v, int attr, int a, int b) {
  FC_NEED_INIT();
  if (!fc_ctx_of(a) || !fc_ctx_of(b)) return FC_ERROR_INVALID_DEVICE;
  int pa = physical(a), pb = physical(b);
  /* 2: access supported, 3: native atomics; the others (performance rank...) answer 1. */
  *v = attr == 3 ? fc_peer_atomics(pa, pb) : attr == 2 ? fc_peer_access(pa, pb) : 1;
  return FC_SUCCESS;
}
FC_EXPORT int cuDeviceCanAccessPeer(int* v, int a, int b) {
  FC_NEED_INIT();
  if (!fc_ctx_of(a) || !fc_ctx_of(b)) return FC_ERROR_INVALID_DEVICE;
  *v = a != b && fc_peer_access(physical(a), physical(b));
  return FC_SUCCESS;
}
/* Primary contexts are counted per device, as the driver counts them: the last release
 * destroys the context (the next retain makes a new one under the same handle). */
FC_EXPORT int cuDevicePrimaryCtxRetain(struct fc_ctx** ctx, int dev) {
  FC_NEED_INIT();
  if (!fc_ctx_of(dev)) return FC_ERROR_INVALID_DEVICE;
  pthread_mutex_lock(&ctx_mu);
  retains[dev]++;
  pthread_mutex_unlock(&ctx_mu);
  *ctx = fc_ctx_of(dev);
  return FC_SUCCESS;
}
FC_EXPORT int cuDevicePrimaryCtxRelease_v2(int dev) {
  FC_NEED_INIT();
  if (!fc_ctx_of(dev)) return FC_ERROR_INVALID_DEVICE;
  pthread_mutex_lock(&ctx_mu);
  int rc = retains[dev] > 0 ? FC_SUCCESS : FC_ERROR_INVALID_CONTEXT;
  if (rc == FC_SUCCESS && --retains[dev] == 0) renew(&ctxs[dev]);
  pthread_mutex_unlock(&ctx_mu);
  return rc;
}
/* cudaDeviceReset: the primary context's state is gone, its handle names a new context. */
FC_EXPORT int cuDevicePrimaryCtxReset_v2(int dev) {
  FC_NEED_INIT();
  if (!fc_ctx_of(dev)) return FC_ERROR_INVALID_DEVICE;
  pthread_mutex_lock(&ctx_mu);
  renew(&ctxs[dev]);
  pthread_mutex_unlock(&ctx_mu);
  return FC_SUCCESS;
}
FC_EXPORT int cuDevicePrimaryCtxGetState(int dev, unsigned* flags, int* active) {
  FC_NEED_INIT();
  if (!fc_ctx_of(dev)) return FC_ERROR_INVALID_DEVICE;
  pthread_mutex_lock(&ctx_mu);
  *flags = 0;
  *active = retains[dev] > 0;
  pthread_mutex_unlock(&ctx_mu);
  return FC_SUCCESS;
}
/* A context of its own (not the primary one the runtime uses), made current. Destroyed, its
 * handle stays allocated but names no context (calls made in it fail). */
FC_EXPORT int cuCtxCreate_v2(struct fc_ctx** out, unsigned flags, int dev) {
  (void)flags;
  FC_NEED_INIT();
  if (!fc_ctx_of(dev)) return FC_ERROR_INVALID_DEVICE;
  struct fc_ctx* c = calloc(1, sizeof(*c));
  if (!c) return FC_ERROR_OUT_OF_MEMORY;
  pthread_mutex_lock(&ctx_mu);
  *c = (struct fc_ctx){.device = dev, .primary = false, .id = next_ctx_id++};
  pthread_mutex_unlock(&ctx_mu);
  current = c;
  *out = c;
  return FC_SUCCESS;
}
FC_EXPORT int cuCtxDestroy_v2(struct fc_ctx* c) {
  FC_NEED_INIT();
  if (!c || c->primary || !c->id) return FC_ERROR_INVALID_CONTEXT;
  __atomic_store_n(&c->id, 0, __ATOMIC_RELAXED);
  if (current == c) current = NULL;
  return FC_SUCCESS;
}
FC_EXPORT int cuCtxGetId(struct fc_ctx* c, unsigned long long* id) {
  FC_NEED_INIT();
  if (!c) c = current;
  if (!c || !c->id) return FC_ERROR_INVALID_CONTEXT;
  pthread_mutex_lock(&ctx_mu);
  *id = c->id;
  pthread_mutex_unlock(&ctx_mu);
  return FC_SUCCESS;
}
FC_EXPORT int cuCtxGetCurrent(struct fc_ctx** ctx) {
  FC_NEED_INIT();
  *ctx = current;
  return FC_SUCCESS;
}
FC_EXPORT int cuCtxSetCurrent(struct fc_ctx* ctx) {
  FC_NEED_INIT();
  current = ctx;
  return FC_SUCCESS;
}
FC_EXPORT int cuCtxGetDevice(int* dev) {
  FC_NEED_CTX();
  *dev = current->device;
  return FC_SUCCESS;
}
FC_EXPORT int cuCtxEnablePeerAccess(struct fc_ctx* peer, unsigned flags) {
  (void)flags;
  FC_NEED_CTX();
  if (!peer) return FC_ERROR_INVALID_CONTEXT;
  if (__atomic_exchange_n(&current->peer_enabled[peer->device], 1, __ATOMIC_RELAXED))
    return FC_ERROR_PEER_ACCESS_ALREADY_ENABLED;
  return FC_SUCCESS;
}

FC_EXPORT int cuGetErrorString(int e, const char** s) {
  switch (e) {
    case FC_SUCCESS:
      *s = "no error";
      break;
    case FC_ERROR_INVALID_VALUE:
      *s = "invalid argument";
      break;
    case FC_ERROR_OUT_OF_MEMORY:
      *s = "out of memory";
      break;
    case FC_ERROR_NOT_INITIALIZED:
      *s = "initialization error";
      break;
    case FC_ERROR_INVALID_DEVICE:
      *s = "invalid device ordinal";
      break;
    case FC_ERROR_INVALID_IMAGE:
      *s = "device kernel image is invalid";
      break;
    case FC_ERROR_INVALID_CONTEXT:
      *s = "invalid device context";
      break;
    case FC_ERROR_INVALID_HANDLE:
      *s = "invalid resource handle";
      break;
    case FC_ERROR_NOT_FOUND:
      *s = "named symbol not found";
      break;
    case FC_ERROR_NOT_READY:
      *s = "device not ready";
      break;
    case FC_ERROR_PEER_ACCESS_ALREADY_ENABLED:
      *s = "peer access is already enabled";
      break;
    case FC_ERROR_LAUNCH_FAILED:
      *s = "unspecified launch failure";
      break;
    case FC_ERROR_STREAM_CAPTURE_UNSUPPORTED:
      *s = "operation not permitted when stream is capturing";
      break;
    case FC_ERROR_STREAM_CAPTURE_INVALIDATED:
      *s = "operation failed due to a previous error during capture";
      break;
    case FC_ERROR_STREAM_CAPTURE_IMPLICIT:
      *s = "legacy stream work would join a capture";
      break;
    default:
      *s = NULL;
      return FC_ERROR_INVALID_VALUE;
  }
  return FC_SUCCESS;
}

/* The driver's names of the errors the stand-in returns. */
FC_EXPORT int cuGetErrorName(int e, const char** s) {
  static const struct {
    int e;
    const char* name;
  } names[] = {{FC_SUCCESS, "CUDA_SUCCESS"},
               {FC_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE"},
               {FC_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY"},
               {FC_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED"},
               {FC_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE"},
               {FC_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE"},
               {FC_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT"},
               {FC_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE"},
               {FC_ERROR_ILLEGAL_STATE, "CUDA_ERROR_ILLEGAL_STATE"},
               {FC_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND"},
               {FC_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY"},
               {FC_ERROR_PEER_ACCESS_ALREADY_ENABLED, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED"},
               {FC_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED"},
               {FC_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED"},
               {FC_ERROR_STREAM_CAPTURE_UNSUPPORTED, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"},
               {FC_ERROR_STREAM_CAPTURE_INVALIDATED, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"},
               {FC_ERROR_STREAM_CAPTURE_IMPLICIT, "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT"},
               {FC_ERROR_STREAM_CAPTURE_WRONG_THREAD, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD"}};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
    if (names[i].e == e) {
      *s = names[i].name;
      return FC_SUCCESS;
    }
  *s = NULL;
  return FC_ERROR_INVALID_VALUE;
}

FC_EXPORT void fakecuda_fault(const char* spec) {
  pthread_once(&once, init);
  pthread_mutex_lock(&fault_mu);
  parse_fault(spec);
  pthread_mutex_unlock(&fault_mu);
}
