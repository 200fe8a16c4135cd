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
 *    from the root, each at its own pace), so the rule holds for every pair of ranks. Plans of
 *    collectives that are never selected (sendrecv, unknown ones) are exempt.
 * 2. Before the write: a rank's write into a peer's input or output buffer comes after some op
 *    of that peer in the same call. Rule 1 still lets a rank be one call ahead, and that
 *    call's buffers may be the memory the peer still reads or writes in the previous call.
 *    Writes into a double scratch buffer need only rule 1: consecutive calls use different
 *    halves (shunt adds the half to every scratch access, packet or not).
 * 3. Single scratch: without a double scratch buffer every call uses the same scratch, so a
 *    rank W's write into rank R's scratch in call k+1 can land while R (or a rank reading R's
 *    scratch remotely) still reads those chunks in call k. The write is safe when it comes
 *    after some op of R in its call (R has left call k), or when every op that reads the
 *    chunks it overlaps, in R's scratch, comes before some op of W in the same call (W cannot
 *    leave call k, so cannot write in call k+1, before the read is done). Writes by R itself
 *    are ordered by its kernels following each other. (A rank's own writes into its scratch,
 *    overwritten by a peer's next call, are not covered.)
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
  uint32_t *off, *adj;   /* CSR */
  uint32_t *roff, *radj; /* the same, edges reversed */
  uint32_t nhubs;        /* barrier hubs, numbered after the entries */
  bool oom, undecided;
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

/* Per channel (rank, type, global index), numbered from chan_base: its signal ops in rank
 * order, and whether its signals (its waits) all sit in one block outside pipelines. */
struct chans {
  uint32_t* base; /* [r * SHUNT_CHAN_TYPES + t] */
  uint32_t n;
  uint32_t *nsig, *sig_off, *sigs, *wait_seen;
  int64_t *sig_block, *wait_block; /* -1: none yet, -2: several blocks or a pipeline */
};

static int32_t chan_index(const struct graph* g, const struct chans* c, uint32_t r, enum shunt_chan_type t,
                          int32_t ch) {
  if (ch < 0 || (uint32_t)ch >= g->p->gpus[r].nchannels[t]) return -1;
  return (int32_t)(c->base[r * SHUNT_CHAN_TYPES + t] + (uint32_t)ch);
}

static void one_block(int64_t* blk, const struct node* x) {
  if (x->j >= 0 || x->o->type == SHUNT_OP_PIPELINE || (*blk != -1 && *blk != (int64_t)x->b))
    *blk = -2;
  else
    *blk = x->b;
}

static bool chans_init(const struct graph* g, struct chans* c) {
  const struct shunt_plan* p = g->p;
  c->base = calloc((size_t)p->ngpus * SHUNT_CHAN_TYPES, sizeof(*c->base));
  if (!c->base) return false;
  for (uint32_t r = 0; r < p->ngpus; r++)
    for (uint32_t t = 0; t < SHUNT_CHAN_TYPES; t++) {
      c->base[r * SHUNT_CHAN_TYPES + t] = c->n;
      if (t == SHUNT_CHAN_MEMORY || t == SHUNT_CHAN_PORT) c->n += p->gpus[r].nchannels[t];
    }
  size_t n = c->n ? c->n : 1;
  c->nsig = calloc(n, sizeof(*c->nsig));
  c->sig_off = calloc(n + 1, sizeof(*c->sig_off));
  c->wait_seen = calloc(n, sizeof(*c->wait_seen));
  c->sig_block = malloc(n * sizeof(*c->sig_block));
  c->wait_block = malloc(n * sizeof(*c->wait_block));
  if (!c->nsig || !c->sig_off || !c->wait_seen || !c->sig_block || !c->wait_block) return false;
  for (size_t i = 0; i < n; i++) c->sig_block[i] = c->wait_block[i] = -1;
  for (int pass = 0; pass < 2; pass++) {
    if (pass == 1) {
      for (uint32_t i = 0; i < c->n; i++) c->sig_off[i + 1] = c->sig_off[i] + c->nsig[i];
      c->sigs = malloc((c->sig_off[c->n] ? c->sig_off[c->n] : 1) * sizeof(*c->sigs));
      if (!c->sigs) return false;
      memset(c->nsig, 0, n * sizeof(*c->nsig));
    }
    for (uint32_t v = 0; v < g->nops; v++) {
      const struct node* x = &g->nd[v];
      bool sig = is_signal(x->o), wait = is_wait(x->o);
      if (!sig && !wait) continue;
      for (uint32_t k = 0; k < x->o->nchannel_ids; k++) {
        int32_t i = chan_index(g, c, x->r, x->o->channel_type, x->o->channel_global[k]);
        if (i < 0) continue;
        if (pass == 0) one_block(sig ? &c->sig_block[i] : &c->wait_block[i], x);
        if (sig && pass == 0) c->nsig[i]++;
        if (sig && pass == 1) c->sigs[c->sig_off[i] + c->nsig[i]++] = v;
      }
    }
  }
  return true;
}

static void chans_free(struct chans* c) {
  free(c->base);
  free(c->nsig);
  free(c->sig_off);
  free(c->sigs);
  free(c->wait_seen);
  free(c->sig_block);
  free(c->wait_block);
}

static void signal_edges(struct graph* g) {
  const struct shunt_plan* p = g->p;
  struct chans c = {0};
  if (!chans_init(g, &c)) {
    g->oom = true;
    chans_free(&c);
    return;
  }
  /* Nodes are in rank, block, op order: within one block, the waits' program order. */
  for (uint32_t n = 0; n < g->nops; n++) {
    const struct node* x = &g->nd[n];
    if (!is_wait(x->o)) continue;
    enum shunt_chan_type t = x->o->channel_type;
    for (uint32_t k = 0; k < x->o->nchannel_ids; k++) {
      int32_t i = chan_index(g, &c, x->r, t, x->o->channel_global[k]);
      if (i < 0) continue;
      const struct shunt_plan_channel* ch = &p->gpus[x->r].channels[t][x->o->channel_global[k]];
      uint32_t nth = c.wait_seen[i]++;
      if (ch->peer < 0 || (uint32_t)ch->peer >= p->ngpus || (uint32_t)ch->peer == x->r) continue;
      uint32_t q = (uint32_t)ch->peer;
      const struct shunt_plan_gpu* Q = &p->gpus[q];
      int32_t qi = -1;
      for (uint32_t m = 0; m < Q->nchannels[t] && qi < 0; m++)
        if (Q->channels[t][m].peer == (int32_t)x->r && Q->channels[t][m].peer_ordinal == ch->peer_ordinal)
          qi = chan_index(g, &c, q, t, (int32_t)m);
      /* The signal this wait pairs with, or else only "q has entered the call". */
      uint32_t from = g->nops + q;
      if (qi >= 0 && c.wait_block[i] >= 0 && c.sig_block[qi] >= 0 && nth < c.nsig[qi])
        from = c.sigs[c.sig_off[qi] + nth];
      edge(g, from, n);
    }
  }
  chans_free(&c);
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

/* Whether the entry e, written by rank w, lands in rank q's memory: a peer's buffer, or a
 * multicast group's (every member's buffer of the switch channel's type). */
static bool writes_into(const struct shunt_plan* p, uint32_t w, const struct shunt_plan_ref* e, uint32_t q) {
  if (e->kind == SHUNT_REF_REMOTE) return e->peer == (int32_t)q;
  if (e->kind != SHUNT_REF_SWITCH || e->global < 0 ||
      (uint32_t)e->global >= p->gpus[w].nchannels[SHUNT_CHAN_SWITCH])
    return false;
  const struct shunt_plan_channel* ch = &p->gpus[w].channels[SHUNT_CHAN_SWITCH][e->global];
  for (uint32_t k = 0; k < ch->nranks; k++)
    if (ch->ranks[k] == (int32_t)q) return true;
  return false;
}

/* Packets written into another rank's scratch, to the reads of overlapping packets there. More
 * pairs to compare than PAIR_BUDGET (no real plan comes near) leave the whole check undecided. */
#define PAIR_BUDGET (1u << 26)
struct reader {
  uint32_t node;
  double lo, hi;
};

static void packet_edges(struct graph* g) {
  const struct shunt_plan* p = g->p;
  uint32_t* first = calloc(p->ngpus + 1, sizeof(*first));
  size_t nr = 0;
  for (uint32_t n = 0; n < g->nops; n++)
    for (uint32_t s = packet_src_first(g->nd[n].o); s < g->nd[n].o->nsrc; s++) nr++;
  struct reader* rd = malloc((nr ? nr : 1) * sizeof(*rd));
  if (!first || !rd) {
    g->oom = true;
    goto out;
  }
  nr = 0;
  for (uint32_t r = 0; r < p->ngpus; r++) {
    first[r] = (uint32_t)nr;
    for (uint32_t n = g->rank_base[r]; n < g->rank_base[r + 1]; n++) {
      const struct shunt_plan_op* o = g->nd[n].o;
      for (uint32_t s = packet_src_first(o); s < o->nsrc; s++) {
        if (o->src[s].kind != SHUNT_REF_LOCAL) continue;
        rd[nr].node = n;
        slice(o, &o->src[s], &rd[nr].lo, &rd[nr].hi);
        nr++;
      }
    }
  }
  first[p->ngpus] = (uint32_t)nr;
  uint64_t pairs = 0;
  for (uint32_t w = 0; w < g->nops; w++) {
    const struct shunt_plan_op* o = g->nd[w].o;
    if (!shunt_op_is_packet(o->type)) continue;
    for (uint32_t d = 0; d < o->ndst; d++) {
      const struct shunt_plan_ref* e = &o->dst[d];
      if (e->type != SHUNT_BUF_SCRATCH || e->kind == SHUNT_REF_LOCAL) continue;
      double wlo, whi;
      slice(o, e, &wlo, &whi);
      for (uint32_t r = 0; r < p->ngpus; r++) {
        if (r == g->nd[w].r || !writes_into(p, g->nd[w].r, e, r)) continue;
        pairs += first[r + 1] - first[r];
        if (pairs > PAIR_BUDGET) {
          g->undecided = true;
          goto out;
        }
        for (uint32_t k = first[r]; k < first[r + 1]; k++)
          if (rd[k].lo < whi - 1e-9 && wlo < rd[k].hi - 1e-9) edge(g, w, rd[k].node);
      }
    }
  }
out:
  free(first);
  free(rd);
}

/* Device-wide barriers: the k-th arrival of each block at a barrier id joins a hub that the
 * other blocks' k-th arrivals leave from. Semaphores: the k-th acquire after the k-th release,
 * when the semaphore starts at 0 and each side is one block outside pipelines (else no edge:
 * nothing certain). */
static void rank_edges(struct graph* g) {
  const struct shunt_plan* p = g->p;
  for (uint32_t r = 0; r < p->ngpus && !g->oom; r++) {
    const struct shunt_plan_gpu* G = &p->gpus[r];
    uint32_t nb = G->nthreadblocks, ns = G->nsemaphores;
    uint32_t* arrivals = calloc((size_t)nb * SHUNT_PLAN_MAX_BARRIERS + 1, sizeof(*arrivals));
    uint32_t* nrel = calloc(ns + 1, sizeof(*nrel));
    uint32_t* nacq = calloc(ns + 1, sizeof(*nacq));
    int64_t* blk = malloc(((size_t)ns * 2 + 1) * sizeof(*blk)); /* [2s]: acquires, [2s+1]: releases */
    uint32_t* rel_off = calloc(ns + 1, sizeof(*rel_off));
    uint32_t* rels = NULL;
    if (!arrivals || !nrel || !nacq || !blk || !rel_off) goto next;
    for (uint32_t i = 0; i < 2 * ns; i++) blk[i] = -1;
    /* Pass 1: barrier arrivals per block and id (the hubs), semaphore uses per side. */
    uint32_t maxk = 0;
    for (uint32_t n = g->rank_base[r]; n < g->rank_base[r + 1]; n++) {
      const struct node* x = &g->nd[n];
      const struct shunt_plan_op* o = x->o;
      if (o->type == SHUNT_OP_BARRIER && o->num_threadblocks > 1 && x->j < 0 &&
          o->barrier_id < SHUNT_PLAN_MAX_BARRIERS) {
        uint32_t k = ++arrivals[x->b * SHUNT_PLAN_MAX_BARRIERS + o->barrier_id];
        if (k > maxk) maxk = k;
      }
      int side = o->type == SHUNT_OP_SEM_ACQUIRE ? 0 : o->type == SHUNT_OP_SEM_RELEASE ? 1 : -1;
      for (uint32_t q = 0; side >= 0 && q < o->nsemaphore_ids; q++) {
        uint32_t sem = o->semaphore_ids[q];
        if (sem >= ns) continue;
        one_block(&blk[2 * sem + (uint32_t)side], x);
        if (side == 1) nrel[sem]++;
      }
    }
    uint32_t hub0 = g->nops + p->ngpus + g->nhubs;
    if ((uint64_t)maxk * SHUNT_PLAN_MAX_BARRIERS > UINT32_MAX - hub0) {
      g->oom = true;
      goto next;
    }
    g->nhubs += maxk * SHUNT_PLAN_MAX_BARRIERS;
    for (uint32_t sem = 0; sem < ns; sem++) rel_off[sem + 1] = rel_off[sem] + nrel[sem];
    rels = malloc(((size_t)rel_off[ns] + 1) * sizeof(*rels));
    if (!rels) goto next;
    memset(nrel, 0, (ns + 1) * sizeof(*nrel));
    memset(arrivals, 0, ((size_t)nb * SHUNT_PLAN_MAX_BARRIERS + 1) * sizeof(*arrivals));
    /* Pass 2: each arrival to and from its hub; the releases in order. */
    for (uint32_t n = g->rank_base[r]; n < g->rank_base[r + 1]; n++) {
      const struct node* x = &g->nd[n];
      const struct shunt_plan_op* o = x->o;
      if (o->type == SHUNT_OP_BARRIER && o->num_threadblocks > 1 && x->j < 0 &&
          o->barrier_id < SHUNT_PLAN_MAX_BARRIERS) {
        uint32_t k = arrivals[x->b * SHUNT_PLAN_MAX_BARRIERS + o->barrier_id]++;
        uint32_t hub = hub0 + k * SHUNT_PLAN_MAX_BARRIERS + o->barrier_id;
        edge(g, n, hub);
        edge(g, hub, n);
      }
      for (uint32_t q = 0; o->type == SHUNT_OP_SEM_RELEASE && q < o->nsemaphore_ids; q++)
        if (o->semaphore_ids[q] < ns) rels[rel_off[o->semaphore_ids[q]] + nrel[o->semaphore_ids[q]]++] = n;
    }
    /* Pass 3: the k-th acquire after the k-th release. */
    for (uint32_t n = g->rank_base[r]; n < g->rank_base[r + 1]; n++) {
      const struct shunt_plan_op* o = g->nd[n].o;
      for (uint32_t q = 0; o->type == SHUNT_OP_SEM_ACQUIRE && q < o->nsemaphore_ids; q++) {
        uint32_t sem = o->semaphore_ids[q];
        if (sem >= ns) continue;
        uint32_t k = nacq[sem]++;
        if (G->semaphores[sem] == 0 && blk[2 * sem] >= 0 && blk[2 * sem + 1] >= 0 && k < nrel[sem])
          edge(g, rels[rel_off[sem] + k], n);
      }
    }
  next:
    if (!arrivals || !nrel || !nacq || !blk || !rel_off || !rels) g->oom = true;
    free(arrivals);
    free(nrel);
    free(nacq);
    free(blk);
    free(rel_off);
    free(rels);
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
  if (g->undecided) return true;
  uint32_t total = g->nops + p->ngpus + g->nhubs;
  g->off = calloc(total + 1, sizeof(*g->off));
  g->adj = malloc((g->ne ? g->ne : 1) * sizeof(*g->adj));
  if (!g->off || !g->adj) return false;
  for (size_t e = 0; e < g->ne; e++) g->off[g->ef[e] + 1]++;
  for (uint32_t v = 0; v < total; v++) g->off[v + 1] += g->off[v];
  uint32_t* fill = calloc(total, sizeof(*fill));
  if (!fill) return false;
  for (size_t e = 0; e < g->ne; e++) g->adj[g->off[g->ef[e]] + fill[g->ef[e]]++] = g->et[e];
  g->roff = calloc(total + 1, sizeof(*g->roff));
  g->radj = malloc((g->ne ? g->ne : 1) * sizeof(*g->radj));
  if (!g->roff || !g->radj) {
    free(fill);
    return false;
  }
  for (size_t e = 0; e < g->ne; e++) g->roff[g->et[e] + 1]++;
  for (uint32_t v = 0; v < total; v++) g->roff[v + 1] += g->roff[v];
  memset(fill, 0, total * sizeof(*fill));
  for (size_t e = 0; e < g->ne; e++) g->radj[g->roff[g->et[e]] + fill[g->et[e]]++] = g->ef[e];
  free(fill);
  return true;
}

/* Marks in `seen` every node reachable from rank q's entry. */
static void reach(const struct graph* g, uint32_t q, unsigned char* seen, uint32_t* stack) {
  uint32_t total = g->nops + g->p->ngpus + g->nhubs, top = 0;
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

/* Marks in `seen` every node from which some op of rank w is reachable. */
static void coreach(const struct graph* g, uint32_t w, unsigned char* seen, uint32_t* stack) {
  uint32_t total = g->nops + g->p->ngpus + g->nhubs, top = 0;
  memset(seen, 0, total);
  for (uint32_t n = g->rank_base[w]; n < g->rank_base[w + 1]; n++) {
    seen[n] = 1;
    stack[top++] = n;
  }
  while (top) {
    uint32_t v = stack[--top];
    for (uint32_t e = g->roff[v]; e < g->roff[v + 1]; e++)
      if (!seen[g->radj[e]]) {
        seen[g->radj[e]] = 1;
        stack[top++] = g->radj[e];
      }
  }
}

/* Rule 3. A write into a single scratch (w_node's dst_buff[d], into rank r's) with a read of
 * the chunks it overlaps that comes before no op of the writer; it stays an error unless the
 * write depends on rank r. */
struct scratch_race {
  uint32_t w_node, d, r, reader;
};

struct scratch_races {
  struct scratch_race* v;
  size_t n, cap;
};

/* Whether entry e of an op of rank a is in rank q's scratch. */
static bool in_scratch_of(const struct shunt_plan* p, uint32_t a, const struct shunt_plan_ref* e,
                          uint32_t q) {
  if (e->type != SHUNT_BUF_SCRATCH) return false;
  if (e->kind == SHUNT_REF_LOCAL) return a == q;
  return e->global >= 0 && writes_into(p, a, e, q);
}

static bool is_data(const struct shunt_plan_op* o) {
  return !shunt_op_is_sync(o->type) && o->type != SHUNT_OP_PIPELINE;
}

/* Finds the rule 3 candidates: reads of every rank's scratch, by any rank, grouped by owner;
 * then per writer w, the nodes that come before some op of w, and its writes' unordered reads. */
static bool scratch_candidates(const struct graph* g, unsigned char* seen, uint32_t* stack,
                               struct scratch_races* out, bool* undecided) {
  const struct shunt_plan* p = g->p;
  bool ok = false;
  uint32_t* first = calloc(p->ngpus + 1, sizeof(*first));
  struct reader* rd = NULL;
  if (!first) return false;
  for (int pass = 0; pass < 2; pass++) {
    size_t nr = 0;
    for (uint32_t q = 0; q < p->ngpus; q++) {
      first[q] = (uint32_t)nr;
      for (uint32_t n = 0; n < g->nops; n++) {
        const struct shunt_plan_op* o = g->nd[n].o;
        if (!is_data(o)) continue;
        for (uint32_t s = 0; s < o->nsrc; s++) {
          if (!in_scratch_of(p, g->nd[n].r, &o->src[s], q)) continue;
          if (pass == 1) {
            rd[nr].node = n;
            slice(o, &o->src[s], &rd[nr].lo, &rd[nr].hi);
          }
          nr++;
        }
      }
    }
    first[p->ngpus] = (uint32_t)nr;
    if (pass == 0 && !(rd = malloc((nr ? nr : 1) * sizeof(*rd)))) goto out;
  }
  uint64_t pairs = 0;
  for (uint32_t w = 0; w < p->ngpus; w++) {
    bool marked = false;
    for (uint32_t n = g->rank_base[w]; n < g->rank_base[w + 1]; n++) {
      const struct shunt_plan_op* o = g->nd[n].o;
      if (!is_data(o)) continue;
      for (uint32_t d = 0; d < o->ndst; d++) {
        const struct shunt_plan_ref* e = &o->dst[d];
        if (e->kind == SHUNT_REF_LOCAL) continue;
        double wlo, whi;
        slice(o, e, &wlo, &whi);
        for (uint32_t r = 0; r < p->ngpus; r++) {
          if (r == w || !in_scratch_of(p, w, e, r)) continue;
          if (!marked) {
            coreach(g, w, seen, stack);
            marked = true;
          }
          pairs += first[r + 1] - first[r];
          if (pairs > PAIR_BUDGET) {
            *undecided = true;
            ok = true;
            goto out;
          }
          for (uint32_t k = first[r]; k < first[r + 1]; k++) {
            if (g->nd[rd[k].node].r == w || seen[rd[k].node]) continue;
            if (!(rd[k].lo < whi - 1e-9 && wlo < rd[k].hi - 1e-9)) continue;
            if (out->n == out->cap) {
              size_t cap = out->cap ? out->cap * 2 : 16;
              struct scratch_race* v = realloc(out->v, cap * sizeof(*v));
              if (!v) goto out;
              out->v = v;
              out->cap = cap;
            }
            out->v[out->n++] = (struct scratch_race){n, d, r, rd[k].node};
            break;
          }
        }
      }
    }
  }
  ok = true;
out:
  free(first);
  free(rd);
  return ok;
}

/* Rule 3's error for a candidate whose write does not depend on its rank r (`seen`: reachable
 * from r's entry), once per writer and scratch owner. */
static void check_scratch(struct cctx* c, const struct graph* g, const struct scratch_races* sr, uint32_t q,
                          const unsigned char* seen) {
  uint32_t done_w = UINT32_MAX;
  for (size_t k = 0; k < sr->n; k++) {
    const struct scratch_race* x = &sr->v[k];
    const struct node* w = &g->nd[x->w_node];
    const struct node* rd = &g->nd[x->reader];
    if (x->r != q || seen[x->w_node] || w->r == done_w) continue;
    done_w = w->r; /* candidates come grouped by writer */
    struct oppos at = {rd->r, rd->b, rd->i, rd->j}, wat = {w->r, w->b, w->i, w->j};
    char wpath[96];
    char sfx[24];
    snprintf(sfx, sizeof(sfx), ".dst_buff[%u]", x->d);
    oppath(&wat, sfx, wpath, sizeof(wpath));
    const struct shunt_plan_ref* e = &w->o->dst[x->d];
    operr(
        c, &at, "",
        "unsafe across back-to-back calls: %s reads rank %u's single scratch, written by rank %u's %s (%s, "
        "chunks [%u, %u)), and comes before no op of rank %u in the call: its next call can overwrite the "
        "chunks while they are read; signal rank %u after the last read, or make the write wait for rank %u",
        shunt_op_name(rd->o->type), q, w->r, shunt_op_name(w->o->type), wpath, e->index, e->index + e->size,
        w->r, w->r, q);
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
    if (e->type == SHUNT_BUF_SCRATCH || !writes_into(c->p, x->r, e, q)) continue;
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
  unsigned char *seen = NULL, *deaf = NULL;
  uint32_t* stack = NULL;
  struct scratch_races sr = {0};
  if (!build(&g)) goto oom;
  if (g.undecided) goto done;
  uint32_t total = g.nops + p->ngpus + g.nhubs;
  seen = malloc(total);
  stack = malloc(total * sizeof(*stack));
  if (!seen || !stack) goto oom;
  deaf = calloc((size_t)p->ngpus * p->ngpus, 1); /* [r * n + q]: nothing of q reaches r */
  if (!deaf) goto oom;
  if (!p->use_double_scratch_buffer) {
    bool undecided = false;
    if (!scratch_candidates(&g, seen, stack, &sr, &undecided)) goto oom;
    if (undecided) goto done;
  }
  for (uint32_t q = 0; q < p->ngpus; q++) {
    reach(&g, q, seen, stack);
    for (uint32_t r = 0; r < p->ngpus; r++) {
      bool hears = r == q;
      for (uint32_t n = g.rank_base[r]; n < g.rank_base[r + 1] && !hears; n++) hears = seen[n];
      deaf[(size_t)r * p->ngpus + q] = !hears;
    }
    for (uint32_t n = 0; n < g.nops; n++)
      if (g.nd[n].r != q) check_writes(c, &g, n, q, seen);
    check_scratch(c, &g, &sr, q, seen);
  }
  /* One error per rank that can run ahead, naming the ranks it does not wait for. Send/receive
   * plans (MSCCL++'s DSL writes rings of them: each rank hears from its neighbours only) and
   * other collectives are listed but never selected, so never run between the ones checked. */
  bool served = p->coll != SHUNT_COLL_SENDRECV && p->coll != SHUNT_COLL_OTHER;
  for (uint32_t r = 0; r < p->ngpus && served; r++) {
    char list[160];
    size_t at = 0;
    uint32_t count = 0;
    for (uint32_t q = 0; q < p->ngpus; q++) {
      if (!deaf[(size_t)r * p->ngpus + q]) continue;
      count++;
      if (at < sizeof(list) - 16)
        at += (size_t)snprintf(list + at, sizeof(list) - at, "%s%u", count > 1 ? ", " : "", q);
      else if (at < sizeof(list) - 4)
        at += (size_t)snprintf(list + at, sizeof(list) - at, "...");
    }
    if (!count) continue;
    char path[32];
    snprintf(path, sizeof(path), "gpus[%u]", r);
    cerr(c, path,
         "unsafe across back-to-back calls: rank %u can finish the call without depending, directly or "
         "through "
         "other ranks, on rank%s %s: it can run calls ahead of %s, and a later plan's packets or writes can "
         "land "
         "in memory still in use there (every rank must wait, through a chain of signals or packets, for "
         "every "
         "other rank)",
         r, count > 1 ? "s" : "", list, count > 1 ? "them" : "it");
  }
  goto done;
oom:
  cerr(c, "gpus", "out of memory in the check of calls back to back");
done:
  free(deaf);
  free(seen);
  free(stack);
  free(g.nd);
  free(g.rank_base);
  free(g.ef);
  free(g.et);
  free(g.off);
  free(g.adj);
  free(g.roff);
  free(g.radj);
  free(sr.v);
}
