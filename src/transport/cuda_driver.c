#include "transport/cuda_driver.h"

#include <dlfcn.h>
#include <link.h>
#include <stdatomic.h>
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
static _Atomic(event_record_fn) event_record;

int shunt_driver_event_record(void* event, void* stream) {
  event_record_fn f = atomic_load_explicit(&event_record, memory_order_acquire);
  if (!f) {
    f = (event_record_fn)(uintptr_t)shunt_driver_sym("cuEventRecord");
    if (!f) return -1;
    atomic_store_explicit(&event_record, f, memory_order_release);
  }
  return f(event, stream);
}
