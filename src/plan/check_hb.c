/* The happens-before graph of a plan's ops that the check of calls back to back reads
 * (check_step.c): program order in a block; a signal to the wait it satisfies; a packet write to
 * the packet reads of the bytes it writes; a device-wide barrier between its blocks; a semaphore
 * release to its acquire, between blocks of a rank.
 *
 * A node of a pipeline body stands for all its iterations; an edge a -> b claims that a's first
 * instance comes before b's first, and a's last before b's last. Reaching from a rank's entry
 * reads the first (every instance of a write after the entry), reaching an op of a rank reads
 * the last (every instance of a read before that op). Program order keeps both; so do a signal
 * and its wait, and a semaphore release and its acquire, paired k-th to k-th when each side's
 * uses are in one block and have one shape: the same uses outside pipelines and in pipelines of
 * one iteration count (then the k-th meet in every iteration). Otherwise a wait only counts as
 * depending on the peer having entered the call (sound, but it carries no chain through that
 * peer), and an acquire on nothing. */
#include <stdlib.h>
#include <string.h>

#include "plan/check_hb.h"

static void edge(struct hb_graph* g, uint32_t a, uint32_t b) {
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

/* Sync uses in node order (rank, block, op), grouped by key: a channel's signals (key 2c) and
 * waits (2c + 1), c numbered per (rank, type, global index) from chan_base; a semaphore's
 * acquires (2s) and releases (2s + 1), s numbered after the channels per (rank, id) from
 * sem_base. An op that names a channel or semaphore twice uses it twice. */
struct uses {
  uint32_t *chan_base, *sem_base; /* [r * SHUNT_CHAN_TYPES + t], [r] */
  uint32_t nkeys;
  uint32_t *off, *node; /* the uses of key k: node[off[k] .. off[k + 1]) */
};

static int32_t chan_index(const struct hb_graph* g, const struct uses* u, uint32_t r, enum shunt_chan_type t,
                          int32_t ch) {
  if ((t != SHUNT_CHAN_MEMORY && t != SHUNT_CHAN_PORT) || ch < 0 ||
      (uint32_t)ch >= g->p->gpus[r].nchannels[t])
    return -1;
  return (int32_t)(u->chan_base[r * SHUNT_CHAN_TYPES + t] + (uint32_t)ch);
}

/* Counts node v's uses into off[key + 1] (cur NULL), or places v at cur[key]++. */
static void add_uses(const struct hb_graph* g, struct uses* u, uint32_t v, uint32_t* cur) {
  const struct hb_node* x = &g->nd[v];
  const struct shunt_plan_op* o = x->o;
  bool sig = is_signal(o), wait = is_wait(o);
  bool acq = o->type == SHUNT_OP_SEM_ACQUIRE, rel = o->type == SHUNT_OP_SEM_RELEASE;
  uint32_t n = sig || wait ? o->nchannel_ids : acq || rel ? o->nsemaphore_ids : 0;
  for (uint32_t k = 0; k < n; k++) {
    uint32_t key;
    if (sig || wait) {
      int32_t i = chan_index(g, u, x->r, o->channel_type, o->channel_global[k]);
      if (i < 0) continue;
      key = 2 * (uint32_t)i + wait;
    } else {
      if (o->semaphore_ids[k] >= g->p->gpus[x->r].nsemaphores) continue;
      key = 2 * (u->sem_base[x->r] + o->semaphore_ids[k]) + rel;
    }
    if (cur)
      u->node[cur[key]++] = v;
    else
      u->off[key + 1]++;
  }
}

static bool uses_build(const struct hb_graph* g, struct uses* u) {
  const struct shunt_plan* p = g->p;
  u->chan_base = calloc((size_t)p->ngpus * SHUNT_CHAN_TYPES, sizeof(*u->chan_base));
  u->sem_base = calloc(p->ngpus, sizeof(*u->sem_base));
  if (!u->chan_base || !u->sem_base) return false;
  uint64_t n = 0;
  for (uint32_t r = 0; r < p->ngpus; r++)
    for (uint32_t t = 0; t < SHUNT_CHAN_TYPES; t++) {
      u->chan_base[r * SHUNT_CHAN_TYPES + t] = (uint32_t)n;
      if (t == SHUNT_CHAN_MEMORY || t == SHUNT_CHAN_PORT) n += p->gpus[r].nchannels[t];
    }
  for (uint32_t r = 0; r < p->ngpus; r++) {
    u->sem_base[r] = (uint32_t)n;
    n += p->gpus[r].nsemaphores;
  }
  if (2 * n >= UINT32_MAX) return false;
  u->nkeys = (uint32_t)(2 * n);
  u->off = calloc((size_t)u->nkeys + 1, sizeof(*u->off));
  uint32_t* cur = malloc(((size_t)u->nkeys + 1) * sizeof(*cur));
  if (!u->off || !cur) {
    free(cur);
    return false;
  }
  for (uint32_t v = 0; v < g->nops; v++) add_uses(g, u, v, NULL);
  for (uint32_t k = 0; k < u->nkeys; k++) u->off[k + 1] += u->off[k];
  u->node = malloc(((size_t)u->off[u->nkeys] + 1) * sizeof(*u->node));
  if (u->node) {
    memcpy(cur, u->off, ((size_t)u->nkeys + 1) * sizeof(*cur));
    for (uint32_t v = 0; v < g->nops; v++) add_uses(g, u, v, cur);
  }
  free(cur);
  return u->node != NULL;
}

static void uses_free(struct uses* u) {
  free(u->chan_base);
  free(u->sem_base);
  free(u->off);
  free(u->node);
}

/* The pipeline op around node x, or NULL. */
static const struct shunt_plan_op* around(const struct hb_graph* g, const struct hb_node* x) {
  return x->j < 0 ? NULL : &g->p->gpus[x->r].threadblocks[x->b].ops[x->i];
}

/* Whether two lists of n uses pair k-th with k-th in every execution as nodes: each list in one
 * block, the same sequence of uses outside pipelines and of pipelines of one shape (unit_size,
 * num_chunks: one iteration count, since every rank and block shares the chunk unit) holding as
 * many uses. Then the k-th use of one meets the other's k-th in every iteration: first instance
 * with first, last with last, which is what an edge between the nodes claims. */
static bool same_shape(const struct hb_graph* g, const uint32_t* a, const uint32_t* b, uint32_t n) {
  for (uint32_t k = 0; k < n; k++) {
    const struct hb_node *x = &g->nd[a[k]], *y = &g->nd[b[k]], *x0 = &g->nd[a[0]], *y0 = &g->nd[b[0]];
    if (x->r != x0->r || x->b != x0->b || y->r != y0->r || y->b != y0->b) return false;
    const struct shunt_plan_op *px = around(g, x), *py = around(g, y);
    if (!px != !py) return false;
    if (!px) continue;
    bool newx = k == 0 || g->nd[a[k - 1]].i != x->i, newy = k == 0 || g->nd[b[k - 1]].i != y->i;
    if (newx != newy || px->unit_size != py->unit_size || px->num_chunks != py->num_chunks) return false;
  }
  return true;
}

/* Edges from the k-th use of key `from` to the k-th of key `to` when they pair as nodes;
 * returns false, adding nothing, when they do not. */
static bool pair_edges(struct hb_graph* g, const struct uses* u, uint32_t from, uint32_t to) {
  uint32_t n = u->off[to + 1] - u->off[to];
  const uint32_t *a = &u->node[u->off[from]], *b = &u->node[u->off[to]];
  if (u->off[from + 1] - u->off[from] != n || !same_shape(g, a, b, n)) return false;
  for (uint32_t k = 0; k < n; k++) edge(g, a[k], b[k]);
  return true;
}

/* A wait after the signal it pairs with, when both channels' uses pair as nodes; otherwise only
 * after its peer's entry (the peer has entered the call). */
static void signal_edges(struct hb_graph* g, const struct uses* u) {
  const struct shunt_plan* p = g->p;
  for (uint32_t r = 0; r < p->ngpus; r++)
    for (uint32_t t = SHUNT_CHAN_MEMORY; t <= SHUNT_CHAN_PORT; t++)
      for (uint32_t m = 0; m < p->gpus[r].nchannels[t]; m++) {
        uint32_t i = (uint32_t)chan_index(g, u, r, t, (int32_t)m), w = 2 * i + 1;
        const struct shunt_plan_channel* ch = &p->gpus[r].channels[t][m];
        if (u->off[w] == u->off[w + 1] || ch->peer < 0 || (uint32_t)ch->peer >= p->ngpus ||
            (uint32_t)ch->peer == r)
          continue;
        uint32_t q = (uint32_t)ch->peer;
        int32_t qi = -1;
        for (uint32_t k = 0; k < p->gpus[q].nchannels[t] && qi < 0; k++)
          if (p->gpus[q].channels[t][k].peer == (int32_t)r &&
              p->gpus[q].channels[t][k].peer_ordinal == ch->peer_ordinal)
            qi = chan_index(g, u, q, t, (int32_t)k);
        if (qi >= 0 && pair_edges(g, u, 2 * (uint32_t)qi, w)) continue;
        for (uint32_t k = u->off[w]; k < u->off[w + 1]; k++) edge(g, g->nops + q, u->node[k]);
      }
}

/* Semaphores: the k-th acquire after the k-th release when the semaphore starts at 0 (every
 * execution leaves it there: the balance check) and the uses pair as nodes in two blocks;
 * otherwise no edge, nothing being certain. */
static void semaphore_edges(struct hb_graph* g, const struct uses* u) {
  const struct shunt_plan* p = g->p;
  for (uint32_t r = 0; r < p->ngpus; r++)
    for (uint32_t s = 0; s < p->gpus[r].nsemaphores; s++) {
      uint32_t acq = 2 * (u->sem_base[r] + s), rel = acq + 1;
      if (p->gpus[r].semaphores[s] != 0 || u->off[acq] == u->off[acq + 1] || u->off[rel] == u->off[rel + 1] ||
          g->nd[u->node[u->off[acq]]].b == g->nd[u->node[u->off[rel]]].b)
        continue;
      pair_edges(g, u, rel, acq);
    }
}

/* The part [lo, hi) of an entry, in chunks, that an op's thread-block-group slice covers. */
void hb_slice(const struct shunt_plan_op* o, const struct shunt_plan_ref* e, double* lo, double* hi) {
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
bool hb_writes_into(const struct shunt_plan* p, uint32_t w, const struct shunt_plan_ref* e, uint32_t q) {
  if (e->kind == SHUNT_REF_REMOTE) return e->peer == (int32_t)q;
  if (e->kind != SHUNT_REF_SWITCH || e->global < 0 ||
      (uint32_t)e->global >= p->gpus[w].nchannels[SHUNT_CHAN_SWITCH])
    return false;
  const struct shunt_plan_channel* ch = &p->gpus[w].channels[SHUNT_CHAN_SWITCH][e->global];
  for (uint32_t k = 0; k < ch->nranks; k++)
    if (ch->ranks[k] == (int32_t)q) return true;
  return false;
}

/* Packets written into another rank's scratch, to the reads of overlapping packets there; more
 * pairs to compare than HB_PAIR_BUDGET leave the graph undecided. */
static void packet_edges(struct hb_graph* g) {
  const struct shunt_plan* p = g->p;
  uint32_t* first = calloc(p->ngpus + 1, sizeof(*first));
  size_t nr = 0;
  for (uint32_t n = 0; n < g->nops; n++)
    for (uint32_t s = packet_src_first(g->nd[n].o); s < g->nd[n].o->nsrc; s++) nr++;
  struct hb_reader* rd = malloc((nr ? nr : 1) * sizeof(*rd));
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
        hb_slice(o, &o->src[s], &rd[nr].lo, &rd[nr].hi);
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
      hb_slice(o, e, &wlo, &whi);
      for (uint32_t r = 0; r < p->ngpus; r++) {
        if (r == g->nd[w].r || !hb_writes_into(p, g->nd[w].r, e, r)) continue;
        pairs += first[r + 1] - first[r];
        if (pairs > HB_PAIR_BUDGET) {
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
 * other blocks' k-th arrivals leave from. */
static void barrier_edges(struct hb_graph* g) {
  const struct shunt_plan* p = g->p;
  for (uint32_t r = 0; r < p->ngpus && !g->oom; r++) {
    uint32_t nb = p->gpus[r].nthreadblocks;
    uint32_t* arrivals = calloc((size_t)nb * SHUNT_PLAN_MAX_BARRIERS + 1, sizeof(*arrivals));
    if (!arrivals) {
      g->oom = true;
      return;
    }
    /* Pass 1 counts the arrivals per block and id (the hubs); pass 2 joins each to its hub. */
    uint32_t maxk = 0, hub0 = 0;
    for (int pass = 0; pass < 2; pass++) {
      for (uint32_t n = g->rank_base[r]; n < g->rank_base[r + 1]; n++) {
        const struct hb_node* x = &g->nd[n];
        const struct shunt_plan_op* o = x->o;
        if (o->type != SHUNT_OP_BARRIER || o->num_threadblocks < 2 || x->j >= 0 ||
            o->barrier_id >= SHUNT_PLAN_MAX_BARRIERS)
          continue;
        uint32_t k = arrivals[x->b * SHUNT_PLAN_MAX_BARRIERS + o->barrier_id]++;
        if (pass == 0 && k + 1 > maxk) maxk = k + 1;
        if (pass == 1) {
          edge(g, n, hub0 + k * SHUNT_PLAN_MAX_BARRIERS + o->barrier_id);
          edge(g, hub0 + k * SHUNT_PLAN_MAX_BARRIERS + o->barrier_id, n);
        }
      }
      if (pass == 0) {
        hub0 = g->nops + p->ngpus + g->nhubs;
        if ((uint64_t)maxk * SHUNT_PLAN_MAX_BARRIERS > UINT32_MAX - hub0) {
          g->oom = true;
          break;
        }
        g->nhubs += maxk * SHUNT_PLAN_MAX_BARRIERS;
        memset(arrivals, 0, ((size_t)nb * SHUNT_PLAN_MAX_BARRIERS + 1) * sizeof(*arrivals));
      }
    }
    free(arrivals);
  }
}

bool hb_build(struct hb_graph* g) {
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
        g->nd[n++] = (struct hb_node){r, b, i, -1, &tb->ops[i]};
        for (uint32_t j = 0; j < tb->ops[i].nops; j++) {
          edge(g, n - 1, n);
          g->nd[n++] = (struct hb_node){r, b, i, (int32_t)j, &tb->ops[i].ops[j]};
        }
      }
    }
  }
  g->rank_base[p->ngpus] = n;
  struct uses u = {0};
  if (uses_build(g, &u)) {
    signal_edges(g, &u);
    semaphore_edges(g, &u);
  } else {
    g->oom = true;
  }
  uses_free(&u);
  packet_edges(g);
  barrier_edges(g);
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

void hb_free(struct hb_graph* g) {
  free(g->nd);
  free(g->rank_base);
  free(g->ef);
  free(g->et);
  free(g->off);
  free(g->adj);
  free(g->roff);
  free(g->radj);
}
