/* The GPU backend's launch: a Program uploaded for a world (gpu_world.h) runs on a stream.
 *
 * Promises:
 * - shunt_gpu_launch enqueues on the caller's stream only: staging copies (in before, out
 *   after), the scaling of avg and PreMulSum contributions (as the host backend does it:
 *   each contribution scaled once before the plan, integer avg divided after), and one kernel
 *   with one CUDA block per plan threadblock. It does no host synchronization, no allocation
 *   and no bootstrap traffic, so it may be captured into a CUDA graph; the graph may be
 *   replayed any number of times without the host, because the LL flag, the scratch half,
 *   channel counts, barriers and the trigger FIFO all live on the device and advance there.
 * - A failed host check (program matches the world, sizes fit, dtype/op computed, world not
 *   broken) enqueues nothing and returns SHUNT_E_INVALID with a reason. A driver call that
 *   fails (SHUNT_E_CUDA) can come after others were enqueued (the program's upload, the
 *   staging copies and scaling before the kernel, the kernel before the copy out): the stream
 *   then holds that much of the call, which the caller orders before its next launch.
 * - The run's own failures (a wait that timed out) are reported later by
 *   shunt_gpu_world_check; the kernel never hangs.
 * - User buffers are device memory of the world's device (or memory it can address). The
 *   launch is made in the world's context whatever the calling thread's current one, which
 *   is put back; `stream` belongs to the world's device. */
#ifndef SHUNT_EXEC_GPU_RUN_H
#define SHUNT_EXEC_GPU_RUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "exec/gpu/gpu_world.h"

#ifdef __cplusplus
extern "C" {
#endif

struct shunt_gpu_run {
  struct shunt_gpu_world* world;
  struct shunt_gpu_prog* prog; /* its first launch uploads it */
  const void* in;              /* user input (device) */
  void* out;                   /* user output (device) */
  /* PREMULSUM: one element of the program's dtype: in host memory, read during the call (a
   * captured graph keeps the value it had then), or with premul_on_device in device memory,
   * read by the kernel when it runs (a graph replay reads it anew). */
  const void* premul_scalar;
  uint64_t timeout_ns; /* bound of this run's waits; 0: the world's */
  /* The caller holds the world's launch order (shunt_gpu_world_order_begin): it enqueues
   * more around this launch that must stay in the same ordered section. */
  bool ordered;
  /* Zero-copy: every rank's address of this call's input / output (device tables agreed by
   * every rank, gpu_reg.h; NULL: staged), and an offset added to every entry (0 from the
   * backend). */
  const uint64_t* zc_in;
  const uint64_t* zc_out;
  uint64_t zc_in_off, zc_out_off;
  bool premul_on_device;
};

int shunt_gpu_launch(const struct shunt_gpu_run* run, struct CUstream_st* stream, char* err, size_t len);

#ifdef __cplusplus
}
#endif

#endif
