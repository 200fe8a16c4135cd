/* Hazards across back-to-back calls: ranks that a plan does not keep in step.
 *
 * Calls of a communicator follow each other with no barrier between them, so what bounds how
 * far one rank can run ahead of another is only what its plans make it wait for. Two rules,
 * on a happens-before graph of the plan's ops (program order in a block; a signal to the wait
 * it satisfies; a packet write to the packet reads of the bytes it writes; a device-wide
 * barrier between its blocks; a semaphore release to its acquire):
 *
 * 1. In step: every rank depends, directly or through others, on every other rank within the
 *    call (some op of rank B comes before some op of rank A), so no rank enters call k+1
 *    before every rank has entered call k. Without it a rank can finish two calls while a
 *    slower one still runs the first, and the next plan's packets land in the scratch half
 *    that the slower rank still polls (a wrong flag: a hang; or wrong data). The plan that
 *    lets a rank run ahead need not write anything itself (a broadcast whose peers hear only
 *    from the root, each at its own pace), so the rule holds for every pair of ranks.
 * 2. Before the write: a rank's write into a peer's input or output buffer comes after some op
 *    of that peer in the same call. Rule 1 still lets a rank be one call ahead, and that
 *    call's buffers may be the memory the peer still reads or writes in the previous call.
 *    Packets in a double scratch buffer need only rule 1: consecutive calls use different
 *    halves. (Writes into a peer's single scratch buffer are not covered: such plans stay safe
 *    only when the peer's last use of its scratch comes before the writer's end of the call,
 *    or the writer waits first; neither is checked here.)
 *
 * A signal is matched to its wait one to one when each side's ops on the channel are in one
 * block and outside pipelines; otherwise a wait only counts as depending on the peer having
 * entered the call (sound, but it carries no chain through that peer). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/check_internal.h"

struct node {
  uint32_t r, b, i;
  int32_t j;
  const struct shunt_plan_op* o;
};

struct graph {
  const struct shunt_plan* p;
  struct node* nd;
  uint32_t nops;       /* op nodes; node nops + r is rank r's entry */
  uint32_t* rank_base; /* first op node of each rank, and nops at [ngpus] */
  uint32_t *ef, *et;   /* edges */
  size_t ne, cap;
  uint32_t *off, *adj; /* CSR */
  bool oom;
};

static void edge(struct graph* g, uint32_t a, uint32_t b) {
  if (g->ne == g->cap) {
    size_t cap = g->cap ? g->cap * 2 : 256;
    uint32_t* f = realloc(g->ef, cap * sizeof(*f));
    if (f) g->ef = f;
    uint32_t* t = f ? realloc(g->et, cap * sizeof(*t)) : NULL;
    if (t) g->et = t;
    if (!f || !t) {
      g->oom = true;
      return;
    }
    g->cap = cap;
  }
  g->ef[g->ne] = a;
  g->et[g->ne++] = b;
}

static bool is_signal(const struct shunt_plan_op* o) {
  return o->type == SHUNT_OP_SIGNAL || o->type == SHUNT_OP_RLXSIGNAL || o->type == SHUNT_OP_PWS ||
         o->type == SHUNT_OP_PWSF;
}

static bool is_wait(const struct shunt_plan_op* o) {
  return o->type == SHUNT_OP_WAIT || o->type == SHUNT_OP_RLXWAIT;
}

static bool names_channel(const struct shunt_plan_op* o, enum shunt_chan_type t, int32_t ch) {
  if (o->channel_type != t) return false;
  for (uint32_t k = 0; k < o->nchannel_ids; k++)
    if (o->channel_global[k] == ch) return true;
  return false;
}

/* The k-th (0-based) op of rank r matching `kind` on channel (t, ch), or -1 when there are not
 * that many, or when those ops are spread over blocks or pipelines (no one-to-one order). */
static int64_t kth_on_channel(const struct graph* g, uint32_t r, bool (*kind)(const struct shunt_plan_op*),
                              enum shunt_chan_type t, int32_t ch, uint32_t k) {
  int64_t found = -1, block = -1;
  uint32_t seen = 0;
  for (uint32_t n = g->rank_base[r]; n < g->rank_base[r + 1]; n++) {
    const struct node* x = &g->nd[n];
    if (!kind(x->o) || !names_channel(x->o, t, ch)) continue;
    if (x->j >= 0 || x->o->type == SHUNT_OP_PIPELINE || (block >= 0 && block != (int64_t)x->b)) return -1;
    block = x->b;
    if (seen++ == k) found = n;
  }
  return found;
}

static void signal_edges(struct graph* g) {
  const struct shunt_plan* p = g->p;
  for (uint32_t r = 0; r < p->ngpus; r++) {
    const struct shunt_plan_gpu* R = &p->gpus[r];
    for (uint32_t n = g->rank_base[r]; n < g->rank_base[r + 1]; n++) {
      const struct shunt_plan_op* o = g->nd[n].o;
      if (!is_wait(o) || (o->channel_type != SHUNT_CHAN_MEMORY && o->channel_type != SHUNT_CHAN_PORT))
        continue;
      enum shunt_chan_type t = o->channel_type;
      for (uint32_t k = 0; k < o->nchannel_ids; k++) {
        int32_t rc = o->channel_global[k];
        if (rc < 0 || (uint32_t)rc >= R->nchannels[t]) continue;
        const struct shunt_plan_channel* c = &R->channels[t][rc];
        if (c->peer < 0 || (uint32_t)c->peer >= p->ngpus || (uint32_t)c->peer == r) continue;
        uint32_t q = (uint32_t)c->peer;
        const struct shunt_plan_gpu* Q = &p->gpus[q];
        int32_t qc = -1;
        for (uint32_t i = 0; i < Q->nchannels[t] && qc < 0; i++)
          if (Q->channels[t][i].peer == (int32_t)r && Q->channels[t][i].peer_ordinal == c->peer_ordinal)
            qc = (int32_t)i;
        /* Which wait on rc this is, in rank r's order, then the signal it pairs with. */
        uint32_t nth = 0;
        for (uint32_t m = g->rank_base[r]; m < n; m++)
          nth += is_wait(g->nd[m].o) && names_channel(g->nd[m].o, t, rc);
        int64_t s = -1;
        if (qc >= 0 && kth_on_channel(g, r, is_wait, t, rc, nth) == (int64_t)n)
          s = kth_on_channel(g, q, is_signal, t, qc, nth);
        edge(g, s >= 0 ? (uint32_t)s : g->nops + q, n);
      }
    }
  }
}

/* The part [lo, hi) of an entry, in chunks, that an op's thread-block-group slice covers. */
static void slice(const struct shunt_plan_op* o, const struct shunt_plan_ref* e, double* lo, double* hi) {
  double base = e->index, len = e->size;
  if (o->has_tbg && o->tbg_size > 1 && o->tbg_id < o->tbg_size) {
    *lo = base + len * o->tbg_id / o->tbg_size;
    *hi = base + len * (o->tbg_id + 1) / o->tbg_size;
  } else {
    *lo = base;
    *hi = base + len;
  }
}

/* Local scratch packets an op reads: its src entries from `first` on. */
static uint32_t packet_src_first(const struct shunt_plan_op* o) {
  switch (o->type) {
    case SHUNT_OP_UPKT:
    case SHUNT_OP_RPPKT:
    case SHUNT_OP_GSTOREPKT:
      return 0;
    case SHUNT_OP_REPKT:
    case SHUNT_OP_RESPKT:
    case SHUNT_OP_RECPKT:
    case SHUNT_OP_RECSPKT:
      return 1;
    default:
      return UINT32_MAX;
  }
}

/* Packets written into another rank's scratch, to the reads of overlapping packets there. */
static void packet_edges(struct graph* g) {
  const struct shunt_plan* p = g->p;
  for (uint32_t w = 0; w < g->nops; w++) {
    const struct shunt_plan_op* o = g->nd[w].o;
    if (!shunt_op_is_packet(o->type)) continue;
    for (uint32_t d = 0; d < o->ndst; d++) {
      const struct shunt_plan_ref* e = &o->dst[d];
      if (e->kind != SHUNT_REF_REMOTE || e->type != SHUNT_BUF_SCRATCH || e->peer < 0 ||
          (uint32_t)e->peer >= p->ngpus)
        continue;
      double wlo, whi;
      slice(o, e, &wlo, &whi);
      uint32_t r = (uint32_t)e->peer;
      for (uint32_t n = g->rank_base[r]; n < g->rank_base[r + 1]; n++) {
        const struct shunt_plan_op* ro = g->nd[n].o;
        for (uint32_t s = packet_src_first(ro); s < ro->nsrc; s++) {
          if (ro->src[s].kind != SHUNT_REF_LOCAL) continue;
          double lo, hi;
          slice(ro, &ro->src[s], &lo, &hi);
          if (lo < whi - 1e-9 && wlo < hi - 1e-9) {
            edge(g, w, n);
            break;
          }
        }
      }
    }
  }
}

static bool names_sem(const struct shunt_plan_op* o, uint32_t sem) {
  for (uint32_t k = 0; k < o->nsemaphore_ids; k++)
    if (o->semaphore_ids[k] == sem) return true;
  return false;
}

/* Device-wide barriers: the k-th arrival of each block at a barrier id waits for the others'.
 * Semaphores: the k-th acquire after the k-th release, when each side is one block and the
 * semaphore starts at 0 (else no edge: nothing certain). */
static void rank_edges(struct graph* g) {
  const struct shunt_plan* p = g->p;
  for (uint32_t r = 0; r < p->ngpus; r++)
    for (uint32_t a = g->rank_base[r]; a < g->rank_base[r + 1]; a++) {
      const struct node* x = &g->nd[a];
      if (x->o->type == SHUNT_OP_BARRIER && x->o->num_threadblocks > 1 && x->j < 0) {
        uint32_t ka = 0;
        for (uint32_t m = g->rank_base[r]; m < a; m++)
          ka += g->nd[m].b == x->b && g->nd[m].o->type == SHUNT_OP_BARRIER &&
                g->nd[m].o->barrier_id == x->o->barrier_id;
        for (uint32_t b = g->rank_base[r]; b < g->rank_base[r + 1]; b++) {
          const struct node* y = &g->nd[b];
          if (y->b == x->b || y->o->type != SHUNT_OP_BARRIER || y->o->barrier_id != x->o->barrier_id ||
              y->j >= 0)
            continue;
          uint32_t kb = 0;
          for (uint32_t m = g->rank_base[r]; m < b; m++)
            kb += g->nd[m].b == y->b && g->nd[m].o->type == SHUNT_OP_BARRIER &&
                  g->nd[m].o->barrier_id == y->o->barrier_id;
          if (ka == kb) edge(g, a, b);
        }
      }
      if (x->o->type != SHUNT_OP_SEM_ACQUIRE || x->j >= 0) continue;
      for (uint32_t s = 0; s < x->o->nsemaphore_ids; s++) {
        uint32_t sem = x->o->semaphore_ids[s];
        if (sem >= p->gpus[r].nsemaphores || p->gpus[r].semaphores[sem] != 0) continue;
        int64_t blk[2] = {-1, -1}; /* the one block of the acquires [0] and releases [1]; -2: several */
        uint32_t k = 0, seen = 0;
        int64_t rel = -1;
        for (uint32_t m = g->rank_base[r]; m < g->rank_base[r + 1]; m++) {
          const struct node* y = &g->nd[m];
          int side = y->o->type == SHUNT_OP_SEM_ACQUIRE ? 0 : y->o->type == SHUNT_OP_SEM_RELEASE ? 1 : -1;
          if (side < 0 || !names_sem(y->o, sem)) continue;
          blk[side] = (y->j >= 0 || (blk[side] != -1 && blk[side] != (int64_t)y->b)) ? -2 : (int64_t)y->b;
          if (side == 0 && m < a) k++;
        }
        if (blk[0] < 0 || blk[1] < 0) continue;
        for (uint32_t m = g->rank_base[r]; m < g->rank_base[r + 1] && rel < 0; m++)
          if (g->nd[m].o->type == SHUNT_OP_SEM_RELEASE && names_sem(g->nd[m].o, sem) && seen++ == k) rel = m;
        if (rel >= 0) edge(g, (uint32_t)rel, a);
      }
    }
}

static bool build(struct graph* g) {
  const struct shunt_plan* p = g->p;
  uint32_t n = 0;
  for (uint32_t r = 0; r < p->ngpus; r++)
    for (uint32_t b = 0; b < p->gpus[r].nthreadblocks; b++) {
      const struct shunt_plan_threadblock* tb = &p->gpus[r].threadblocks[b];
      for (uint32_t i = 0; i < tb->nops; i++) n += 1 + tb->ops[i].nops;
    }
  g->nops = n;
  g->nd = calloc(n ? n : 1, sizeof(*g->nd));
  g->rank_base = calloc(p->ngpus + 1, sizeof(*g->rank_base));
  if (!g->nd || !g->rank_base) return false;
  n = 0;
  for (uint32_t r = 0; r < p->ngpus; r++) {
    g->rank_base[r] = n;
    for (uint32_t b = 0; b < p->gpus[r].nthreadblocks; b++) {
      const struct shunt_plan_threadblock* tb = &p->gpus[r].threadblocks[b];
      for (uint32_t i = 0; i < tb->nops; i++) {
        if (i == 0)
          edge(g, g->nops + r, n);
        else
          edge(g, n - 1, n);
        g->nd[n++] = (struct node){r, b, i, -1, &tb->ops[i]};
        for (uint32_t j = 0; j < tb->ops[i].nops; j++) {
          edge(g, n - 1, n);
          g->nd[n++] = (struct node){r, b, i, (int32_t)j, &tb->ops[i].ops[j]};
        }
      }
    }
  }
  g->rank_base[p->ngpus] = n;
  signal_edges(g);
  packet_edges(g);
  rank_edges(g);
  if (g->oom) return false;
  uint32_t total = g->nops + p->ngpus;
  g->off = calloc(total + 1, sizeof(*g->off));
  g->adj = malloc((g->ne ? g->ne : 1) * sizeof(*g->adj));
  if (!g->off || !g->adj) return false;
  for (size_t e = 0; e < g->ne; e++) g->off[g->ef[e] + 1]++;
  for (uint32_t v = 0; v < total; v++) g->off[v + 1] += g->off[v];
  uint32_t* fill = calloc(total, sizeof(*fill));
  if (!fill) return false;
  for (size_t e = 0; e < g->ne; e++) g->adj[g->off[g->ef[e]] + fill[g->ef[e]]++] = g->et[e];
  free(fill);
  return true;
}

/* Marks in `seen` every node reachable from rank q's entry. */
static void reach(const struct graph* g, uint32_t q, unsigned char* seen, uint32_t* stack) {
  uint32_t total = g->nops + g->p->ngpus, top = 0;
  memset(seen, 0, total);
  stack[top++] = g->nops + q;
  seen[g->nops + q] = 1;
  while (top) {
    uint32_t v = stack[--top];
    for (uint32_t e = g->off[v]; e < g->off[v + 1]; e++)
      if (!seen[g->adj[e]]) {
        seen[g->adj[e]] = 1;
        stack[top++] = g->adj[e];
      }
  }
}

/* Rule 2 for one op of rank r (nodes reachable from rank q's entry in `seen`). */
static void check_writes(struct cctx* c, const struct graph* g, uint32_t n, uint32_t q,
                         const unsigned char* seen) {
  const struct node* x = &g->nd[n];
  const struct shunt_plan_op* o = x->o;
  if (seen[n] || shunt_op_is_sync(o->type) || o->type == SHUNT_OP_PIPELINE) return;
  for (uint32_t d = 0; d < o->ndst; d++) {
    const struct shunt_plan_ref* e = &o->dst[d];
    if (e->kind != SHUNT_REF_REMOTE || e->peer != (int32_t)q) continue;
    if (e->type == SHUNT_BUF_SCRATCH) continue;
    struct oppos at = {x->r, x->b, x->i, x->j};
    char sfx[32];
    snprintf(sfx, sizeof(sfx), ".dst_buff[%u]", d);
    operr(c, &at, sfx,
          "unsafe across back-to-back calls: %s writes rank %u's %s before anything in this call "
          "depends on rank %u (no signal or packet of it comes first), so it can land while rank %u "
          "still uses that memory in the previous call; wait for a signal from rank %u first",
          shunt_op_name(o->type), q, e->type == SHUNT_BUF_INPUT ? "input" : "output", q, q, q);
    return;
  }
}

void check_step(struct cctx* c) {
  const struct shunt_plan* p = c->p;
  if (p->ngpus < 2) return;
  for (uint32_t r = 0; r < p->ngpus; r++)
    for (uint32_t b = 0; b < p->gpus[r].nthreadblocks; b++)
      if (p->gpus[r].threadblocks[b].nops_flat > SHUNT_PLAN_MAX_OPS_PER_BLOCK) return;
  struct graph g = {.p = p};
  unsigned char* seen = NULL;
  uint32_t* stack = NULL;
  if (!build(&g)) goto oom;
  uint32_t total = g.nops + p->ngpus;
  seen = malloc(total);
  stack = malloc(total * sizeof(*stack));
  if (!seen || !stack) goto oom;
  for (uint32_t q = 0; q < p->ngpus; q++) {
    reach(&g, q, seen, stack);
    for (uint32_t r = 0; r < p->ngpus; r++) {
      if (r == q) continue;
      bool hears = false;
      for (uint32_t n = g.rank_base[r]; n < g.rank_base[r + 1] && !hears; n++) hears = seen[n];
      if (!hears) {
        char path[32];
        snprintf(path, sizeof(path), "gpus[%u]", r);
        cerr(
            c, path,
            "unsafe across back-to-back calls: rank %u can finish the call without depending, directly or "
            "through other ranks, on anything rank %u does in it, so it can run calls ahead of rank %u and a "
            "later plan's packets or writes can land in memory rank %u still reads (every rank must wait, "
            "through a signal or packet chain, for every other rank)",
            r, q, q, q);
      }
    }
    for (uint32_t n = 0; n < g.nops; n++)
      if (g.nd[n].r != q) check_writes(c, &g, n, q, seen);
  }
  goto done;
oom:
  cerr(c, "gpus", "out of memory in the check of calls back to back");
done:
  free(seen);
  free(stack);
  free(g.nd);
  free(g.rank_base);
  free(g.ef);
  free(g.et);
  free(g.off);
  free(g.adj);
}
