/* Per-op checks: operand kinds, table indices, chunk ranges, packet rules, op limits. */
#include <stdio.h>
#include <string.h>

#include "plan/check_internal.h"

#define CH_M (1u << SHUNT_CHAN_MEMORY)
#define CH_P (1u << SHUNT_CHAN_PORT)

/* Operand patterns, one letter per entry, a trailing '+' repeats the last letter (>= 1):
 *   L local i/o/s   P local scratch holding packets   R remote   T remote scratch (packets)
 *   S switch channel   Q switch channel bound to scratch */
struct op_shape {
  unsigned chan; /* channel types the op may name; 0: none needed */
  bool chan_ids; /* needs channel_ids (port data ops: one per dst entry) */
  const char* src;
  const char* dst;
  bool same_count; /* as many src as dst entries */
};

static const struct op_shape shapes[SHUNT_OP_COUNT] = {
    [SHUNT_OP_NOP] = {0, false, "", "", false},
    [SHUNT_OP_BARRIER] = {0, false, "", "", false},
    [SHUNT_OP_SIGNAL] = {CH_M | CH_P, true, "", "", false},
    [SHUNT_OP_WAIT] = {CH_M | CH_P, true, "", "", false},
    [SHUNT_OP_RLXSIGNAL] = {CH_M | CH_P, true, "", "", false},
    [SHUNT_OP_RLXWAIT] = {CH_M | CH_P, true, "", "", false},
    [SHUNT_OP_FLUSH] = {CH_P, true, "", "", false},
    [SHUNT_OP_PUT] = {CH_M | CH_P, false, "L+", "R+", true},
    [SHUNT_OP_PWS] = {CH_P, true, "L+", "R+", true},
    [SHUNT_OP_PWSF] = {CH_P, true, "L+", "R+", true},
    [SHUNT_OP_GET] = {CH_M, false, "R+", "L+", true},
    [SHUNT_OP_COPY] = {0, false, "L", "L", false},
    [SHUNT_OP_RE] = {0, false, "L+", "L", false},
    [SHUNT_OP_RES] = {CH_M, false, "L+", "LR+", false},
    [SHUNT_OP_RRE] = {CH_M, false, "LR+", "L", false},
    [SHUNT_OP_RRES] = {CH_M, false, "LR+", "LR+", false},
    [SHUNT_OP_CPKT] = {0, false, "L", "P", false},
    [SHUNT_OP_UPKT] = {0, false, "P", "L", false},
    [SHUNT_OP_PPKT] = {CH_M | CH_P, false, "L+", "T+", true},
    [SHUNT_OP_RPPKT] = {CH_M | CH_P, false, "P", "T+", false},
    [SHUNT_OP_REPKT] = {0, false, "LP+", "L", false},
    [SHUNT_OP_RESPKT] = {CH_M, false, "LP+", "LT+", false},
    [SHUNT_OP_RECPKT] = {0, false, "LP+", "LP", false},
    [SHUNT_OP_RECSPKT] = {CH_M, false, "LP+", "LPT+", false},
    [SHUNT_OP_GLRES] = {0, false, "S", "S", false},
    [SHUNT_OP_GSTORE] = {0, false, "L", "S", false},
    [SHUNT_OP_GSTOREPKT] = {0, false, "P", "Q", false},
    [SHUNT_OP_SEM_ACQUIRE] = {0, false, "", "", false},
    [SHUNT_OP_SEM_RELEASE] = {0, false, "", "", false},
    [SHUNT_OP_PIPELINE] = {0, false, "", "", false},
};

static const char* kind_words(char k) {
  switch (k) {
    case 'L':
      return "a local buffer (type i/o/s)";
    case 'P':
      return "local scratch packets (type s)";
    case 'R':
      return "a remote buffer (buffer_id)";
    case 'T':
      return "remote scratch (buffer_id of a scratch buffer)";
    case 'S':
      return "a switch channel (switch_channel_id)";
    case 'Q':
      return "a switch channel bound to scratch";
  }
  return "?";
}

/* The pattern letter for entry i, or 0 when the pattern allows fewer entries. */
static char kind_at(const char* pat, uint32_t i, uint32_t* min_count, bool* unbounded) {
  size_t n = strlen(pat);
  *unbounded = n && pat[n - 1] == '+';
  size_t letters = *unbounded ? n - 1 : n;
  *min_count = (uint32_t)letters;
  if (i < letters) return pat[i];
  return *unbounded ? pat[letters - 1] : 0;
}

static uint32_t chunks_of(const struct shunt_plan_gpu* g, enum shunt_buf_type t) {
  return t == SHUNT_BUF_INPUT    ? g->input_chunks
         : t == SHUNT_BUF_OUTPUT ? g->output_chunks
                                 : g->scratch_chunks;
}

static void check_ref(struct cctx* c, const struct oppos* at, const struct shunt_plan_op* o, bool dst,
                      uint32_t i, char want) {
  const struct shunt_plan* p = c->p;
  const struct shunt_plan_gpu* g = &p->gpus[at->r];
  const struct shunt_plan_threadblock* tb = &g->threadblocks[at->b];
  const struct shunt_plan_ref* r = dst ? &o->dst[i] : &o->src[i];
  char sfx[64];
  snprintf(sfx, sizeof(sfx), ".%s[%u]", dst ? "dst_buff" : "src_buff", i);
  const char* name = shunt_op_name(o->type);
  bool remote_want = want == 'R' || want == 'T', switch_want = want == 'S' || want == 'Q';
  enum shunt_ref_kind kind_want = remote_want   ? SHUNT_REF_REMOTE
                                  : switch_want ? SHUNT_REF_SWITCH
                                                : SHUNT_REF_LOCAL;
  if (r->kind != kind_want) {
    operr(c, at, sfx, "%s takes %s here", name, kind_words(want));
    return;
  }
  const struct shunt_plan_gpu* owner = g;
  if (r->kind == SHUNT_REF_REMOTE) {
    char s2[96];
    snprintf(s2, sizeof(s2), "%s.buffer_id", sfx);
    if (o->channel_type != SHUNT_CHAN_MEMORY && o->channel_type != SHUNT_CHAN_PORT) {
      operr(c, at, ".channel_type", "an op with buffer_id entries needs channel_type memory or port");
      return;
    }
    const struct shunt_plan_table* t = &tb->remote_refs[o->channel_type];
    if (r->id >= t->n) {
      operr(c, at, s2, "buffer_id %u is outside the threadblock's %s remote_buffer_refs (%u entries)", r->id,
            shunt_chan_type_name(o->channel_type), t->n);
      return;
    }
    if (r->global < 0) return; /* the table entry itself is reported by check_blocks */
    if ((uint32_t)r->peer >= p->ngpus) return;
    owner = &p->gpus[r->peer];
  } else if (r->kind == SHUNT_REF_SWITCH) {
    char s2[96];
    snprintf(s2, sizeof(s2), "%s.switch_channel_id", sfx);
    const struct shunt_plan_table* t = &tb->channels[SHUNT_CHAN_SWITCH];
    if (r->id >= t->n) {
      operr(c, at, s2, "switch_channel_id %u is outside the threadblock's switch channels (%u entries)",
            r->id, t->n);
      return;
    }
    if (r->global < 0) return;
  }
  if ((want == 'P' || want == 'T' || want == 'Q') && r->type != SHUNT_BUF_SCRATCH)
    operr(c, at, sfx, "%s needs packets in scratch here, not buffer '%s'", name,
          shunt_buf_type_name(r->type));
  char s3[96];
  snprintf(s3, sizeof(s3), "%s.size", sfx);
  if (r->size == 0) operr(c, at, s3, "size 0");
  uint64_t lim = chunks_of(owner, r->type);
  if ((uint64_t)r->index + r->size > lim) {
    snprintf(s3, sizeof(s3), "%s.index", sfx);
    operr(c, at, s3, "chunks [%u, %llu) are outside %s buffer '%s' of rank %d (%llu chunks)", r->index,
          (unsigned long long)r->index + r->size,
          r->kind == SHUNT_REF_LOCAL    ? "local"
          : r->kind == SHUNT_REF_REMOTE ? "remote"
                                        : "multicast",
          shunt_buf_type_name(r->type), owner->id, (unsigned long long)lim);
  }
}

static void check_operands(struct cctx* c, const struct oppos* at, const struct shunt_plan_op* o, bool dst) {
  const struct op_shape* s = &shapes[o->type];
  const char* pat = dst ? s->dst : s->src;
  uint32_t n = dst ? o->ndst : o->nsrc, min;
  bool unb;
  kind_at(pat, 0, &min, &unb);
  const char* key = dst ? ".dst_buff" : ".src_buff";
  if (n < min || (!unb && n > min)) {
    if (min == 0 && !unb)
      operr(c, at, key, "%s takes no %s entries", shunt_op_name(o->type), key + 1);
    else
      operr(c, at, key, "%s takes %s%u %s entries, not %u", shunt_op_name(o->type), unb ? "at least " : "",
            min, key + 1, n);
    return;
  }
  for (uint32_t i = 0; i < n; i++) check_ref(c, at, o, dst, i, kind_at(pat, i, &min, &unb));
}

static void check_op(struct cctx* c, const struct oppos* at, const struct shunt_plan_op* o,
                     const struct shunt_plan_op* pipe, void* arg) {
  (void)pipe;
  (void)arg;
  const struct shunt_plan* p = c->p;
  const struct shunt_plan_gpu* g = &p->gpus[at->r];
  const struct shunt_plan_threadblock* tb = &g->threadblocks[at->b];
  const struct op_shape* s = &shapes[o->type];
  const char* name = shunt_op_name(o->type);

  if (shunt_op_is_packet(o->type) && !p->ll)
    operr(c, at, ".name", "packet op %s in a plan whose protocol is '%s', not LL", name, p->protocol);

  /* Channel type and ids. */
  bool has_remote = false;
  for (uint32_t i = 0; i < o->nsrc; i++) has_remote |= o->src[i].kind == SHUNT_REF_REMOTE;
  for (uint32_t i = 0; i < o->ndst; i++) has_remote |= o->dst[i].kind == SHUNT_REF_REMOTE;
  if (s->chan && (s->chan_ids || has_remote || o->nchannel_ids)) {
    if (!(s->chan & (1u << o->channel_type)))
      operr(c, at, ".channel_type", "%s needs channel_type %s, not '%s'", name,
            s->chan == CH_P   ? "port"
            : s->chan == CH_M ? "memory"
                              : "memory or port",
            o->has_channel_type ? shunt_chan_type_name(o->channel_type) : "(missing)");
  }
  bool port_data = o->channel_type == SHUNT_CHAN_PORT &&
                   (o->type == SHUNT_OP_PUT || o->type == SHUNT_OP_PPKT || o->type == SHUNT_OP_RPPKT ||
                    o->type == SHUNT_OP_PWS || o->type == SHUNT_OP_PWSF);
  if ((s->chan_ids || port_data) && o->nchannel_ids == 0)
    operr(c, at, ".channel_ids", "%s needs channel_ids", name);
  if (port_data && o->nchannel_ids && o->nchannel_ids != o->ndst)
    operr(c, at, ".channel_ids",
          "%s over port channels needs one channel id per dst entry (%u ids, %u entries)", name,
          o->nchannel_ids, o->ndst);
  if (o->nchannel_ids > SHUNT_PLAN_MAX_CHANNELS_PER_OP)
    operr(c, at, ".channel_ids", "%u channel ids (limit %d per op)", o->nchannel_ids,
          SHUNT_PLAN_MAX_CHANNELS_PER_OP);
  if (o->nchannel_ids && !s->chan && !port_data)
    operr(c, at, ".channel_ids", "%s takes no channel_ids", name);
  for (uint32_t i = 0; i < o->nchannel_ids && s->chan; i++) {
    if (o->channel_type == SHUNT_CHAN_NONE || o->channel_type == SHUNT_CHAN_SWITCH) break;
    char sfx[48];
    snprintf(sfx, sizeof(sfx), ".channel_ids[%u]", i);
    const struct shunt_plan_table* t = &tb->channels[o->channel_type];
    if (o->channel_ids[i] >= t->n) {
      operr(c, at, sfx, "channel id %u is outside the threadblock's %s channels (%u entries)",
            o->channel_ids[i], shunt_chan_type_name(o->channel_type), t->n);
      continue;
    }
    /* A port data op's i-th channel carries the i-th dst: it must lead to that buffer's rank. */
    if (port_data && i < o->ndst && o->channel_global[i] >= 0 && o->dst[i].peer >= 0 &&
        g->channels[SHUNT_CHAN_PORT][o->channel_global[i]].peer != o->dst[i].peer)
      operr(c, at, sfx, "port channel leads to rank %d but dst_buff[%u] is on rank %d",
            g->channels[SHUNT_CHAN_PORT][o->channel_global[i]].peer, i, o->dst[i].peer);
  }

  /* Operands. */
  if (o->nsrc > SHUNT_PLAN_MAX_ENTRIES_PER_OP)
    operr(c, at, ".src_buff", "%u entries (limit %d)", o->nsrc, SHUNT_PLAN_MAX_ENTRIES_PER_OP);
  if (o->ndst > SHUNT_PLAN_MAX_ENTRIES_PER_OP)
    operr(c, at, ".dst_buff", "%u entries (limit %d)", o->ndst, SHUNT_PLAN_MAX_ENTRIES_PER_OP);
  check_operands(c, at, o, false);
  check_operands(c, at, o, true);
  if (s->same_count && o->nsrc != o->ndst)
    operr(c, at, ".src_buff", "%s needs as many src_buff as dst_buff entries (%u vs %u)", name, o->nsrc,
          o->ndst);

  if (o->has_tbg && (o->tbg_size == 0 || o->tbg_id >= o->tbg_size))
    operr(c, at, ".tbg_info", "tb_id %u is not below tbg_size %u", o->tbg_id, o->tbg_size);

  if (o->type == SHUNT_OP_BARRIER) {
    if (!o->has_barrier)
      operr(c, at, "", "barrier needs barrier_id and num_threadblocks");
    else if (o->barrier_id >= SHUNT_PLAN_MAX_BARRIERS)
      operr(c, at, ".barrier_id", "barrier_id %u (limit %d)", o->barrier_id, SHUNT_PLAN_MAX_BARRIERS);
    if (o->has_barrier && (o->num_threadblocks == 0 || o->num_threadblocks > g->nthreadblocks))
      operr(c, at, ".num_threadblocks", "num_threadblocks %u (rank %u has %u threadblocks)",
            o->num_threadblocks, at->r, g->nthreadblocks);
  }
  bool sem = o->type == SHUNT_OP_SEM_ACQUIRE || o->type == SHUNT_OP_SEM_RELEASE;
  if (sem && o->nsemaphore_ids == 0) operr(c, at, ".semaphore_ids", "%s needs semaphore_ids", name);
  if (!sem && o->nsemaphore_ids) operr(c, at, ".semaphore_ids", "%s takes no semaphore_ids", name);
  if (o->nsemaphore_ids > SHUNT_PLAN_MAX_SEMAPHORES_PER_OP)
    operr(c, at, ".semaphore_ids", "%u semaphore ids (limit %d per op)", o->nsemaphore_ids,
          SHUNT_PLAN_MAX_SEMAPHORES_PER_OP);
  for (uint32_t i = 0; i < o->nsemaphore_ids; i++)
    if (o->semaphore_ids[i] >= g->nsemaphores) {
      char sfx[48];
      snprintf(sfx, sizeof(sfx), ".semaphore_ids[%u]", i);
      operr(c, at, sfx, "semaphore %u does not exist (rank %u declares %u)", o->semaphore_ids[i], at->r,
            g->nsemaphores);
    }

  if (o->type == SHUNT_OP_PIPELINE) {
    if (o->unit_size == 0 || o->unit_size > UINT32_MAX)
      operr(c, at, ".iter_context.unit_size", "unit_size %llu (allowed 1..%u)",
            (unsigned long long)o->unit_size, UINT32_MAX);
    if (o->num_chunks == 0) operr(c, at, ".iter_context.num_chunks", "num_chunks 0");
    if (o->nops == 0) operr(c, at, ".ops", "empty pipeline");
  }
  if (o->reduce_op > SHUNT_PLAN_REDOP_SUM && o->reduce_op != p->reduce_op)
    operr(c, at, ".reduce_op",
          "reduce_op %s conflicts with %s named by another op; a plan serves one reduction",
          shunt_plan_redop_name(o->reduce_op), shunt_plan_redop_name(p->reduce_op));
}

void check_ops(struct cctx* c) {
  visit_ops(c, check_op, NULL);
}
