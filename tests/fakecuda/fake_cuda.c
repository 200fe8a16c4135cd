/* A stand-in for the CUDA driver (soname libcuda.so.1) that answers cuPointerGetAttribute:
 * addresses inside ranges a test declared with fakecuda_add_device are device memory, the
 * rest is unknown to the driver (CUDA_ERROR_INVALID_VALUE), as pageable host memory is.
 * cuEventRecord succeeds and remembers its arguments (fakecuda_event_records). */
#include <stddef.h>
#include <stdint.h>

#define MAX_RANGES 16
#define CU_POINTER_ATTRIBUTE_MEMORY_TYPE 2
#define CU_MEMORYTYPE_DEVICE 2
#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1

static struct { uintptr_t lo, hi; } ranges[MAX_RANGES];
static int nranges;

__attribute__((visibility("default"))) int fakecuda_add_device(const void* p, size_t bytes) {
  if (nranges == MAX_RANGES) return -1;
  ranges[nranges].lo = (uintptr_t)p;
  ranges[nranges].hi = (uintptr_t)p + bytes;
  nranges++;
  return 0;
}

__attribute__((visibility("default"))) int cuPointerGetAttribute(void* data, int attribute,
                                                                 unsigned long long ptr) {
  if (attribute != CU_POINTER_ATTRIBUTE_MEMORY_TYPE) return CUDA_ERROR_INVALID_VALUE;
  for (int i = 0; i < nranges; i++)
    if (ptr >= ranges[i].lo && ptr < ranges[i].hi) {
      *(unsigned int*)data = CU_MEMORYTYPE_DEVICE;
      return CUDA_SUCCESS;
    }
  return CUDA_ERROR_INVALID_VALUE;
}

static long event_records;
static void* last_event;
static void* last_stream;

__attribute__((visibility("default"))) int cuEventRecord(void* event, void* stream) {
  if (!event) return CUDA_ERROR_INVALID_VALUE;
  __atomic_store_n(&last_event, event, __ATOMIC_RELAXED);
  __atomic_store_n(&last_stream, stream, __ATOMIC_RELAXED);
  __atomic_fetch_add(&event_records, 1, __ATOMIC_RELEASE);
  return CUDA_SUCCESS;
}

/* How many events were recorded; the last one's event and stream. */
__attribute__((visibility("default"))) long fakecuda_event_records(void** event, void** stream) {
  long n = __atomic_load_n(&event_records, __ATOMIC_ACQUIRE);
  *event = __atomic_load_n(&last_event, __ATOMIC_RELAXED);
  *stream = __atomic_load_n(&last_stream, __ATOMIC_RELAXED);
  return n;
}
