/* Hazards across back-to-back calls: ranks that a plan does not keep in step.
 *
 * Calls of a communicator follow each other with no barrier between them, so what bounds how
 * far one rank can run ahead of another is only what its plans make it wait for. Three rules,
 * on a happens-before graph of the plan's ops (program order in a block; a signal to the wait
 * it satisfies; a packet write to the packet reads of the bytes it writes; a device-wide
 * barrier between its blocks; a semaphore release to its acquire, between blocks of a rank):
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
 * The graph is built in check_hb.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/check_hb.h"

/* Marks in `seen` every node reachable from rank q's entry. */
static void reach(const struct hb_graph* g, uint32_t q, unsigned char* seen, uint32_t* stack) {
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
static void coreach(const struct hb_graph* g, uint32_t w, unsigned char* seen, uint32_t* stack) {
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
  return e->global >= 0 && hb_writes_into(p, a, e, q);
}

static bool is_data(const struct shunt_plan_op* o) {
  return !shunt_op_is_sync(o->type) && o->type != SHUNT_OP_PIPELINE;
}

/* Finds the rule 3 candidates: reads of every rank's scratch, by any rank, grouped by owner;
 * then per writer w, the nodes that come before some op of w, and its writes' unordered reads. */
static bool scratch_candidates(const struct hb_graph* g, unsigned char* seen, uint32_t* stack,
                               struct scratch_races* out, bool* undecided) {
  const struct shunt_plan* p = g->p;
  bool ok = false;
  uint32_t* first = calloc(p->ngpus + 1, sizeof(*first));
  struct hb_reader* rd = NULL;
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
            hb_slice(o, &o->src[s], &rd[nr].lo, &rd[nr].hi);
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
        hb_slice(o, e, &wlo, &whi);
        for (uint32_t r = 0; r < p->ngpus; r++) {
          if (r == w || !in_scratch_of(p, w, e, r)) continue;
          if (!marked) {
            coreach(g, w, seen, stack);
            marked = true;
          }
          pairs += first[r + 1] - first[r];
          if (pairs > HB_PAIR_BUDGET) {
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
static void check_scratch(struct cctx* c, const struct hb_graph* g, const struct scratch_races* sr,
                          uint32_t q, const unsigned char* seen) {
  uint32_t done_w = UINT32_MAX;
  for (size_t k = 0; k < sr->n; k++) {
    const struct scratch_race* x = &sr->v[k];
    const struct hb_node* w = &g->nd[x->w_node];
    const struct hb_node* rd = &g->nd[x->reader];
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
static void check_writes(struct cctx* c, const struct hb_graph* g, uint32_t n, uint32_t q,
                         const unsigned char* seen) {
  const struct hb_node* x = &g->nd[n];
  const struct shunt_plan_op* o = x->o;
  if (seen[n] || shunt_op_is_sync(o->type) || o->type == SHUNT_OP_PIPELINE) return;
  for (uint32_t d = 0; d < o->ndst; d++) {
    const struct shunt_plan_ref* e = &o->dst[d];
    if (e->type == SHUNT_BUF_SCRATCH || !hb_writes_into(c->p, x->r, e, q)) continue;
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
  struct hb_graph g = {.p = p};
  unsigned char *seen = NULL, *deaf = NULL;
  uint32_t* stack = NULL;
  struct scratch_races sr = {0};
  if (!hb_build(&g)) goto oom;
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
  bool served = shunt_coll_served(p->coll);
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
  hb_free(&g);
  free(sr.v);
}
