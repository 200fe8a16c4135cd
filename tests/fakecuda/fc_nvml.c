/* A minimal NVML stand-in (soname libnvidia-ml.so.1) for the stand-in's machine (fc_topo.c):
 * devices found by PCI bus id, also those not visible to the process, and the peer
 * capabilities of a pair. Handles are domain << 8 | bus (bus: the physical device plus one);
 * without FAKECUDA_VISIBLE each process's devices have its pid as their domain, and devices of
 * different processes are peers with every capability, as the driver stand-in says. */
#include <stdint.h>
#include <stdio.h>

#include "fake_cuda.h"

enum {
  NVML_SUCCESS = 0,
  NVML_ERROR_UNINITIALIZED = 1,
  NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_NOT_FOUND = 6
};
enum { CAPS_READ = 0, CAPS_WRITE = 1, CAPS_NVLINK = 2, CAPS_ATOMICS = 3 };
enum { P2P_OK = 0, P2P_NOT_SUPPORTED = 5 };

static int inits;

FC_EXPORT int nvmlInit_v2(void) {
  __atomic_fetch_add(&inits, 1, __ATOMIC_RELAXED);
  return NVML_SUCCESS;
}
FC_EXPORT int nvmlShutdown(void) {
  return __atomic_sub_fetch(&inits, 1, __ATOMIC_RELAXED) >= 0 ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
}

FC_EXPORT int nvmlDeviceGetHandleByPciBusId_v2(const char* id, void** dev) {
  if (__atomic_load_n(&inits, __ATOMIC_RELAXED) <= 0) return NVML_ERROR_UNINITIALIZED;
  unsigned dom = 0, bus = 0;
  if (!id || sscanf(id, "%x:%x:", &dom, &bus) != 2 || bus < 1 || bus > FC_MAX_DEVICES)
    return NVML_ERROR_NOT_FOUND;
  *dev = (void*)(uintptr_t)((uintptr_t)dom << 8 | bus);
  return NVML_SUCCESS;
}

FC_EXPORT int nvmlDeviceGetP2PStatus(void* a, void* b, int index, int* status) {
  if (__atomic_load_n(&inits, __ATOMIC_RELAXED) <= 0) return NVML_ERROR_UNINITIALIZED;
  uintptr_t ha = (uintptr_t)a, hb = (uintptr_t)b;
  int pa = (int)(ha & 0xff) - 1, pb = (int)(hb & 0xff) - 1;
  if (pa < 0 || pb < 0 || pa >= FC_MAX_DEVICES || pb >= FC_MAX_DEVICES) return NVML_ERROR_INVALID_ARGUMENT;
  int ok = 1;
  if (ha >> 8 == hb >> 8)
    ok = index == CAPS_ATOMICS ? fc_peer_atomics(pa, pb) : index <= CAPS_WRITE ? fc_peer_access(pa, pb) : 1;
  *status = ok ? P2P_OK : P2P_NOT_SUPPORTED;
  return NVML_SUCCESS;
}
