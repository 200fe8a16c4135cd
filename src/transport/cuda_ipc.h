/* CUDA IPC: how a GPU rank reaches the device region of a rank of its own host (the GPU
 * backend's memory channels, and its proxy's copies).
 *
 * Promises:
 * - A rank describes its region (process, host, device, the region's base and an IPC handle)
 *   in a plain struct that travels through the bootstrap.
 * - Mapping a peer of the same process gives its pointer (enabling peer access when it is on
 *   another device); of another process, a CUDA IPC mapping. A pair of different devices without
 *   native peer atomics (PCIe only) is refused, since signals and semaphores are atomics on the
 *   peer's memory. Errors are messages naming both ranks. */
#ifndef SHUNT_TRANSPORT_CUDA_IPC_H
#define SHUNT_TRANSPORT_CUDA_IPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "transport/cu.h"

struct shunt_cuda_peer {
  uint64_t proc;   /* shunt_process_token: same value, same process */
  uint64_t hostid; /* shunt_host_identity: same value, same machine */
  char host[64];   /* the host name, for messages */
  char busid[32];  /* the device's PCI bus id: ordinals differ between processes */
  int32_t device;
  uint32_t has_handle;
  uint64_t region; /* base in the owner's address space */
  CUipcMemHandle handle;
};

/* Describes this rank's region on device dev (in the current context). */
void shunt_cuda_peer_describe(const struct shunt_cu* cu, int dev, char* region, struct shunt_cuda_peer* me);
/* Maps rank r's region (described by c) for this rank (me): *out its base here, *ipc whether it
 * is an IPC mapping (to close with shunt_cuda_peer_unmap). 0, or a SHUNT_E_* code with
 * the reason (SHUNT_E_INVALID: the pair of devices cannot serve; SHUNT_E_CUDA: a driver call). */
int shunt_cuda_peer_map(const struct shunt_cu* cu, uint32_t rank, const struct shunt_cuda_peer* me,
                        uint32_t r, const struct shunt_cuda_peer* c, char** out, bool* ipc, char* err,
                        size_t len);
void shunt_cuda_peer_unmap(const struct shunt_cu* cu, char* base, bool ipc);

#endif
