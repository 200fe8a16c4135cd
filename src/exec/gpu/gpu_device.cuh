/* The device primitives the executor kernel is written in, for nvcc: memory-model accesses,
 * atomics, fences, the clock and the spin pause. The CPU build of the same kernel
 * (exec/kcpu/kcpu_shim.h) provides every name here with the same meaning for device threads
 * that are fibers of host threads.
 *
 * Promises:
 * - *_sys accesses are system scope (peers in other processes, mapped host memory): acquire
 *   loads, release stores and reductions, or relaxed ones. Sm_70 and later use the PTX
 *   memory-model instructions; older architectures a volatile access with a system fence.
 * - xg_ld_vol_* / xg_st_vol_* are single volatile accesses of words that other threads,
 *   blocks or ranks write or read concurrently (control words, counters, the error record);
 *   ordering around them comes from the fences the caller places.
 * - xg_publish_u32 makes every earlier write of the thread visible system-wide before the
 *   word itself (a fence, then the store).
 * - xg_now_ns reads %globaltimer; xg_relax(polls) is what a spin loop does between two polls
 *   (polls: how many this wait has made); xg_progress follows a write that may end a wait.
 * - xg_launch_acquire(region): after a relaxed wait on the rank owning `region`, what that
 *   rank's stream wrote before its kernel started is visible (the kernel boundary; nothing to
 *   do on a GPU, the CPU build tells ThreadSanitizer).
 * Only for inclusion by exec/gpu/gpu_xctx.cuh. */
#ifndef SHUNT_EXEC_GPU_DEVICE_CUH
#define SHUNT_EXEC_GPU_DEVICE_CUH

#include <stdint.h>

#define XG_FN static __device__ __forceinline__
#define XG_NOINLINE static __device__ __noinline__
/* The block's dynamic shared memory, as an int4 array named `name`. */
#define XG_DYN_SHARED(name) extern __shared__ int4 name[]
/* How the kernel's entry points are declared (gpu_kernel.cuh). */
#define SHUNT_GPU_ENTRY extern "C" __global__ void

XG_FN uint64_t xg_ld_acquire_sys(const uint64_t* p) {
  uint64_t v;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
  asm volatile("ld.acquire.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
#else
  v = *(const volatile uint64_t*)p;
  __threadfence_system();
#endif
  return v;
}

XG_FN uint64_t xg_ld_relaxed_sys(const uint64_t* p) {
  uint64_t v;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
  asm volatile("ld.relaxed.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
#else
  v = *(const volatile uint64_t*)p;
#endif
  return v;
}

XG_FN void xg_st_release_sys(uint64_t* p, uint64_t v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
  asm volatile("st.release.sys.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
#else
  __threadfence_system();
  *(volatile uint64_t*)p = v;
#endif
}

XG_FN void xg_add_release_sys(uint64_t* p, uint64_t v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
  asm volatile("red.release.sys.add.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
#else
  __threadfence_system();
  atomicAdd((unsigned long long*)p, (unsigned long long)v);
#endif
}

XG_FN void xg_add_relaxed_sys(uint64_t* p, uint64_t v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
  asm volatile("red.relaxed.sys.add.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
#else
  atomicAdd((unsigned long long*)p, (unsigned long long)v);
#endif
}

XG_FN uint32_t xg_ld_vol_u32(const uint32_t* p) {
  return *(const volatile uint32_t*)p;
}
XG_FN void xg_st_vol_u32(uint32_t* p, uint32_t v) {
  *(volatile uint32_t*)p = v;
}
XG_FN uint64_t xg_ld_vol_u64(const uint64_t* p) {
  return *(const volatile uint64_t*)p;
}
XG_FN void xg_st_vol_u64(uint64_t* p, uint64_t v) {
  *(volatile uint64_t*)p = v;
}
XG_FN long long xg_ld_vol_i64(const long long* p) {
  return *(const volatile long long*)p;
}

XG_FN void xg_publish_u32(uint32_t* p, uint32_t v) {
  __threadfence_system();
  *(volatile uint32_t*)p = v;
}

XG_FN uint64_t xg_now_ns(void) {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

XG_FN void xg_relax(uint32_t polls) {
  (void)polls;
}

/* A write that may end another thread's wait: nothing to do where waiters poll memory. */
XG_FN void xg_progress(void) {}
/* A read of mapped host memory (a PCIe round trip): counted by the CPU build only. */
XG_FN void xg_pcie_read(void) {}

/* What the host side of a rank's launch wrote before the kernel, made visible to a thread that
 * observed the kernel running (a relaxed wait): on the GPU the kernel boundary does it. */
XG_FN void xg_launch_acquire(uint64_t region) {
  (void)region;
}

#endif
