#include "transport/nvml.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>

/* nvml.h's published ABI: the calls, and the values used here. */
typedef struct nvmlDevice_st* nvmlDevice_t;
#define NVML_SUCCESS 0
#define NVML_P2P_CAPS_INDEX_ATOMICS 3
#define NVML_P2P_STATUS_OK 0

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int (*by_bus_id)(const char*, nvmlDevice_t*);
static int (*p2p_status)(nvmlDevice_t, nvmlDevice_t, int, int*);

static void load(void) {
  void* h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) return;
  int (*init)(void) = (int (*)(void))(uintptr_t)dlsym(h, "nvmlInit_v2");
  void* b = dlsym(h, "nvmlDeviceGetHandleByPciBusId_v2");
  void* p = dlsym(h, "nvmlDeviceGetP2PStatus");
  if (!init || !b || !p || init() != NVML_SUCCESS) {
    dlclose(h);
    return;
  }
  /* Kept for the life of the process, as the driver is. */
  by_bus_id = (int (*)(const char*, nvmlDevice_t*))(uintptr_t)b;
  p2p_status = (int (*)(nvmlDevice_t, nvmlDevice_t, int, int*))(uintptr_t)p;
}

int shunt_nvml_peer_atomics(const char* busid_a, const char* busid_b) {
  pthread_once(&once, load);
  if (!by_bus_id || !p2p_status) return -1;
  nvmlDevice_t a = NULL, b = NULL;
  int status = -1;
  if (by_bus_id(busid_a, &a) != NVML_SUCCESS || by_bus_id(busid_b, &b) != NVML_SUCCESS ||
      p2p_status(a, b, NVML_P2P_CAPS_INDEX_ATOMICS, &status) != NVML_SUCCESS)
    return -1;
  return status == NVML_P2P_STATUS_OK;
}
