/* The GPU backend's kernels compiled for the CPU (exec/gpu/gpu_kernel.cuh through
 * kcpu_shim.h): a launch of a grid runs every device thread as a fiber of the launching host
 * thread and returns once all have returned. C interface.
 *
 * Promises:
 * - A device (shunt_kcpu_device) runs a launch of blocks x threads on the launching host thread,
 *   every device thread a fiber with its own blockIdx/threadIdx and the block barriers of
 *   kcpu_shim.h, and returns once every one has returned from the kernel; the fibers' stacks
 *   are kept between launches, as a GPU keeps its SMs. It returns 0, or -1 with a message when
 *   the stacks could not be had (nothing runs then). One launch at a time per device (callers
 *   serialize, as a stream does).
 * - skew_us > 0 perturbs the schedule so that a missing block barrier shows as a wrong result
 *   rather than by chance: thread t of a block is set aside for t * skew_us before entering the
 *   kernel and after every barrier, so thread 0 always runs ahead of the others.
 * - Under ThreadSanitizer, switching between device threads orders nothing by itself: only
 *   their atomics and barriers do, as on threads of their own. */
#ifndef SHUNT_EXEC_KCPU_KERNEL_H
#define SHUNT_EXEC_KCPU_KERNEL_H

#include <stddef.h>
#include <stdint.h>

#include "exec/gpu/gpu_abi.h"
#include "exec/ops/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

struct shunt_kcpu_device;
int shunt_kcpu_device_create(struct shunt_kcpu_device** out, char* err, size_t len);
/* Every launch on it has returned. */
void shunt_kcpu_device_destroy(struct shunt_kcpu_device* d);

struct shunt_kcpu_grid {
  unsigned blocks, threads;
  unsigned skew_us;
  unsigned smem_bytes; /* dynamic shared memory per block */
};

/* The executor kernel on arguments k (every pointer a host address). */
int shunt_kcpu_exec(struct shunt_kcpu_device* d, const struct shunt_gpu_kargs* k,
                    const struct shunt_kcpu_grid* g, char* err, size_t len);
/* dst[i] = pre(src[i]) for n elements (PreMulSum, floating avg); a non-NULL scalar is read
 * for red's scalar when the kernel runs. */
int shunt_kcpu_pre(struct shunt_kcpu_device* d, char* dst, const char* src, uint64_t n, struct shunt_red red,
                   const void* scalar, const struct shunt_kcpu_grid* g, char* err, size_t len);
/* The reduction the executor kernel applies for a program with this header (its dtype and
 * redop codes), as the kernel's code reads it. */
struct shunt_red shunt_kcpu_prog_red(const struct shunt_program* p);
/* buf[i] = post(buf[i]) for n elements (integer avg). */
int shunt_kcpu_post(struct shunt_kcpu_device* d, char* buf, uint64_t n, struct shunt_red red,
                    const struct shunt_kcpu_grid* g, char* err, size_t len);

/* Waiting in the CPU build. Device threads poll memory as on a GPU; a host thread whose device
 * threads all wait on memory idles (shunt_kcpu_idle: a few yields, then sleeps) until a write
 * that may end some wait is announced in this process (shunt_kcpu_progress: a signal, a packet
 * put, a barrier arrival, a trigger pushed or served, an abort) or a short timeout passes
 * (writes from another process, as the CUDA stand-in's peers make, are not announced here).
 * Waits stay polls of memory: a missed announcement costs time, never a result. */
void shunt_kcpu_progress(void);
struct shunt_kcpu_idle {
  uint32_t rounds; /* idle rounds in a row so far; zeroed when something moved */
  uint32_t seen;   /* the announcements seen before the caller's last look */
};
void shunt_kcpu_idle(struct shunt_kcpu_idle* st);
/* One pause of a device thread's wait that has made `polls` polls so far (kcpu_shim.h's
 * xg_relax). */
void shunt_kcpu_relax(uint32_t polls);

/* Device reads of mapped host memory (the FIFO's counters, the host's abort word) so far in this
 * process: what costs a PCIe round trip each on a GPU. */
void shunt_kcpu_pcie_read(void);
long long shunt_kcpu_pcie_reads(void);
/* What each such read costs from now on (ns; 0, the default: nothing). */
void shunt_kcpu_set_pcie_ns(long long ns);

/* The self-check's comparison (gpu_kernel.cuh: shunt_gpu_check_kernel). */
int shunt_kcpu_check(struct shunt_kcpu_device* d, const float* out, uint64_t n, uint64_t per, uint32_t nranks,
                     uint32_t kind, unsigned long long* first, const struct shunt_kcpu_grid* g, char* err,
                     size_t len);

#ifdef __cplusplus
}
#endif

#endif
