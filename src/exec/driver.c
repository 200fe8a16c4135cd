#include "exec/driver.h"

#include <dlfcn.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* The handle once found; lookups before that are retried, since an application may start
 * using CUDA after its first collective. */
static _Atomic(void*) handle;

void* shunt_driver_sym(const char* name) {
  void* h = atomic_load_explicit(&handle, memory_order_acquire);
  if (!h) {
    h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD | RTLD_LOCAL);
    if (!h) return NULL;
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
