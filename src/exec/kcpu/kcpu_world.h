/* A rank of the GPU backend with its kernel compiled for the CPU (kcpu_kernel.h): the region,
 * the trigger FIFO and the proxy laid out and driven exactly as the CUDA world does
 * (exec/gpu/gpu_world.h, gpu_abi.h), in host memory, so the kernel's code runs against the
 * same layout, flags and protocol it has on a GPU. Every rank of a world is a thread of one
 * process. C.
 *
 * Promises:
 * - Creation and destruction are collective over the caller's exchange; sizes and rank counts
 *   must agree (checked); all ranks get a world or none keeps one.
 * - The proxy thread serves the FIFO in order as the CUDA proxy does: data copied (8-byte
 *   atomic words where aligned, so packets land whole per word), then the peer's counter
 *   written with its next value (a release store), a SYNC trigger publishing completion.
 * - shunt_kcpu_launch runs one execution as shunt_gpu_launch enqueues it (the steps of
 *   exec/steps.h: staging, scaling, the executor kernel, the integer-avg division,
 *   copy-out) and returns when it is complete. A failed wait is reported by
 *   shunt_kcpu_world_check in the CUDA world's words; the world is then broken and refuses
 *   later launches.
 * - Nothing prints; errors are values with a message. */
#ifndef SHUNT_EXEC_KCPU_WORLD_H
#define SHUNT_EXEC_KCPU_WORLD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "exec/program.h"
#include "transport/exchange.h"
#include "util/status.h"

struct shunt_kcpu_world_config {
  uint64_t scratch_bytes, input_bytes, output_bytes;
  uint64_t timeout_ms; /* bound of every wait in the kernel (0: none, as the GPU's default) */
};

struct shunt_kcpu_world;

int shunt_kcpu_world_create(uint32_t rank, uint32_t nranks, const struct shunt_kcpu_world_config* cfg,
                            const struct shunt_world_exchange* bs, struct shunt_kcpu_world** out, char* err,
                            size_t len);
/* Collective; every launch of the world has returned. */
void shunt_kcpu_world_destroy(struct shunt_kcpu_world* w);
/* SHUNT_OK, or SHUNT_E_TIMEOUT with the first failure of this rank in words (p, when
 * it is the program that ran, names the op). */
int shunt_kcpu_world_check(struct shunt_kcpu_world* w, const struct shunt_program* p, char* err, size_t len);
/* Raises the world's abort word, as shunt_gpu_world_abort: every waiting kernel gives up.
 * Callable from any thread, during a launch; the world must outlive the call. */
void shunt_kcpu_world_abort(struct shunt_kcpu_world* w);

/* A program prepared for a world: its live semaphores and its launch shape. */
struct shunt_kcpu_prog {
  const struct shunt_program* host; /* the caller's; must outlive this */
  long long* sems;
  uint32_t threads; /* threads per block */
  uint32_t smem;    /* bytes of the program read from shared memory (gpu_steps.h) */
  bool port_used;
};
/* threads: threads per block (capped by the plan's). */
int shunt_kcpu_prog_create(struct shunt_kcpu_world* w, const struct shunt_program* p, uint32_t threads,
                           struct shunt_kcpu_prog** out, char* err, size_t len);
void shunt_kcpu_prog_destroy(struct shunt_kcpu_prog* kp);

struct shunt_kcpu_run {
  const struct shunt_kcpu_prog* prog;
  const void* in;
  void* out;
  const void* premul_scalar; /* PREMULSUM: one element of the program's dtype */
  unsigned skew_us;          /* kcpu_kernel.h: schedule perturbation (0: none) */
};
int shunt_kcpu_launch(struct shunt_kcpu_world* w, const struct shunt_kcpu_run* run, char* err, size_t len);

#endif
