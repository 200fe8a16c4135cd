/* Plan -> Program: chunk arithmetic (§4.2), tbg slices, packet doubling, pipeline data. */
#include "exec/lower.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/lower_internal.h"
#include "plan/check.h"

#define ENC_LIMIT (UINT64_C(1) << 32)

struct vec {
  void* v;
  uint32_t n, cap;
};

struct builder {
  const struct shunt_plan* plan;
  const struct shunt_plan_gpu* g;
  uint32_t rank;
  uint64_t chunk, align;
  uint64_t out_stride; /* head runs: bytes between rank slices of the output (allgather), of the
                         input (reducescatter) or of both (alltoall), else 0 */
  uint32_t payload;
  struct vec blocks, ops, refs, chans, u32, sw, swr;
  /* The current block's ops before which a block barrier runs (plan/check.h,
   * shunt_plan_block_syncs): flat positions, pipeline bodies after their pipeline. */
  bool* sync_before;
  uint32_t nsync;
  char* reason;
  size_t len;
  bool failed;
};

static void fail(struct builder* b, const char* fmt, ...) SHUNT_PRINTF(2, 3);
static void fail(struct builder* b, const char* fmt, ...) {
  if (b->failed) return;
  b->failed = true;
  if (!b->reason || !b->len) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(b->reason, b->len, fmt, ap);
  va_end(ap);
}

static void* push(struct builder* b, struct vec* v, size_t elem) {
  if (v->n == v->cap) {
    uint32_t cap = v->cap ? v->cap * 2 : 16;
    void* nv = realloc(v->v, (size_t)cap * elem);
    if (!nv) {
      fail(b, "out of memory");
      return NULL;
    }
    v->v = nv;
    v->cap = cap;
  }
  void* e = (char*)v->v + (size_t)v->n++ * elem;
  memset(e, 0, elem);
  return e;
}

uint64_t shunt_lower_split(uint64_t x, uint64_t k, uint64_t g, uint64_t a) {
  uint64_t n = x / a;
  uint64_t rem = n % g;
  return (k * (n / g) + (k < rem ? k : rem)) * a;
}

/* Whether entry i (sources first, then destinations) of an op is a packet region (§7.3). */
bool shunt_lower_is_packet_ref(enum shunt_op_type t, enum shunt_chan_type ct, bool src, uint32_t i) {
  switch (t) {
    case SHUNT_OP_CPKT:
      return !src && i == 0;
    case SHUNT_OP_UPKT:
      return src && i == 0;
    case SHUNT_OP_PPKT:
      return !src || ct == SHUNT_CHAN_PORT;
    case SHUNT_OP_RPPKT:
      return !src || i == 0;
    case SHUNT_OP_REPKT:
      return src && i >= 1;
    case SHUNT_OP_RESPKT:
    case SHUNT_OP_RECPKT:
    case SHUNT_OP_RECSPKT:
      return i >= 1;
    case SHUNT_OP_GSTOREPKT:
      return i == 0;
    default:
      return false;
  }
}

static uint32_t lower_ref(struct builder* b, const struct shunt_plan_op* o, const struct shunt_plan_ref* r,
                          bool src, uint32_t i, const char* where) {
  struct shunt_prog_ref* pr = push(b, &b->refs, sizeof(*pr));
  if (!pr) return 0;
  uint64_t bytes = (uint64_t)r->size * b->chunk, off = (uint64_t)r->index * b->chunk;
  unsigned btype = r->type;
  if (r->kind == SHUNT_REF_SWITCH && r->global >= 0 &&
      (uint32_t)r->global < b->g->nchannels[SHUNT_CHAN_SWITCH])
    btype = b->g->channels[SHUNT_CHAN_SWITCH][r->global].buffer_type;
  /* The sliced buffer of a head run: allgather's output, reducescatter's input, both of
   * alltoall's (C: a block's chunks). */
  bool rs = shunt_coll_layout(b->plan->coll) == SHUNT_LAYOUT_SCATTER;
  bool a2a = shunt_coll_layout(b->plan->coll) == SHUNT_LAYOUT_BLOCKS;
  if (b->out_stride && (a2a ? btype == SHUNT_BUF_INPUT || btype == SHUNT_BUF_OUTPUT
                            : btype == (rs ? SHUNT_BUF_INPUT : SHUNT_BUF_OUTPUT))) {
    /* Rank q's chunk k of the sliced buffer (index q x C + k, C the other side's chunks)
     * starts q slices in. */
    const struct shunt_plan_gpu* g0 = &b->plan->gpus[0];
    uint32_t ic = a2a  ? (btype == SHUNT_BUF_INPUT ? g0->input_chunks : g0->output_chunks) / b->plan->ngpus
                  : rs ? g0->output_chunks
                       : g0->input_chunks;
    if (r->index % ic + r->size > ic) {
      fail(b,
           "%s: an %s entry spanning two ranks' slices (chunks %u..%u of %u per rank) cannot run on a "
           "call whose size is not a multiple of the plan's",
           where, btype == SHUNT_BUF_INPUT ? "input" : "output", r->index, r->index + r->size - 1, ic);
      return 0;
    }
    off = (uint64_t)(r->index / ic) * b->out_stride + (uint64_t)(r->index % ic) * b->chunk;
  }
  if (o->has_tbg) {
    if (o->tbg_size == 0 || o->tbg_id >= o->tbg_size) {
      fail(b, "%s: tbg_info %u of %u is out of range", where, o->tbg_id, o->tbg_size);
      return 0;
    }
    uint64_t s0 = shunt_lower_split(bytes, o->tbg_id, o->tbg_size, b->align);
    uint64_t s1 = shunt_lower_split(bytes, o->tbg_id + 1, o->tbg_size, b->align);
    off += s0;
    bytes = s1 - s0;
  }
  pr->kind = SHUNT_PREF_LOCAL;
  pr->buf = (uint8_t)r->type;
  if (r->kind == SHUNT_REF_REMOTE) {
    if (r->global < 0 || r->peer < 0 || (uint32_t)r->peer >= b->plan->ngpus) {
      fail(b, "%s: remote buffer %u does not resolve", where, r->id);
      return 0;
    }
    pr->kind = SHUNT_PREF_REMOTE;
    pr->slot = (uint16_t)r->peer;
  } else if (r->kind == SHUNT_REF_SWITCH) {
    if (r->global < 0 || (uint32_t)r->global >= b->g->nchannels[SHUNT_CHAN_SWITCH]) {
      fail(b, "%s: switch channel %u does not resolve", where, r->id);
      return 0;
    }
    pr->kind = SHUNT_PREF_SWITCH;
    pr->slot = (uint16_t)r->global;
    pr->buf = (uint8_t)b->g->channels[SHUNT_CHAN_SWITCH][r->global].buffer_type;
  }
  bool pkt = shunt_lower_is_packet_ref(o->type, o->channel_type, src, i);
  if (pkt) {
    /* upkt reads local scratch whatever type the entry names (§5.3). */
    if (o->type == SHUNT_OP_UPKT) pr->buf = SHUNT_BUF_SCRATCH;
    if (bytes % b->payload || off % b->payload) {
      fail(b, "%s: packet range (offset %llu, %llu bytes) is not a multiple of the %u-byte payload", where,
           (unsigned long long)off, (unsigned long long)bytes, b->payload);
      return 0;
    }
    off *= 2;
    pr->flags = SHUNT_PREF_PACKETS;
  }
  uint64_t span = pkt ? 2 * bytes : bytes;
  if (off + span >= ENC_LIMIT) {
    fail(b, "%s: byte range %llu+%llu does not fit the 32-bit device encoding", where,
         (unsigned long long)off, (unsigned long long)span);
    return 0;
  }
  pr->off = off;
  pr->bytes = bytes;
  return b->refs.n - 1;
}

static bool lower_op(struct builder* b, uint32_t blk, const struct shunt_plan_op* o, uint32_t json_op,
                     int json_inner, const struct shunt_plan_op* pipe);

/* Flat position of ops[i] (j < 0) or ops[i].ops[j] of the current block. */
static uint32_t flat_pos(const struct shunt_plan_threadblock* tb, uint32_t i, int32_t j) {
  uint32_t n = 0;
  for (uint32_t k = 0; k < i && k < tb->nops; k++) n += 1 + tb->ops[k].nops;
  return j < 0 ? n : n + 1 + (uint32_t)j;
}

struct sync_arg {
  struct builder* b;
  const struct shunt_plan_threadblock* tb;
};

static void mark_sync(void* arg, uint32_t i, int32_t j, const char* why) {
  struct sync_arg* a = arg;
  (void)why;
  uint32_t at = flat_pos(a->tb, i, j);
  if (at < a->b->nsync) a->b->sync_before[at] = true;
}

/* Finds the ops of block t that need a block barrier the plan left out. */
static bool plan_syncs(struct builder* b, uint32_t t) {
  const struct shunt_plan_threadblock* tb = &b->g->threadblocks[t];
  free(b->sync_before);
  b->nsync = tb->nops_flat;
  b->sync_before = calloc(b->nsync ? b->nsync : 1, sizeof(bool));
  if (!b->sync_before) {
    fail(b, "out of memory");
    return false;
  }
  struct sync_arg a = {b, tb};
  shunt_plan_block_syncs(b->plan, b->rank, t, mark_sync, &a);
  return true;
}

static bool barrier_before(const struct builder* b, uint32_t json_op, int json_inner) {
  const struct shunt_plan_threadblock* tb = &b->g->threadblocks[b->blocks.n];
  uint32_t at = flat_pos(tb, json_op, json_inner);
  return b->sync_before && at < b->nsync && b->sync_before[at];
}

static bool lower_refs_and_chans(struct builder* b, struct shunt_prog_op* po, const struct shunt_plan_op* o,
                                 const char* where) {
  if (o->nsrc + o->ndst > 255 || o->nchannel_ids > 255 || o->nsemaphore_ids > 255) {
    fail(b, "%s: too many operands", where);
    return false;
  }
  po->nsrc = (uint8_t)o->nsrc;
  po->ndst = (uint8_t)o->ndst;
  po->ref = b->refs.n;
  for (uint32_t i = 0; i < o->nsrc; i++) lower_ref(b, o, &o->src[i], true, i, where);
  for (uint32_t i = 0; i < o->ndst; i++) lower_ref(b, o, &o->dst[i], false, i, where);
  if (b->failed) return false;
  if (o->nchannel_ids) {
    if (o->channel_type != SHUNT_CHAN_MEMORY && o->channel_type != SHUNT_CHAN_PORT &&
        o->channel_type != SHUNT_CHAN_SWITCH) {
      fail(b, "%s: channel_ids without a channel type", where);
      return false;
    }
    po->chan = b->chans.n;
    po->nchan = (uint8_t)o->nchannel_ids;
    for (uint32_t k = 0; k < o->nchannel_ids; k++) {
      struct shunt_prog_chan* pc = push(b, &b->chans, sizeof(*pc));
      if (!pc) return false;
      int32_t gi = o->channel_global ? o->channel_global[k] : -1;
      if (gi < 0 || (uint32_t)gi >= b->g->nchannels[o->channel_type]) {
        fail(b, "%s: channel_ids[%u] does not resolve", where, k);
        return false;
      }
      const struct shunt_plan_channel* ch = &b->g->channels[o->channel_type][gi];
      pc->type = (uint8_t)o->channel_type;
      if (o->channel_type != SHUNT_CHAN_SWITCH) {
        if (ch->peer < 0 || (uint32_t)ch->peer >= b->plan->ngpus ||
            ch->peer_ordinal >= SHUNT_PROG_MAX_ORDINAL) {
          fail(b, "%s: channel %d has no usable peer or more than %d channels to one peer", where, gi,
               SHUNT_PROG_MAX_ORDINAL);
          return false;
        }
        pc->peer = (uint16_t)ch->peer;
        pc->ordinal = (uint16_t)ch->peer_ordinal;
      } else {
        pc->ordinal = (uint16_t)gi;
      }
    }
  }
  if (o->nsemaphore_ids) {
    po->chan = b->u32.n;
    po->nsem = (uint8_t)o->nsemaphore_ids;
    for (uint32_t k = 0; k < o->nsemaphore_ids; k++) {
      if (o->semaphore_ids[k] >= b->g->nsemaphores) {
        fail(b, "%s: semaphore id %u out of range", where, o->semaphore_ids[k]);
        return false;
      }
      uint32_t* u = push(b, &b->u32, sizeof(*u));
      if (!u) return false;
      *u = o->semaphore_ids[k];
    }
  }
  return true;
}

/* Pipelined ops take windows (i*unit, unit) for i < iterations; each must be non-empty. */
static bool check_windows(struct builder* b, const struct shunt_prog_op* po, const struct shunt_plan_op* pipe,
                          uint32_t iters, const char* where) {
  if (!shunt_op_is_pipelined((enum shunt_op_type)po->type)) return true;
  const struct shunt_prog_ref* refs = b->refs.v;
  uint64_t last = (uint64_t)(iters - 1) * pipe->unit_size;
  for (uint32_t i = 0; i < (uint32_t)po->nsrc + po->ndst; i++) {
    uint64_t bytes = refs[po->ref + i].bytes;
    if (bytes <= last) {
      fail(b, "%s: pipeline window %u (offset %llu) is empty for an entry of %llu bytes", where, iters - 1,
           (unsigned long long)last, (unsigned long long)bytes);
      return false;
    }
  }
  return true;
}

static bool lower_op(struct builder* b, uint32_t blk, const struct shunt_plan_op* o, uint32_t json_op,
                     int json_inner, const struct shunt_plan_op* pipe) {
  char where[96];
  if (json_inner >= 0)
    snprintf(where, sizeof(where), "gpus[%u].threadblocks[%u].ops[%u].ops[%d]", b->rank, blk, json_op,
             json_inner);
  else
    snprintf(where, sizeof(where), "gpus[%u].threadblocks[%u].ops[%u]", b->rank, blk, json_op);
  if (barrier_before(b, json_op, json_inner)) {
    struct shunt_prog_op* nop = push(b, &b->ops, sizeof(*nop));
    if (!nop) return false;
    nop->type = SHUNT_OP_NOP;
    nop->json_op = (uint16_t)json_op;
    nop->json_inner = (int16_t)json_inner;
  }
  struct shunt_prog_op* po = push(b, &b->ops, sizeof(*po));
  if (!po) return false;
  uint32_t idx = b->ops.n - 1;
  po->type = (uint8_t)o->type;
  po->chan_type = (uint8_t)o->channel_type;
  po->json_op = (uint16_t)json_op;
  po->json_inner = (int16_t)json_inner;
  if (o->type == SHUNT_OP_BARRIER) {
    po->a = o->barrier_id;
    po->b = o->num_threadblocks;
    if (o->barrier_id >= 16) {
      fail(b, "%s: barrier id %u out of range", where, o->barrier_id);
      return false;
    }
  }
  if (o->type == SHUNT_OP_PIPELINE) {
    if (json_inner >= 0) {
      fail(b, "%s: nested pipeline", where);
      return false;
    }
    if (o->unit_size == 0 || o->unit_size >= ENC_LIMIT) {
      fail(b, "%s: pipeline unit_size %llu is out of range", where, (unsigned long long)o->unit_size);
      return false;
    }
    /* nIterations = ceil(num_chunks * chunkUpper / unit), chunkUpper = ceil((R/A)/C)*A = chunk. */
    uint64_t total = (uint64_t)o->num_chunks * b->chunk;
    uint64_t iters = (total + o->unit_size - 1) / o->unit_size;
    if (iters == 0 || iters >= (1u << 16)) {
      fail(b, "%s: %llu pipeline iterations (needs 1..65535)", where, (unsigned long long)iters);
      return false;
    }
    po->a = (uint32_t)iters;
    po->unit = o->unit_size;
    for (uint32_t j = 0; j < o->nops; j++) {
      if (!lower_op(b, blk, &o->ops[j], json_op, (int)j, o)) return false;
      struct shunt_prog_op* inner = (struct shunt_prog_op*)b->ops.v + b->ops.n - 1;
      if (!check_windows(b, inner, o, (uint32_t)iters, where)) return false;
    }
    /* The body as lowered, added barriers included. */
    ((struct shunt_prog_op*)b->ops.v)[idx].b = b->ops.n - idx - 1;
    return true;
  }
  (void)pipe;
  /* push may have moved the array: address the op by index from here on. */
  struct shunt_prog_op tmp = *po;
  if (!lower_refs_and_chans(b, &tmp, o, where)) return false;
  ((struct shunt_prog_op*)b->ops.v)[idx] = tmp;
  return true;
}

static void free_builder(struct builder* b) {
  free(b->sync_before);
  free(b->blocks.v);
  free(b->ops.v);
  free(b->refs.v);
  free(b->chans.v);
  free(b->u32.v);
  free(b->sw.v);
  free(b->swr.v);
}

static uint8_t remote_access_of(const struct shunt_plan* p, uint32_t rank) {
  uint8_t m = 0;
  for (uint32_t g = 0; g < p->ngpus; g++) {
    const struct shunt_plan_gpu* gp = &p->gpus[g];
    for (uint32_t i = 0; i < gp->nremote_buffers; i++) {
      const struct shunt_plan_remote_buffer* rb = &gp->remote_buffers[i];
      if (rb->rank != (int32_t)rank) continue;
      if (rb->type == SHUNT_BUF_INPUT) m |= SHUNT_PROG_REMOTE_INPUT;
      if (rb->type == SHUNT_BUF_OUTPUT) m |= SHUNT_PROG_REMOTE_OUTPUT;
    }
    for (uint32_t i = 0; i < gp->nchannels[SHUNT_CHAN_SWITCH]; i++) {
      const struct shunt_plan_channel* ch = &gp->channels[SHUNT_CHAN_SWITCH][i];
      for (uint32_t k = 0; k < ch->nranks; k++) {
        if (ch->ranks[k] != (int32_t)rank) continue;
        if (ch->buffer_type == SHUNT_BUF_INPUT) m |= SHUNT_PROG_REMOTE_INPUT;
        if (ch->buffer_type == SHUNT_BUF_OUTPUT) m |= SHUNT_PROG_REMOTE_OUTPUT;
      }
    }
  }
  return m;
}

static size_t align16(size_t x) {
  return (x + 15) & ~(size_t)15;
}

static struct shunt_program* pack(struct builder* b, const struct shunt_call_shape* s) {
  const struct shunt_plan_gpu* g = b->g;
  size_t off = align16(sizeof(struct shunt_program));
  size_t o_blocks = off;
  off = align16(off + b->blocks.n * sizeof(struct shunt_prog_block));
  size_t o_ops = off;
  off = align16(off + b->ops.n * sizeof(struct shunt_prog_op));
  size_t o_refs = off;
  off = align16(off + b->refs.n * sizeof(struct shunt_prog_ref));
  size_t o_chans = off;
  off = align16(off + b->chans.n * sizeof(struct shunt_prog_chan));
  size_t o_u32 = off;
  off = align16(off + b->u32.n * sizeof(uint32_t));
  size_t o_sw = off;
  off = align16(off + b->sw.n * sizeof(struct shunt_prog_switch));
  size_t o_swr = off;
  off = align16(off + b->swr.n * sizeof(uint16_t));
  size_t o_sem = off;
  off = align16(off + g->nsemaphores * sizeof(int64_t));
  if (off >= UINT32_MAX) {
    fail(b, "program too large");
    return NULL;
  }
  struct shunt_program* p = calloc(1, off);
  if (!p) {
    fail(b, "out of memory");
    return NULL;
  }
  p->magic = SHUNT_PROG_MAGIC;
  p->total_bytes = (uint32_t)off;
  p->rank = b->rank;
  p->nranks = b->plan->ngpus;
  p->nblocks = b->blocks.n;
  p->nthreads = b->plan->num_threads_per_block;
  p->nops = b->ops.n;
  p->nrefs = b->refs.n;
  p->nchans = b->chans.n;
  p->nu32 = b->u32.n;
  p->nswitch = b->sw.n;
  p->nswitch_ranks = b->swr.n;
  p->nsems = g->nsemaphores;
  p->dtype = shunt_dtype_code(s->dtype);
  p->redop = shunt_redop_code(s->op);
  p->pkt = (uint8_t)(s->pkt ? s->pkt : SHUNT_PKT_LL16);
  p->ll = b->plan->ll;
  p->double_scratch = b->plan->use_double_scratch_buffer;
  p->coll = shunt_coll_code(b->plan->coll);
  p->view = (uint8_t)((shunt_coll_out_in_input(b->plan->coll) ? SHUNT_PROG_VIEW_OUT_IN_INPUT : 0) |
                      (shunt_coll_in_sliced(b->plan->coll) != shunt_coll_out_sliced(b->plan->coll)
                           ? SHUNT_PROG_VIEW_AT_RANK
                           : 0));
  p->remote_access = remote_access_of(b->plan, b->rank);
  p->in_bytes = s->in_bytes;
  p->out_bytes = s->out_bytes;
  /* The rank-sliced buffer's stride: a head's, else the unit (alltoall: always one block). */
  bool blocks = shunt_coll_layout(b->plan->coll) == SHUNT_LAYOUT_BLOCKS;
  p->out_stride = s->out_stride && !blocks
                      ? s->out_stride
                      : shunt_coll_unit(b->plan->coll, b->plan->ngpus, s->in_bytes, s->out_bytes);
  p->chunk_bytes = b->chunk;
  p->scratch_bytes = b->chunk * g->scratch_chunks * (b->plan->ll ? 2 : 1);
  p->off_blocks = (uint32_t)o_blocks;
  p->off_ops = (uint32_t)o_ops;
  p->off_refs = (uint32_t)o_refs;
  p->off_chans = (uint32_t)o_chans;
  p->off_u32 = (uint32_t)o_u32;
  p->off_switch = (uint32_t)o_sw;
  p->off_switch_ranks = (uint32_t)o_swr;
  p->off_sem_init = (uint32_t)o_sem;
  char* base = (char*)p;
  if (b->blocks.n) memcpy(base + o_blocks, b->blocks.v, b->blocks.n * sizeof(struct shunt_prog_block));
  if (b->ops.n) memcpy(base + o_ops, b->ops.v, b->ops.n * sizeof(struct shunt_prog_op));
  if (b->refs.n) memcpy(base + o_refs, b->refs.v, b->refs.n * sizeof(struct shunt_prog_ref));
  if (b->chans.n) memcpy(base + o_chans, b->chans.v, b->chans.n * sizeof(struct shunt_prog_chan));
  if (b->u32.n) memcpy(base + o_u32, b->u32.v, b->u32.n * sizeof(uint32_t));
  if (b->sw.n) memcpy(base + o_sw, b->sw.v, b->sw.n * sizeof(struct shunt_prog_switch));
  if (b->swr.n) memcpy(base + o_swr, b->swr.v, b->swr.n * sizeof(uint16_t));
  int64_t* sem = (int64_t*)(base + o_sem);
  for (uint32_t i = 0; i < g->nsemaphores; i++) sem[i] = g->semaphores[i];
  return p;
}

struct shunt_program* shunt_lower(const struct shunt_plan* plan, uint32_t rank,
                                  const struct shunt_call_shape* s, char* reason, size_t len) {
  if (reason && len) reason[0] = 0;
  if (!shunt_lower_check_shape(plan, s, reason, len)) return NULL;
  if (rank >= plan->ngpus) {
    if (reason && len) snprintf(reason, len, "rank %u is outside the plan's %u ranks", rank, plan->ngpus);
    return NULL;
  }
  struct builder b = {.plan = plan, .g = &plan->gpus[rank], .rank = rank, .reason = reason, .len = len};
  b.align = plan->buffer_alignment;
  /* A strided reducescatter head addresses ranks x out_bytes of its input: its chunk unit. */
  enum shunt_coll_layout layout = shunt_coll_layout(plan->coll);
  uint64_t in_flat =
      s->out_stride && layout == SHUNT_LAYOUT_SCATTER ? s->out_bytes * plan->ngpus : s->in_bytes;
  uint64_t out_flat = s->out_bytes;
  b.out_stride = s->out_stride;
  if (s->out_stride && layout == SHUNT_LAYOUT_BLOCKS) {
    /* An alltoall head addresses ranks x its bytes per block on both sides; the blocks lie
     * in_bytes / ranks apart. */
    in_flat = out_flat = s->out_stride * plan->ngpus;
    b.out_stride = s->in_bytes / plan->ngpus;
  }
  b.chunk = shunt_lower_chunk_bytes(plan, in_flat, out_flat);
  b.payload = (s->pkt == SHUNT_PKT_LL8) ? 4 : 8;
  const struct shunt_plan_gpu* g = b.g;
  for (uint32_t i = 0; i < g->nchannels[SHUNT_CHAN_SWITCH] && !b.failed; i++) {
    const struct shunt_plan_channel* ch = &g->channels[SHUNT_CHAN_SWITCH][i];
    struct shunt_prog_switch* sw = push(&b, &b.sw, sizeof(*sw));
    if (!sw) break;
    sw->buf = (uint8_t)ch->buffer_type;
    sw->nranks = (uint16_t)ch->nranks;
    sw->first_rank = b.swr.n;
    for (uint32_t k = 0; k < ch->nranks; k++) {
      if (ch->ranks[k] < 0 || (uint32_t)ch->ranks[k] >= plan->ngpus) {
        fail(&b, "gpus[%u].channels: switch group names rank %d", rank, ch->ranks[k]);
        break;
      }
      uint16_t* r = push(&b, &b.swr, sizeof(*r));
      if (!r) break;
      *r = (uint16_t)ch->ranks[k];
    }
  }
  for (uint32_t t = 0; t < g->nthreadblocks && !b.failed; t++) {
    const struct shunt_plan_threadblock* tb = &g->threadblocks[t];
    uint32_t first = b.ops.n;
    if (!plan_syncs(&b, t)) break;
    for (uint32_t i = 0; i < tb->nops && !b.failed; i++) lower_op(&b, t, &tb->ops[i], i, -1, NULL);
    struct shunt_prog_block* pb = push(&b, &b.blocks, sizeof(*pb));
    if (!pb) break;
    pb->first_op = first;
    pb->nops = b.ops.n - first;
  }
  struct shunt_program* p = b.failed ? NULL : pack(&b, s);
  free_builder(&b);
  return p;
}

void shunt_program_free(struct shunt_program* p) {
  free(p);
}
