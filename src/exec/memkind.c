/* See memkind.h. The driver's cuPointerGetAttribute answers for every address once CUDA is in
 * use; transport/cuda_driver.h finds it without ever bringing the driver into a process. */
#include "exec/memkind.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "transport/cuda_driver.h"

/* From the CUDA driver API (cuda.h): the attribute and its values, and success. */
#define CU_POINTER_ATTRIBUTE_MEMORY_TYPE 2
#define CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL 9
#define CU_MEMORYTYPE_HOST 1
#define CUDA_SUCCESS 0

typedef int (*get_attr_fn)(void* data, int attribute, unsigned long long ptr);

/* The driver's function once found; lookups before that are retried, since an application may
 * start using CUDA after its first collective. */
static _Atomic(get_attr_fn) get_attr;

static get_attr_fn driver(void) {
  get_attr_fn f = atomic_load_explicit(&get_attr, memory_order_acquire);
  if (f) return f;
  f = (get_attr_fn)(uintptr_t)shunt_driver_sym("cuPointerGetAttribute");
  if (f) atomic_store_explicit(&get_attr, f, memory_order_release);
  return f;
}

enum shunt_mem_kind shunt_mem_kind(const void* p) {
  get_attr_fn f = driver();
  if (!f || !p) return SHUNT_MEM_HOST;
  unsigned int type = 0;
  /* Pageable memory the driver never saw is an error (CUDA_ERROR_INVALID_VALUE): host. */
  if (f(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (unsigned long long)(uintptr_t)p) != CUDA_SUCCESS)
    return SHUNT_MEM_HOST;
  return type == CU_MEMORYTYPE_HOST ? SHUNT_MEM_HOST : SHUNT_MEM_DEVICE;
}

int shunt_mem_device(const void* p) {
  get_attr_fn f = driver();
  int dev = -1;
  if (!f || !p || f(&dev, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, (unsigned long long)(uintptr_t)p) != CUDA_SUCCESS)
    return -1;
  return dev;
}
