/* The GPU side of a launch, shared by the CUDA launcher (gpu_launch.c) and the kernel's CPU
 * build (exec/kcpu): whether a program fits a world, what the kernel needs to know of it, and
 * the launch's kernel arguments from the steps exec/steps.h planned (staging, scaling and
 * copy-out are planned there, for every executor). C11 and CUDA host code. */
#ifndef SHUNT_EXEC_GPU_STEPS_H
#define SHUNT_EXEC_GPU_STEPS_H

#include <stdbool.h>
#include <stdint.h>

#include "exec/gpu/gpu_abi.h"
#include "exec/ops/packet.h"
#include "exec/program.h"
#include "exec/steps.h"
#include "plan/plan.h"
#include "util/status.h"

/* Whether program p can run on rank `rank` of `nranks` of a world laid out as `lay`: a program,
 * lowered for that rank, whose scratch (per half of a double scratch) fits. False with why. */
static inline bool shunt_gpu_prog_fits(const struct shunt_program* p, uint32_t rank, uint32_t nranks,
                                       const struct shunt_gpu_layout* lay, char* why, size_t len) {
  if (!p || p->magic != SHUNT_PROG_MAGIC) {
    shunt_setf(why, len, "not a program");
    return false;
  }
  if (p->rank != rank || p->nranks != nranks) {
    shunt_setf(why, len, "program for rank %u of %u, world rank %u of %u", p->rank, p->nranks, rank, nranks);
    return false;
  }
  uint64_t cap = shunt_scratch_cap(lay->scratch_bytes, p->double_scratch);
  if (p->scratch_bytes > cap) {
    shunt_setf(why, len, "plan needs %llu bytes of scratch per half, the world has %llu",
               (unsigned long long)p->scratch_bytes, (unsigned long long)cap);
    return false;
  }
  return true;
}

/* Whether the program pushes port-channel triggers (the kernel then drains the proxy before
 * its execution ends). */
static inline bool shunt_gpu_uses_port(const struct shunt_program* p) {
  const struct shunt_prog_op* ops = shunt_prog_ops(p);
  for (uint32_t i = 0; i < p->nops; i++)
    if (ops[i].chan_type == SHUNT_CHAN_PORT) return true;
  const struct shunt_prog_chan* ch = shunt_prog_chans(p);
  for (uint32_t i = 0; i < p->nchans; i++)
    if (ch[i].type == SHUNT_CHAN_PORT) return true;
  return false;
}

/* Bytes of shared memory the program is read from (kargs.prog_smem): all of it when it fits the
 * default dynamic shared memory, else 0 (read from global memory). */
static inline uint32_t shunt_gpu_prog_smem(const struct shunt_program* p) {
  uint64_t b = ((uint64_t)p->total_bytes + 15u) / 16u * 16u;
  return b <= SHUNT_GPU_PROG_SMEM_MAX ? (uint32_t)b : 0u;
}

/* The launch's part of the kernel arguments: the program as the kernel reads it, its live
 * semaphores, the buffers the steps bound, and how the kernel ends and reads its program. */
static inline void shunt_gpu_kargs_run(struct shunt_gpu_kargs* k, const struct shunt_program* prog,
                                       long long* sems, const struct shunt_steps* st, bool port_used,
                                       uint32_t prog_smem) {
  k->prog = prog;
  k->sems = sems;
  k->in = st->in;
  k->out = st->out;
  k->port_used = port_used ? 1u : 0u;
  k->alias = st->alias ? 1u : 0u;
  k->prog_smem = prog_smem;
}

#endif
