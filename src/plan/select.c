/* Plan lookup. Load time builds, per (collective, rank count, in-place) key, a packed array
 * of the usable plans in priority order (narrowest range, then file name); a lookup finds
 * the key by binary search and returns the first plan that accepts the call. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/planset_internal.h"
#include "util/log.h"

bool shunt_select_inplace(enum shunt_coll coll, const void* send, const void* recv, uint32_t rank,
                          uint64_t per_rank_bytes) {
  return shunt_coll_inplace(coll, send, recv, rank, per_rank_bytes);
}

/* a * b, or 0 when it does not fit (0 then means "never"). */
static uint64_t mul_or_0(uint64_t a, uint64_t b) {
  return (a && b > UINT64_MAX / a) ? 0 : a * b;
}

static uint64_t gcd64(uint64_t a, uint64_t b) {
  while (b) {
    uint64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

/* Least common multiple, 0 when it overflows or either is 0. */
static uint64_t lcm_or_0(uint64_t a, uint64_t b) {
  if (!a || !b) return 0;
  return mul_or_0(a / gcd64(a, b), b);
}

static void fill_sel(const struct shunt_plan_entry* e, uint32_t idx, struct sel_entry* s) {
  const struct shunt_plan* p = e->plan;
  s->min = e->min_bytes;
  s->max = e->max_bytes;
  s->entry = idx;
  s->redop = p->reduce_op;
  s->rpn = p->ranks_per_node;
  uint64_t in = p->gpus[0].input_chunks, out = p->gpus[0].output_chunks, a = p->buffer_alignment;
  /* Total bytes -> send bytes: allgather sends bytes / nranks; others send all of it. */
  uint64_t div = shunt_coll_size_units(p->coll, p->ngpus) / shunt_coll_in_units(p->coll, p->ngpus);
  uint64_t q_send = mul_or_0(mul_or_0(a, in ? in : 1), div), q_recv = mul_or_0(a, out ? out : 1);
  s->quantum = lcm_or_0(q_send, q_recv);
  /* Device offsets are 32-bit: the largest buffer, in chunks, times the chunk must fit. */
  uint64_t units = 1;
  for (uint32_t r = 0; r < p->ngpus; r++) {
    const struct shunt_plan_gpu* g = &p->gpus[r];
    uint64_t sc = (uint64_t)g->scratch_chunks * (p->ll ? 2 : 1) * (p->use_double_scratch_buffer ? 2 : 1);
    if (g->input_chunks > units) units = g->input_chunks;
    if (g->output_chunks > units) units = g->output_chunks;
    if (sc > units) units = sc;
  }
  uint64_t max_chunk = UINT32_MAX / units;
  /* Pipeline iteration counters are 16-bit: ceil(num_chunks * chunk / unit_size) < 2^16. */
  for (uint32_t r = 0; r < p->ngpus; r++)
    for (uint32_t b = 0; b < p->gpus[r].nthreadblocks; b++) {
      const struct shunt_plan_threadblock* tb = &p->gpus[r].threadblocks[b];
      for (uint32_t i = 0; i < tb->nops; i++) {
        const struct shunt_plan_op* o = &tb->ops[i];
        if (o->type != SHUNT_OP_PIPELINE || !o->num_chunks) continue;
        uint64_t lim = mul_or_0(o->unit_size, 65535);
        if (!lim) continue;
        lim /= o->num_chunks;
        if (lim < max_chunk) max_chunk = lim;
      }
    }
  /* chunk = send / in (or recv / out) <= max_chunk, expressed on total bytes. */
  uint64_t per = in ? mul_or_0(in, div) : out;
  uint64_t m = mul_or_0(max_chunk + 1, per);
  s->max_enc = m ? m - 1 : UINT64_MAX;
}

/* The in-place mode a plan is filed under: a rooted collective's plans serve both (planset.h). */
static bool key_inplace(const struct shunt_plan* p) {
  return !shunt_coll_rooted(p->coll) && p->inplace;
}

static int cmp_prio(const void* x, const void* y, const struct shunt_planset* ps) {
  const struct sel_entry *a = x, *b = y;
  const struct shunt_plan *pa = ps->entries[a->entry].plan, *pb = ps->entries[b->entry].plan;
  if (pa->coll != pb->coll) return pa->coll < pb->coll ? -1 : 1;
  if (pa->ngpus != pb->ngpus) return pa->ngpus < pb->ngpus ? -1 : 1;
  if (key_inplace(pa) != key_inplace(pb)) return key_inplace(pa) < key_inplace(pb) ? -1 : 1;
  /* A plan made for a placement (ranks per node) before one free of placement: where both
   * match, the communicator has that placement, and the plan was written for it. */
  if ((a->rpn == 0) != (b->rpn == 0)) return a->rpn ? -1 : 1;
  uint64_t wa = a->max - a->min, wb = b->max - b->min;
  if (wa != wb) return wa < wb ? -1 : 1;
  return strcmp(ps->entries[a->entry].file, ps->entries[b->entry].file);
}

/* qsort has no context argument in C11: insertion sort (load time, a few hundred plans). */
static void sort_sel(struct shunt_planset* ps, uint32_t n) {
  for (uint32_t i = 1; i < n; i++) {
    struct sel_entry t = ps->sel[i];
    uint32_t j = i;
    while (j > 0 && cmp_prio(&ps->sel[j - 1], &t, ps) > 0) {
      ps->sel[j] = ps->sel[j - 1];
      j--;
    }
    ps->sel[j] = t;
  }
}

static bool redops_overlap(enum shunt_plan_redop a, enum shunt_plan_redop b) {
  bool sa = a <= SHUNT_PLAN_REDOP_SUM, sb = b <= SHUNT_PLAN_REDOP_SUM;
  return (sa && sb) || a == b;
}

/* Broadcast plans compete only for the roots both serve (a multi-node plan serves the roots of
 * its root's local rank); other plans always compete. */
static bool roots_overlap(const struct shunt_plan_entry* a, const struct shunt_plan_entry* b) {
  if (!a->roots || !b->roots) return true;
  for (uint32_t r = 0; r < a->plan->ngpus && r < b->plan->ngpus; r++)
    if (a->roots[r].plan && b->roots[r].plan) return true;
  return false;
}

static void warn_overlaps(const struct shunt_planset* ps, const struct bucket* bk) {
  for (uint32_t i = 0; i < bk->count; i++)
    for (uint32_t j = i + 1; j < bk->count; j++) {
      const struct sel_entry *a = &ps->sel[bk->start + i], *b = &ps->sel[bk->start + j];
      if (a->max < b->min || b->max < a->min) continue;
      if (a->rpn != b->rpn) continue; /* other placements, or the placement's own plan wins */
      if (shunt_coll_reduces(bk->coll) && !redops_overlap(a->redop, b->redop)) continue;
      if (!roots_overlap(&ps->entries[a->entry], &ps->entries[b->entry])) continue;
      uint64_t lo = a->min > b->min ? a->min : b->min, hi = a->max < b->max ? a->max : b->max;
      /* Where each range came from (the plan file, or FILE:LINE of a tuning rule), so that a
       * tuning file's overlap names the lines to mend. */
      const struct shunt_plan_entry *ea = &ps->entries[a->entry], *eb = &ps->entries[b->entry];
      SHUNT_WARN(
          "plans %s (range from %s) and %s (range from %s) overlap for %s on %u ranks (%s) at sizes "
          "%llu..%llu; %s wins there (made for a placement, then narrowest range, then file name)",
          ea->file, ea->range_source, eb->file, eb->range_source, shunt_coll_name(bk->coll),
          bk->nranks, bk->inplace ? "in-place" : "out-of-place", (unsigned long long)lo,
          (unsigned long long)hi, ea->file);
    }
}

bool planset_index(struct shunt_planset* ps) {
  uint32_t n = 0;
  ps->sel = calloc(ps->usable ? ps->usable : 1, sizeof(*ps->sel));
  ps->buckets = calloc(ps->usable ? ps->usable : 1, sizeof(*ps->buckets));
  if (!ps->sel || !ps->buckets) return false;
  for (uint32_t i = 0; i < ps->n; i++)
    if (ps->entries[i].status == SHUNT_PLAN_OK) fill_sel(&ps->entries[i], i, &ps->sel[n++]);
  sort_sel(ps, n);
  for (uint32_t i = 0; i < n; i++) {
    const struct shunt_plan* p = ps->entries[ps->sel[i].entry].plan;
    struct bucket* last = ps->nbuckets ? &ps->buckets[ps->nbuckets - 1] : NULL;
    bool ip = key_inplace(p);
    if (!last || last->coll != p->coll || last->nranks != p->ngpus || last->inplace != ip) {
      last = &ps->buckets[ps->nbuckets++];
      *last = (struct bucket){bucket_key(p->coll, p->ngpus, ip), p->coll, p->ngpus, ip, i, 0};
    }
    last->count++;
  }
  ps->slot_bits = 3;
  while ((1u << ps->slot_bits) < 2 * ps->nbuckets) ps->slot_bits++;
  ps->slots = calloc(1u << ps->slot_bits, sizeof(*ps->slots));
  if (!ps->slots) return false;
  uint32_t mask = (1u << ps->slot_bits) - 1;
  for (uint32_t b = 0; b < ps->nbuckets; b++) {
    uint32_t h = slot_of(ps->buckets[b].key, ps->slot_bits);
    while (ps->slots[h]) h = (h + 1) & mask;
    ps->slots[h] = b + 1;
  }
  for (uint32_t b = 0; b < ps->nbuckets; b++) warn_overlaps(ps, &ps->buckets[b]);
  return true;
}

/* The bucket of plans filed for q's collective, rank count and in-place mode, or NULL; sets
 * *why when the query itself is not one plans serve (need: the plan reduce_op q needs). */
static const struct bucket* find_bucket(const struct shunt_planset* ps, const struct shunt_select_query* q,
                                        enum shunt_plan_redop* need, bool* scale, const char** why) {
  *need = SHUNT_PLAN_REDOP_NONE;
  *scale = false;
  if (!shunt_coll_served(q->coll)) {
    *why = "collective not served by plans";
    return NULL;
  }
  if (!shunt_dtype_valid(q->dtype)) {
    *why = "unknown data type";
    return NULL;
  }
  if (shunt_coll_reduces(q->coll)) {
    if (!shunt_redop_computed(q->op)) {
      *why = "reduction op not computed by plans";
      return NULL;
    }
    /* A plan whose ops name no reduce_op other than sum combines each contribution once and
     * so serves sum, prod, min and max alike (and avg/PreMulSum by scaling); a plan naming
     * another reduce_op serves exactly that op. */
    *need = shunt_plan_redop_for(q->op);
    /* Floating avg and PreMulSum scale each contribution; integer avg divides the sum, as
     * NCCL does, which a sum plan serves too. */
    *scale = (q->op == SHUNT_REDOP_AVG && shunt_dtype_is_float(q->dtype)) || q->op == SHUNT_REDOP_PREMULSUM;
  }
  bool rooted = shunt_coll_rooted(q->coll);
  if ((shunt_coll_layout(q->coll) != SHUNT_LAYOUT_FLAT || rooted) && q->nranks == 0) {
    *why = "no ranks";
    return NULL;
  }
  if (rooted && q->root >= q->nranks) {
    *why = "root out of range";
    return NULL;
  }
  /* Find the key (a rooted collective's plans are filed out of place: they serve both modes). */
  uint64_t key = bucket_key(q->coll, q->nranks, q->inplace && !rooted);
  if (ps && ps->slots) {
    uint32_t mask = (1u << ps->slot_bits) - 1;
    for (uint32_t h = slot_of(key, ps->slot_bits); ps->slots[h]; h = (h + 1) & mask)
      if (ps->buckets[ps->slots[h] - 1].key == key) return &ps->buckets[ps->slots[h] - 1];
  }
  *why = "no plan for this collective, rank count and in-place mode";
  return NULL;
}

/* Whether the plan s may serve q, its size range consulted only when `ranged`; the entry that
 * serves q (a broadcast root's own) in *out, or the reason in *why. */
static bool accepts(const struct shunt_planset* ps, const struct sel_entry* s,
                    const struct shunt_select_query* q, enum shunt_plan_redop need, bool ranged,
                    const struct shunt_plan_entry** out, const char** why) {
  if (ranged && (q->bytes < s->min || q->bytes > s->max)) return false;
  if (!shunt_rpn_matches(s->rpn, q->nranks, q->ranks_per_node)) {
    *why = "plans for this size need another number of ranks per node";
    return false;
  }
  if (shunt_coll_reduces(q->coll) && s->redop > SHUNT_PLAN_REDOP_SUM && s->redop != need) {
    *why = "plans for this size serve another reduction op";
    return false;
  }
  /* Any size runs (exec/split.h): what the chunk rule does not take runs as a padded tail. */
  if (!s->quantum) {
    *why = "no size splits into the plan's chunk counts";
    return false;
  }
  if (q->bytes > s->max_enc) {
    *why = "size exceeds the executor's 32-bit offsets or 16-bit pipeline counters";
    return false;
  }
  const struct shunt_plan_entry* e = &ps->entries[s->entry];
  if (shunt_coll_rooted(q->coll)) {
    /* The entry that serves this root; none where renaming would break the placement. */
    e = e->roots && q->root < e->plan->ngpus && e->roots[q->root].plan ? &e->roots[q->root] : NULL;
    if (!e) {
      static _Thread_local char rwhy[96];
      snprintf(rwhy, sizeof(rwhy), "no %s plan for root %u on this placement", shunt_coll_name(q->coll),
               q->root);
      *why = rwhy;
      return false;
    }
  }
  *out = e;
  return true;
}

struct shunt_selection shunt_planset_select(const struct shunt_planset* ps,
                                            const struct shunt_select_query* q) {
  struct shunt_selection res = {NULL, false, NULL};
  enum shunt_plan_redop need;
  const struct bucket* bk = find_bucket(ps, q, &need, &res.scale, &res.why_not);
  if (!bk) {
    res.scale = false;
    return res;
  }
  res.why_not = "no plan's size range holds this size";
  bool named = false;
  const struct sel_entry* s = &ps->sel[bk->start];
  for (uint32_t i = 0; i < bk->count; i++, s++) {
    if (q->only && strcmp(ps->entries[s->entry].plan->name, q->only) != 0) continue;
    named = true;
    if (!accepts(ps, s, q, need, true, &res.entry, &res.why_not)) continue;
    res.why_not = NULL;
    return res;
  }
  if (q->only && !named)
    res.why_not = "the plan the call names is not one for this collective, rank count and in-place mode";
  res.scale = false;
  res.entry = NULL;
  return res;
}

uint32_t shunt_planset_candidates(const struct shunt_planset* ps, const struct shunt_select_query* q,
                                  const struct shunt_plan_entry** out, uint32_t max) {
  enum shunt_plan_redop need;
  bool scale;
  const char* why = NULL;
  const struct bucket* bk = find_bucket(ps, q, &need, &scale, &why);
  uint32_t n = 0;
  if (!bk) return 0;
  const struct sel_entry* s = &ps->sel[bk->start];
  for (uint32_t i = 0; i < bk->count; i++, s++) {
    const struct shunt_plan_entry* e = NULL;
    if (accepts(ps, s, q, need, false, &e, &why)) {
      if (n < max) out[n] = e;
      n++;
    }
  }
  return n;
}
