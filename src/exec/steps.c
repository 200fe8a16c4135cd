#include "exec/steps.h"

#include <string.h>

#include "exec/bind.h"
#include "exec/elem.h"

const char* shunt_steps_plan(const struct shunt_program* p, uint32_t nranks, const struct shunt_steps_bufs* b,
                             struct shunt_steps* s) {
  memset(s, 0, sizeof(*s));
  const char* user_in = (const char*)b->user_in;
  char* user_out = (char*)b->user_out;
  char* stage_in = b->stage_in;
  char* stage_out = b->stage_out;
  bool zc_in = b->zc_in, zc_out = b->zc_out;
  if (!user_out) {
    /* No output on this rank (a reduce's other ranks): the plan's output is the staging output,
     * which is then the user's as far as the steps go, so nothing is copied out. */
    if (!stage_out || p->out_bytes > b->out_cap)
      return "the call's output exceeds the world's staging capacity";
    user_out = stage_out;
    zc_out = false;
  }
  /* Scale before (floating avg, PreMulSum) or divide after (integer avg). */
  enum shunt_elem_scaling scaling = SHUNT_SCALE_NONE;
  enum shunt_dtype dt = shunt_dtype_from_code(p->dtype);
  enum shunt_redop op = shunt_redop_from_code(p->redop);
  if (shunt_coll_reduces(shunt_coll_from_code(p->coll))) {
    if (!shunt_elem_supported(dt, op)) return "the dtype and op are not computed by the executor";
    scaling = shunt_elem_scaling(dt, op);
    if (op == SHUNT_REDOP_PREMULSUM && !b->premul_scalar) return "PreMulSum without a scalar";
  }
  bool pre = scaling == SHUNT_SCALE_PRE;
  uint64_t es = shunt_dtype_size(dt);
  if (es == 0) es = 1;
  if (pre) zc_in = zc_out = false; /* peers must see the scaled contribution: staged */
  struct shunt_bind bd;
  const char* why =
      shunt_bind_decide_zc(p, user_in, user_out, pre, stage_in, b->in_cap, b->out_cap, zc_in, zc_out, &bd);
  if (why) return why;
  /* In place, the buffer that holds the other is what peers reach (the view is never reached
   * apart from it): the output, or the input for a collective whose output lies in its input. */
  bool out_in_in = bd.alias && SHUNT_PROG_OUT_IN_INPUT(p);
  s->zc_out = zc_out && !bd.stage_out && !out_in_in;
  s->zc_in = zc_in && !bd.stage_in && (!bd.alias || out_in_in);
  struct shunt_red red = {dt, SHUNT_REDOP_PREMULSUM, 0};
  if (pre && op == SHUNT_REDOP_PREMULSUM && b->scalar_on_device)
    s->pre_scalar = b->premul_scalar;
  else if (pre)
    red.arg = op == SHUNT_REDOP_PREMULSUM ? shunt_dtype_load(b->premul_scalar, dt) : shunt_avg_scalar(dt, (int)nranks);
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
  if (scaling == SHUNT_SCALE_POSTDIV) {
    s->post_n = p->out_bytes / es;
    s->post_red = (struct shunt_red){dt, SHUNT_REDOP_SUMPOSTDIV, nranks};
  }
  if (out != user_out) {
    s->back_dst = user_out;
    s->back_src = out;
    s->back_bytes = p->out_bytes;
  }
  return NULL;
}

void shunt_parts_plan(const struct shunt_plan* plan, const struct shunt_split* s, uint32_t rank,
                      const void* in, void* out, char* tail, struct shunt_parts* parts) {
  memset(parts, 0, sizeof(*parts));
  if (s->head) parts->head = (struct shunt_part){&s->head_shape, in, out};
  if (!s->rest) return;
  uint64_t R = s->unit, q = s->quantum;
  char* tin = tail + shunt_split_tail_in(plan, s, rank, s->inplace);
  char* tout = tail + shunt_split_tail_out(plan, s, rank, s->inplace);
  /* Padding is zeros: it only ever meets padding (split.h), and zeros are valid in every dtype. */
  parts->zero = tail;
  parts->zero_bytes = s->tail_bytes;
  /* Input slice k's rest goes to slice k of the padded input (one slice but for reducescatter
   * and alltoall); the head never touched those bytes, in place either (it writes only the
   * first `head` bytes of each slice). */
  parts->tail_in = (struct shunt_copies){tin, (const char*)in + s->head, q, R, s->rest, s->in_slices};
  parts->tail = (struct shunt_part){&s->tail_shape, tin, tout};
  /* No output on this rank (exec/backend.h): the tail's stays in its staging. */
  if (out) parts->tail_out = (struct shunt_copies){(char*)out + s->head, tout, R, q, s->rest, s->out_slices};
}

static void copies_host(const struct shunt_copies* c) {
  for (uint32_t k = 0; k < c->n; k++)
    memcpy(c->dst + (uint64_t)k * c->dst_stride, c->src + (uint64_t)k * c->src_stride, c->bytes);
}

int shunt_parts_run_host(const struct shunt_plan* plan, const struct shunt_split* s, uint32_t rank,
                         const void* in, void* out, char* tail, shunt_part_fn run, void* ctx) {
  struct shunt_parts pt;
  shunt_parts_plan(plan, s, rank, in, out, tail, &pt);
  if (pt.head.shape) {
    int r = run(ctx, pt.head.shape, false, pt.head.in, pt.head.out);
    if (r) return r;
  }
  if (!pt.tail.shape) return 0;
  memset(pt.zero, 0, pt.zero_bytes);
  copies_host(&pt.tail_in);
  int r = run(ctx, pt.tail.shape, true, pt.tail.in, pt.tail.out);
  if (r) return r;
  copies_host(&pt.tail_out);
  return 0;
}
