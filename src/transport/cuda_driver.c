#include "transport/cuda_driver.h"

#include <dlfcn.h>
#include <link.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The handle once found; lookups before that are retried, since an application may start
 * using CUDA after its first collective. */
static _Atomic(void*) handle;
/* The loader's count of objects ever loaded when a lookup last failed (0: none failed yet).
 * A failed dlopen searches the library path on disk (tens of microseconds, every collective
 * of a process without CUDA); while that count stands still the driver cannot have come. */
static _Atomic unsigned long long failed_at_adds;

static int first_adds(struct dl_phdr_info* info, size_t size, void* data) {
  *(unsigned long long*)data =
      size >= offsetof(struct dl_phdr_info, dlpi_adds) + sizeof(info->dlpi_adds) ? info->dlpi_adds : 0;
  return 1; /* one object is enough: the count is the same in each */
}

void* shunt_driver_sym(const char* name) {
  void* h = atomic_load_explicit(&handle, memory_order_acquire);
  if (!h) {
    unsigned long long adds = 0;
    dl_iterate_phdr(first_adds, &adds);
    if (adds && adds == atomic_load_explicit(&failed_at_adds, memory_order_relaxed)) return NULL;
    h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD | RTLD_LOCAL);
    if (!h) {
      atomic_store_explicit(&failed_at_adds, adds, memory_order_relaxed);
      return NULL;
    }
    void* expected = NULL;
    /* A second thread may have found it too: keep one reference, drop the other. */
    if (!atomic_compare_exchange_strong(&handle, &expected, h)) {
      dlclose(h);
      h = expected;
    }
  }
  return dlsym(h, name);
}

typedef int (*event_record_fn)(void* event, void* stream);
typedef int (*ctx_get_fn)(void** ctx);
typedef int (*ctx_set_fn)(void* ctx);
typedef int (*stream_ctx_fn)(void* stream, void** ctx);
typedef int (*retain_fn)(void** ctx, int dev);
typedef int (*release_fn)(int dev);

/* A driver function looked up once (the driver, once found, stays). */
static void* sym_once(_Atomic(void*)* slot, const char* name) {
  void* f = atomic_load_explicit(slot, memory_order_acquire);
  if (!f && (f = shunt_driver_sym(name))) atomic_store_explicit(slot, f, memory_order_release);
  return f;
}
static _Atomic(void*) event_record, ctx_get, ctx_set, stream_ctx, retain, release;

void* shunt_driver_ctx_current(void) {
  ctx_get_fn get = (ctx_get_fn)(uintptr_t)sym_once(&ctx_get, "cuCtxGetCurrent");
  void* ctx = NULL;
  if (!get || get(&ctx) != 0) return NULL;
  return ctx;
}

void shunt_driver_ctx_set(void* ctx) {
  ctx_set_fn set = (ctx_set_fn)(uintptr_t)sym_once(&ctx_set, "cuCtxSetCurrent");
  if (set) set(ctx);
}

int shunt_driver_event_record(void* event, void* stream, int device) {
  event_record_fn rec = (event_record_fn)(uintptr_t)sym_once(&event_record, "cuEventRecord");
  stream_ctx_fn sctx = (stream_ctx_fn)(uintptr_t)sym_once(&stream_ctx, "cuStreamGetCtx");
  retain_fn ret = (retain_fn)(uintptr_t)sym_once(&retain, "cuDevicePrimaryCtxRetain");
  release_fn rel = (release_fn)(uintptr_t)sym_once(&release, "cuDevicePrimaryCtxRelease_v2");
  if (!rec || !sctx || !ret || !rel) return -1;
  void* prev = shunt_driver_ctx_current();
  void* ctx = NULL;
  bool retained = false;
  int e = 0;
  if ((uintptr_t)stream > 2) {
    e = sctx(stream, &ctx);
  } else if (device >= 0) {
    e = ret(&ctx, device);
    retained = e == 0;
  } else {
    ctx = prev;
  }
  if (e == 0 && ctx != prev) shunt_driver_ctx_set(ctx);
  if (e == 0) e = rec(event, stream);
  if (ctx != prev) shunt_driver_ctx_set(prev);
  if (retained) rel(device);
  return e;
}
