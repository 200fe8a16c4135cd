/* The CUDA names the executor kernel uses, for a host C++ compiler: the portability layer of
 * the kernel's CPU build. Each device thread is a fiber of the launching host thread
 * (kcpu_kernel.cpp); its block and thread indices are thread-local, set at every switch.
 *
 * Promises, matching what the kernel relies on from CUDA on sm_70 and later:
 * - __syncthreads() waits for every thread of the block that has not exited; a thread that
 *   returned from the kernel no longer counts (a barrier waiting only on exited threads
 *   releases). __syncthreads_or(p) does the same and returns whether any arriving thread's p
 *   was nonzero.
 * - atomicAdd / atomicCAS are sequentially consistent GCC atomics; __threadfence and
 *   __threadfence_system are full fences.
 * - The gpu_device.cuh primitives (xg_*) exist with the same meaning: acquire, release and
 *   relaxed accesses as GCC atomics; the "volatile" word accesses as acquire loads and release
 *   stores (so ThreadSanitizer sees the order the GPU code gets from its fences);
 *   xg_now_ns reads CLOCK_MONOTONIC; xg_relax hands the host thread to the next device thread
 *   (device threads are fibers, kcpu_kernel.h), xg_progress announces a write that may end a
 *   wait to host threads that idle.
 * What this cannot show about a GPU: PTX scopes, weak memory ordering beyond these atomics,
 * 16-byte access atomicity, co-residency of blocks, IPC mappings, speed.
 * Include before exec/gpu/gpu_kernel.cuh, in C++ only. */
#ifndef SHUNT_KCPU_SHIM_H
#define SHUNT_KCPU_SHIM_H

#ifndef __cplusplus
#error "kcpu_shim.h is C++: it stands in for CUDA C++"
#endif

#include <sched.h>
#include <stdint.h>
#include <time.h>

#define __device__
#define __host__
#define __global__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __grid_constant__

#define XG_FN static inline
#define XG_NOINLINE static __attribute__((noinline))
#define SHUNT_GPU_ENTRY static void

struct int4 {
  int x, y, z, w;
} __attribute__((aligned(16)));

struct shunt_kcpu_dim3 {
  unsigned x, y, z;
};

/* The calling host thread's place in the grid (set by the grid runner before the entry). */
static thread_local shunt_kcpu_dim3 threadIdx, blockIdx, blockDim, gridDim;

/* The block's dynamic shared memory (set by the grid runner: one buffer per block). */
static thread_local int4* shunt_kcpu_smem;
#define XG_DYN_SHARED(name) int4* name = shunt_kcpu_smem

/* The block barrier, defined by the grid runner. */
int shunt_kcpu_sync(int pred);

static inline void __syncthreads(void) {
  (void)shunt_kcpu_sync(0);
}
static inline int __syncthreads_or(int pred) {
  return shunt_kcpu_sync(pred);
}

static inline void __threadfence(void) {
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
}
static inline void __threadfence_system(void) {
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

static inline unsigned atomicAdd(unsigned* p, unsigned v) {
  return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}
static inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
  return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}
static inline unsigned long long atomicMin(unsigned long long* p, unsigned long long v) {
  unsigned long long cur = __atomic_load_n(p, __ATOMIC_RELAXED);
  while (v < cur && !__atomic_compare_exchange_n(p, &cur, v, false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) {
  }
  return cur;
}
static inline unsigned __float_as_uint(float f) {
  unsigned u;
  __builtin_memcpy(&u, &f, sizeof(u));
  return u;
}
static inline unsigned atomicCAS(unsigned* p, unsigned expect, unsigned v) {
  __atomic_compare_exchange_n(p, &expect, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return expect;
}

XG_FN uint64_t xg_ld_acquire_sys(const uint64_t* p) {
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
XG_FN uint64_t xg_ld_relaxed_sys(const uint64_t* p) {
  return __atomic_load_n(p, __ATOMIC_RELAXED);
}
XG_FN void xg_st_release_sys(uint64_t* p, uint64_t v) {
  __atomic_store_n(p, v, __ATOMIC_RELEASE);
}
XG_FN void xg_add_release_sys(uint64_t* p, uint64_t v) {
  __atomic_fetch_add(p, v, __ATOMIC_RELEASE);
}
XG_FN void xg_add_relaxed_sys(uint64_t* p, uint64_t v) {
  __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}
XG_FN uint32_t xg_ld_vol_u32(const uint32_t* p) {
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
XG_FN void xg_st_vol_u32(uint32_t* p, uint32_t v) {
  __atomic_store_n(p, v, __ATOMIC_RELEASE);
}
XG_FN uint64_t xg_ld_vol_u64(const uint64_t* p) {
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
XG_FN void xg_st_vol_u64(uint64_t* p, uint64_t v) {
  __atomic_store_n(p, v, __ATOMIC_RELEASE);
}
XG_FN long long xg_ld_vol_i64(const long long* p) {
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
XG_FN void xg_publish_u32(uint32_t* p, uint32_t v) {
  __atomic_store_n(p, v, __ATOMIC_RELEASE);
}
XG_FN uint64_t xg_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
/* The kernel boundary, for ThreadSanitizer: a launch releases on its region's address before
 * the kernel starts (shunt_kcpu_launch's __tsan_release), a relaxed wait on that rank acquires it. Plain
 * runs need nothing: the launcher's writes precede the kernel threads' start. */
#if defined(__SANITIZE_THREAD__)
extern "C" void __tsan_acquire(void* addr);
XG_FN void xg_launch_acquire(uint64_t region) {
  __tsan_acquire((void*)(uintptr_t)region);
}
#else
XG_FN void xg_launch_acquire(uint64_t region) {
  (void)region;
}
#endif

/* A poll hands the host thread to the next device thread; the host thread idles until a write
 * that may end some wait is announced (kcpu_kernel.h). */
extern "C" void shunt_kcpu_progress(void);
extern "C" void shunt_kcpu_relax(uint32_t polls);
XG_FN void xg_relax(uint32_t polls) {
  shunt_kcpu_relax(polls);
}
XG_FN void xg_progress(void) {
  shunt_kcpu_progress();
}
/* A device read of mapped host memory, a PCIe round trip on a GPU: counted
 * (shunt_kcpu_pcie_reads). */
extern "C" void shunt_kcpu_pcie_read(void);
XG_FN void xg_pcie_read(void) {
  shunt_kcpu_pcie_read();
}

#endif
