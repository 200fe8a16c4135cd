/* Whole-plan and per-GPU static checks; op checks are in check_ops.c, balance in check_sync.c. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/check_internal.h"

void cerr(struct cctx* c, const char* path, const char* fmt, ...) {
  c->nerr++;
  if (c->errs->n >= SHUNT_PLAN_ERRORS_MAX) {
    c->errs->dropped++; /* no formatting: a bad plan may produce millions of errors */
    return;
  }
  char reason[384];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(reason, sizeof(reason), fmt, ap);
  va_end(ap);
  shunt_plan_error_add(c->errs, c->p->file, path, "%s", reason);
}

void oppath(const struct oppos* at, const char* suffix, char* buf, size_t len) {
  if (at->j >= 0)
    snprintf(buf, len, "gpus[%u].threadblocks[%u].ops[%u].ops[%d]%s", at->r, at->b, at->i, at->j, suffix);
  else
    snprintf(buf, len, "gpus[%u].threadblocks[%u].ops[%u]%s", at->r, at->b, at->i, suffix);
}

void operr(struct cctx* c, const struct oppos* at, const char* suffix, const char* fmt, ...) {
  if (c->errs->n >= SHUNT_PLAN_ERRORS_MAX) {
    c->nerr++;
    c->errs->dropped++;
    return;
  }
  char path[256], reason[384];
  oppath(at, suffix, path, sizeof(path));
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(reason, sizeof(reason), fmt, ap);
  va_end(ap);
  cerr(c, path, "%s", reason);
}

void visit_ops(struct cctx* c, op_visit_fn fn, void* arg) {
  const struct shunt_plan* p = c->p;
  for (uint32_t r = 0; r < p->ngpus; r++)
    for (uint32_t b = 0; b < p->gpus[r].nthreadblocks; b++) {
      const struct shunt_plan_threadblock* tb = &p->gpus[r].threadblocks[b];
      for (uint32_t i = 0; i < tb->nops; i++) {
        struct oppos at = {r, b, i, -1};
        fn(c, &at, &tb->ops[i], NULL, arg);
        for (uint32_t j = 0; j < tb->ops[i].nops; j++) {
          struct oppos in = {r, b, i, (int32_t)j};
          fn(c, &in, &tb->ops[i].ops[j], &tb->ops[i], arg);
        }
      }
    }
}

static void check_top(struct cctx* c, const struct shunt_check_opts* opts) {
  const struct shunt_plan* p = c->p;
  if (!p->name[0]) cerr(c, "name", "empty plan name");
  if (p->min_message_size > p->max_message_size)
    cerr(c, "min_message_size", "min_message_size %llu is greater than max_message_size %llu",
         (unsigned long long)p->min_message_size, (unsigned long long)p->max_message_size);
  if (p->num_threads_per_block == 0 || p->num_threads_per_block > SHUNT_PLAN_MAX_THREADS)
    cerr(c, "num_threads_per_block", "%u threads per block (allowed 1..%d)", p->num_threads_per_block,
         SHUNT_PLAN_MAX_THREADS);
  if (p->buffer_alignment == 0 || p->buffer_alignment % 16)
    cerr(c, "buffer_alignment",
         "buffer_alignment %u is not a positive multiple of 16 (the executor's vector unit)",
         p->buffer_alignment);
  if (p->ngpus == 0) cerr(c, "gpus", "no GPUs");
  /* "root" (shunt's extension) names a rank of a rooted collective's plan; nothing else has one. */
  bool rooted = shunt_coll_rooted(p->coll);
  if (rooted && p->ngpus && p->root >= p->ngpus)
    cerr(c, "root", "root %u is not a rank of this %u-rank plan", p->root, p->ngpus);
  if (!rooted && p->root)
    cerr(c, "root", "root %u on a %s plan: only plans of a collective with a root have one", p->root,
         p->collective);
  (void)opts;
}

static void check_chunks(struct cctx* c) {
  const struct shunt_plan* p = c->p;
  char path[128];
  for (uint32_t r = 0; r < p->ngpus; r++) {
    const struct shunt_plan_gpu* g = &p->gpus[r];
    if ((int64_t)g->id != (int64_t)r) {
      snprintf(path, sizeof(path), "gpus[%u].id", r);
      cerr(c, path, "id %d does not match its position %u", g->id, r);
    }
    if (g->input_chunks == 0 && g->output_chunks == 0) {
      snprintf(path, sizeof(path), "gpus[%u]", r);
      cerr(c, path, "input_chunks and output_chunks are both 0: no chunk unit");
    }
    if (r > 0 &&
        (g->input_chunks != p->gpus[0].input_chunks || g->output_chunks != p->gpus[0].output_chunks)) {
      snprintf(path, sizeof(path), "gpus[%u]", r);
      cerr(c, path, "chunk counts %u/%u differ from gpus[0] (%u/%u): ranks must share one chunk unit",
           g->input_chunks, g->output_chunks, p->gpus[0].input_chunks, p->gpus[0].output_chunks);
    }
  }
  if (p->ngpus == 0) return;
  uint64_t in = p->gpus[0].input_chunks, out = p->gpus[0].output_chunks, n = p->ngpus;
  if (!in || !out) return;
  const char* want = shunt_coll_chunk_rule(p->coll, n, in, out);
  if (want)
    cerr(c, "gpus[0].output_chunks", "%s needs %s (have %llu and %llu for %llu ranks)", p->collective, want,
         (unsigned long long)in, (unsigned long long)out, (unsigned long long)n);
}

static void check_channels(struct cctx* c) {
  const struct shunt_plan* p = c->p;
  char path[160];
  /* Per peer: bit t set when this GPU declares a channel of type t to it. */
  unsigned char* reach = calloc(p->ngpus ? p->ngpus : 1, 1);
  if (!reach) {
    cerr(c, "gpus", "out of memory checking channels");
    return;
  }
  for (uint32_t r = 0; r < p->ngpus; r++) {
    const struct shunt_plan_gpu* g = &p->gpus[r];
    for (int t = SHUNT_CHAN_MEMORY; t <= SHUNT_CHAN_PORT; t++)
      for (uint32_t i = 0; i < g->nchannels[t]; i++)
        if ((uint32_t)g->channels[t][i].peer < p->ngpus)
          reach[g->channels[t][i].peer] |= (unsigned char)(1u << t);
    for (int t = SHUNT_CHAN_MEMORY; t <= SHUNT_CHAN_SWITCH; t++)
      for (uint32_t i = 0; i < g->nchannels[t]; i++) {
        const struct shunt_plan_channel* ch = &g->channels[t][i];
        if (t != SHUNT_CHAN_SWITCH) {
          snprintf(path, sizeof(path), "gpus[%u].channels[%u].connected_to[%u]", r, ch->decl_index,
                   ch->elem_index);
          if ((uint32_t)ch->peer >= p->ngpus)
            cerr(c, path, "peer %d is not a rank of this plan (%u ranks)", ch->peer, p->ngpus);
          else if ((uint32_t)ch->peer == r)
            cerr(c, path, "channel to itself");
          continue;
        }
        snprintf(path, sizeof(path), "gpus[%u].channels[%u].rank_groups[%u].ranks", r, ch->decl_index,
                 ch->elem_index);
        bool self = false;
        if (ch->nranks == 0) cerr(c, path, "empty multicast group");
        if (ch->nranks > p->ngpus) {
          cerr(c, path, "%u ranks in a multicast group of a %u-rank plan", ch->nranks, p->ngpus);
          continue;
        }
        for (uint32_t k = 0; k < ch->nranks; k++) {
          uint32_t x = (uint32_t)ch->ranks[k];
          if (x >= p->ngpus) {
            cerr(c, path, "rank %d is not a rank of this plan", ch->ranks[k]);
            continue;
          }
          if (x == r) self = true;
          if (reach[x] & 0x80) cerr(c, path, "rank %d listed twice", ch->ranks[k]);
          reach[x] |= 0x80;
        }
        for (uint32_t k = 0; k < ch->nranks; k++)
          if ((uint32_t)ch->ranks[k] < p->ngpus) reach[ch->ranks[k]] &= 0x7f;
        if (ch->nranks && !self) cerr(c, path, "the multicast group does not include rank %u itself", r);
      }
    for (uint32_t i = 0; i < g->nremote_buffers; i++) {
      const struct shunt_plan_remote_buffer* rb = &g->remote_buffers[i];
      snprintf(path, sizeof(path), "gpus[%u].remote_buffers[%u]", r, i);
      if ((uint32_t)rb->rank >= p->ngpus) {
        cerr(c, path, "rank %d is not a rank of this plan (%u ranks)", rb->rank, p->ngpus);
        continue;
      }
      if ((uint32_t)rb->rank == r) cerr(c, path, "remote buffer on the GPU itself");
      if (!rb->access) cerr(c, path, "empty access_channel_types");
      for (int t = SHUNT_CHAN_MEMORY; t <= SHUNT_CHAN_PORT; t++)
        if ((rb->access & (1u << t)) && !(reach[rb->rank] & (1u << t)))
          cerr(c, path, "accessed over %s channels but rank %u declares no %s channel to rank %d",
               shunt_chan_type_name((enum shunt_chan_type)t), r,
               shunt_chan_type_name((enum shunt_chan_type)t), rb->rank);
      if (p->reuse_resources && rb->type != SHUNT_BUF_SCRATCH)
        cerr(c, path, "reuse_resources plans may only access remote scratch, not '%s'",
             shunt_buf_type_name(rb->type));
    }
    for (int t = SHUNT_CHAN_MEMORY; t <= SHUNT_CHAN_PORT; t++)
      for (uint32_t i = 0; i < g->nchannels[t]; i++)
        if ((uint32_t)g->channels[t][i].peer < p->ngpus) reach[g->channels[t][i].peer] = 0;
  }
  free(reach);
}

static void check_blocks(struct cctx* c, const struct shunt_check_opts* opts) {
  const struct shunt_plan* p = c->p;
  char path[160];
  for (uint32_t r = 0; r < p->ngpus; r++) {
    const struct shunt_plan_gpu* g = &p->gpus[r];
    snprintf(path, sizeof(path), "gpus[%u].threadblocks", r);
    if (g->nthreadblocks == 0) cerr(c, path, "no threadblocks");
    if (opts && opts->max_threadblocks && g->nthreadblocks > opts->max_threadblocks)
      cerr(c, path, "%u threadblocks; the backend runs at most %u co-resident blocks", g->nthreadblocks,
           opts->max_threadblocks);
    for (uint32_t b = 0; b < g->nthreadblocks; b++) {
      const struct shunt_plan_threadblock* tb = &g->threadblocks[b];
      if (tb->id != b) {
        snprintf(path, sizeof(path), "gpus[%u].threadblocks[%u].id", r, b);
        cerr(c, path, "id %u does not match its position %u", tb->id, b);
      }
      if (tb->nops_flat > SHUNT_PLAN_MAX_OPS_PER_BLOCK) {
        snprintf(path, sizeof(path), "gpus[%u].threadblocks[%u].ops", r, b);
        cerr(c, path, "%u ops including pipeline bodies (limit %d)", tb->nops_flat,
             SHUNT_PLAN_MAX_OPS_PER_BLOCK);
      }
      for (int t = SHUNT_CHAN_MEMORY; t <= SHUNT_CHAN_SWITCH; t++) {
        const struct shunt_plan_table* tab = &tb->channels[t];
        snprintf(path, sizeof(path), "gpus[%u].threadblocks[%u].channels", r, b);
        if (tab->n > SHUNT_PLAN_MAX_CHANNELS_PER_TYPE)
          cerr(c, path, "%u %s channels (limit %d per type)", tab->n,
               shunt_chan_type_name((enum shunt_chan_type)t), SHUNT_PLAN_MAX_CHANNELS_PER_TYPE);
        for (uint32_t k = 0; k < tab->n; k++)
          if (tab->ids[k] >= g->nchannels[t])
            cerr(c, path, "%s channel id %u does not exist (rank %u declares %u)",
                 shunt_chan_type_name((enum shunt_chan_type)t), tab->ids[k], r, g->nchannels[t]);
      }
      for (int t = SHUNT_CHAN_MEMORY; t <= SHUNT_CHAN_PORT; t++) {
        const struct shunt_plan_table* tab = &tb->remote_refs[t];
        snprintf(path, sizeof(path), "gpus[%u].threadblocks[%u].remote_buffer_refs", r, b);
        if (tab->n > SHUNT_PLAN_MAX_REMOTE_PER_TYPE)
          cerr(c, path, "%u %s remote buffers (limit %d per type)", tab->n,
               shunt_chan_type_name((enum shunt_chan_type)t), SHUNT_PLAN_MAX_REMOTE_PER_TYPE);
        for (uint32_t k = 0; k < tab->n; k++) {
          if (tab->ids[k] >= g->nremote_buffers)
            cerr(c, path, "remote buffer id %u does not exist (rank %u declares %u)", tab->ids[k], r,
                 g->nremote_buffers);
          else if (!(g->remote_buffers[tab->ids[k]].access & (1u << t)))
            cerr(c, path, "remote buffer %u is listed for %s access but its access_channel_types lack it",
                 tab->ids[k], shunt_chan_type_name((enum shunt_chan_type)t));
        }
      }
    }
  }
}

unsigned shunt_plan_check(const struct shunt_plan* p, const struct shunt_check_opts* opts,
                          struct shunt_plan_errors* errs) {
  struct cctx c = {.p = p, .errs = errs};
  check_top(&c, opts);
  check_chunks(&c);
  check_channels(&c);
  check_blocks(&c, opts);
  check_ops(&c);
  check_balance(&c);
  return c.nerr;
}
