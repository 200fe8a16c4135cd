/* What one launch of the GPU backend does around the executor kernel, decided once for the
 * CUDA launcher (gpu_kernel.cu: stream copies and kernels) and the kernel's CPU build
 * (exec/kcpu: memcpy and host threads), so both bind buffers and scale the same way.
 *
 * Promises: shunt_gpu_steps_plan fills the steps in the order they run, each empty when its
 * byte or element count is 0:
 *   1. seed:  copy the user's output into the staging output (an aliased call that is staged);
 *   2. pre:   scale the input into the plan's input (PreMulSum, floating avg), or
 *      copy_in: copy it there (a staged input);
 *   3. the executor kernel on (in, out), with alias for an in-place call (one buffer a view into
 *      the other: exec/program.h, the input in the output or, for reducescatter, the output in
 *      the input, whose view is then copied back when the input was staged);
 *   4. post:  divide the result (integer avg);
 *   5. back:  copy the staging output to the user's output.
 * It returns NULL, or why the launch cannot be done (nothing is to be run then). The binding
 * itself is exec/bind.h's. C11 and CUDA host code. */
#ifndef SHUNT_EXEC_GPU_STEPS_H
#define SHUNT_EXEC_GPU_STEPS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "exec/bind.h"
#include "exec/gpu/gpu_abi.h"
#include "exec/ops/dtype.h"
#include "exec/program.h"
#include "plan/plan.h"
#include "plan/planset.h"

struct shunt_gpu_steps {
  char* seed_dst;
  const char* seed_src;
  uint64_t seed_bytes;
  char* pre_dst;
  const char* pre_src;
  uint64_t pre_n; /* elements */
  struct shunt_red pre_red;
  /* A device-resident PreMulSum scalar (one element of the dtype), loaded by the pre kernel
   * when it runs, over pre_red.arg; NULL: pre_red.arg is the scalar. */
  const void* pre_scalar;
  char* copy_in_dst;
  const char* copy_in_src;
  uint64_t copy_in_bytes;
  char* in; /* the plan's input and output */
  char* out;
  bool alias;      /* in place: every rank's view lies in its other buffer (exec/bind.h) */
  uint64_t post_n; /* elements of out */
  struct shunt_red post_red;
  char* back_dst;
  const char* back_src;
  uint64_t back_bytes;
  bool zc_in, zc_out; /* peers reach the user's input / output themselves (zero-copy) */
};

/* Whether program p can run on rank `rank` of `nranks` of a world laid out as `lay`: a program,
 * lowered for that rank, whose scratch (per half of a double scratch) fits. False with why. */
static inline bool shunt_gpu_prog_fits(const struct shunt_program* p, uint32_t rank, uint32_t nranks,
                                       const struct shunt_gpu_layout* lay, char* why, size_t len) {
  if (!p || p->magic != SHUNT_PROG_MAGIC) {
    if (why && len) snprintf(why, len, "not a program");
    return false;
  }
  if (p->rank != rank || p->nranks != nranks) {
    if (why && len)
      snprintf(why, len, "program for rank %u of %u, world rank %u of %u", p->rank, p->nranks, rank, nranks);
    return false;
  }
  uint64_t cap = p->double_scratch ? lay->scratch_bytes / 2 : lay->scratch_bytes;
  if (p->scratch_bytes > cap) {
    if (why && len)
      snprintf(why, len, "plan needs %llu bytes of scratch per half, the world has %llu",
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

/* zc_in / zc_out: every rank agreed that peers reach the call's input / output in place
 * (zero-copy, gpu_reg.h); used only where no scaling comes first (s->zc_in / zc_out say which
 * are used). scalar_on_device: premul_scalar is device memory (ncclScalarDevice), never read
 * here: the pre kernel reads it when it runs, so a graph replay sees the value of its own time. */
static inline const char* shunt_gpu_steps_plan_zc(const struct shunt_program* p, uint32_t nranks,
                                                  const void* user_in_, void* user_out_,
                                                  const void* premul_scalar, bool scalar_on_device,
                                                  char* stage_in, char* stage_out, uint64_t in_cap,
                                                  uint64_t out_cap, bool zc_in, bool zc_out,
                                                  struct shunt_gpu_steps* s) {
  memset(s, 0, sizeof(*s));
  const char* user_in = (const char*)user_in_;
  char* user_out = (char*)user_out_;
  /* How avg and PreMulSum reach NCCL's result with a plan that sums each contribution once
   * (exec/elem.h): scale before (floating avg, PreMulSum) or divide after (integer avg). */
  bool pre = false, postdiv = false;
  if (shunt_coll_reduces((enum shunt_coll)p->coll)) {
    if (p->dtype >= SHUNT_DT_COUNT || p->redop > SHUNT_REDOP_PREMULSUM)
      return "the dtype and op are not computed by the GPU executor";
    if (p->redop == SHUNT_REDOP_PREMULSUM) pre = true;
    if (p->redop == SHUNT_REDOP_AVG) {
      if (shunt_ty_is_float(p->dtype))
        pre = true;
      else
        postdiv = true;
    }
    if (p->redop == SHUNT_REDOP_PREMULSUM && !premul_scalar) return "PreMulSum without a scalar";
  }
  uint64_t es = shunt_ty_size(p->dtype);
  if (es == 0) es = 1;
  if (pre) zc_in = zc_out = false; /* peers must see the scaled contribution: staged */
  struct shunt_bind bd;
  const char* why =
      shunt_bind_decide_zc(p, user_in, user_out, pre, stage_in, in_cap, out_cap, zc_in, zc_out, &bd);
  if (why) return why;
  /* In place, the buffer that holds the other is what peers reach (the view is never reached
   * apart from it): the output, or the input for a collective whose output lies in its input. */
  bool out_in_in = bd.alias && SHUNT_PROG_OUT_IN_INPUT(p);
  s->zc_out = zc_out && !bd.stage_out && !out_in_in;
  s->zc_in = zc_in && !bd.stage_in && (!bd.alias || out_in_in);
  struct shunt_red red;
  red.ty = p->dtype;
  red.kind = SHUNT_RED_PREMULSUM;
  red.arg = 0;
  if (pre && p->redop == SHUNT_REDOP_PREMULSUM && scalar_on_device)
    s->pre_scalar = premul_scalar;
  else if (pre)
    red.arg = p->redop == SHUNT_REDOP_PREMULSUM ? shunt_ty_load(premul_scalar, p->dtype)
                                                : shunt_avg_scalar(p->dtype, (int)nranks);
  s->pre_red = red;
  char* out;
  char* in;
  if (out_in_in) {
    /* The whole input is staged (and scaled there) or the user's own; the output is the view at
     * the same place inside it, copied back below when staged. */
    in = bd.stage_in ? stage_in : (char*)(uintptr_t)user_in;
    if (pre) {
      s->pre_dst = in;
      s->pre_src = user_in;
      s->pre_n = p->in_bytes / es;
    } else if (in != user_in) {
      s->copy_in_dst = in;
      s->copy_in_src = user_in;
      s->copy_in_bytes = p->in_bytes;
    }
    out = in + (user_out - user_in);
  } else {
    /* The input inside the output, or apart from it. */
    out = bd.stage_out ? stage_out : user_out;
    if (bd.stage_out && bd.alias && user_out != stage_out) {
      s->seed_dst = stage_out;
      s->seed_src = user_out;
      s->seed_bytes = p->out_bytes;
    }
    if (bd.stage_in) {
      in = stage_in;
      const char* src = bd.alias && bd.stage_out ? out + (user_in - user_out) : user_in;
      if (pre) {
        s->pre_dst = in;
        s->pre_src = src;
        s->pre_n = p->in_bytes / es;
      } else if (in != src) {
        s->copy_in_dst = in;
        s->copy_in_src = src;
        s->copy_in_bytes = p->in_bytes;
      }
    } else if (bd.alias) {
      in = out + (user_in - user_out);
      if (pre) {
        s->pre_dst = in;
        s->pre_src = in;
        s->pre_n = p->in_bytes / es;
      }
    } else {
      in = (char*)(uintptr_t)user_in; /* read only: no op of a plan writes its input */
    }
  }
  s->in = in;
  s->out = out;
  s->alias = bd.alias;
  if (postdiv) {
    s->post_n = p->out_bytes / es;
    s->post_red.ty = p->dtype;
    s->post_red.kind = SHUNT_RED_SUMPOSTDIV;
    s->post_red.arg = nranks;
  }
  if (out != user_out) {
    s->back_dst = user_out;
    s->back_src = out;
    s->back_bytes = p->out_bytes;
  }
  return NULL;
}

static inline const char* shunt_gpu_steps_plan(const struct shunt_program* p, uint32_t nranks,
                                               const void* user_in, void* user_out, const void* premul_scalar,
                                               char* stage_in, char* stage_out, uint64_t in_cap,
                                               uint64_t out_cap, struct shunt_gpu_steps* s) {
  return shunt_gpu_steps_plan_zc(p, nranks, user_in, user_out, premul_scalar, false, stage_in, stage_out,
                                 in_cap, out_cap, false, false, s);
}

/* The launch's part of the kernel arguments: the program as the kernel reads it, its live
 * semaphores, the buffers the steps bound, and how the kernel ends and reads its program. */
static inline void shunt_gpu_kargs_run(struct shunt_gpu_kargs* k, const struct shunt_program* prog,
                                       long long* sems, const struct shunt_gpu_steps* st, bool port_used,
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
