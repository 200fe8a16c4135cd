/* Hazards between the threads of one threadblock (docs/plan-format.md §5.5), decided per element
 * and thread as the executors run a block: there is no implicit barrier between ops, and a
 * data op hands its bytes out in equal pieces, round robin, to the block's threads, starting
 * at each entry's own (tbg-sliced) start. So two ops reach a byte with the same thread exactly
 * when their entries start at the same place (the same anchor) in the same layout (data, or
 * packets at twice the offset); any other pair may use two threads, whatever the call's size.
 *
 * Within a block, since its last nop or barrier, an op needs a block barrier before it when:
 * - it reads (read after write) or writes (write after write) bytes an earlier op wrote, in
 *   another thread, and no LL flag orders the two: the later op reading the packets that the
 *   earlier op wrote is safe (readers spin on each packet's flag), and so is every access that
 *   follows, in the same thread, a packet read of the packet the writer stored after the same
 *   element (a recpkt's thread stores an element's data, then its packet; an upkt or repkt
 *   thread that saw that packet's flag comes after both). Bytes that an op of the reader's
 *   own thread rewrote in between with the same values (an upkt of that very packet) are read
 *   from that thread's own write;
 * - it is a port put (put, pws, pwsf, ppkt) of bytes an earlier op wrote: the proxy, or
 *   every thread in 8-byte packets, reads them;
 * - it is a signal or sem_release published after writes of the block's other threads;
 * - it is a data op right after a wait or sem_acquire, which only some threads performed.
 * A block barrier orders all of these, so the lowering adds one (exec/lower.c) rather than
 * refusing the plan. Pipeline bodies are taken in their flat order. */
#include <stdio.h>
#include <stdlib.h>

#include "plan/check_internal.h"

/* One entry an op wrote, in chunk units of its buffer's bytes (packet regions doubled). */
struct wr {
  int space;     /* 0..2 local buffer type, 3 + remote buffer id */
  double lo, hi; /* bytes [lo, hi) of the space, in chunks */
  bool pkt;      /* a packet region */
  /* A recpkt/recspkt data entry: its thread stores each element's packet after the element,
   * in space pspace at (packet entry's lo - this lo) data chunks from it. */
  bool has_pair;
  int pspace;
  double pair;
  uint32_t op; /* sequence number in the block */
  struct oppos at;
};

/* A packet read in the window: the thread anchored at data entry `dlo` of `dspace` read the
 * packets [plo, phi) (data chunks of the packet region) of `pspace`. */
struct prd {
  int dspace, pspace;
  double dlo, dhi, plo;
  uint32_t op;
};

struct tbstate {
  struct wr* w;
  size_t n, cap;
  struct prd* pr;
  size_t npr, prcap;
  bool after_wait;
  struct oppos wait_at;
  uint32_t seq;
  shunt_plan_sync_fn fn;
  void* arg;
  unsigned found;
};

static int space_of(const struct shunt_plan_ref* r) {
  if (r->kind == SHUNT_REF_REMOTE) return r->global < 0 ? -1 : 3 + r->global;
  if (r->kind == SHUNT_REF_SWITCH && r->global < 0) return -1;
  return (int)r->type; /* a multicast store also writes the GPU's own bound buffer */
}

/* Whether entry i of an op (sources when src) is a packet region (docs/plan-format.md §7.3). */
static bool pkt_entry(const struct shunt_plan_op* o, bool src, uint32_t i) {
  switch (o->type) {
    case SHUNT_OP_CPKT:
      return !src && i == 0;
    case SHUNT_OP_UPKT:
      return src && i == 0;
    case SHUNT_OP_PPKT:
      return !src || o->channel_type == SHUNT_CHAN_PORT;
    case SHUNT_OP_RPPKT:
    case SHUNT_OP_GSTOREPKT:
      return !src || i == 0;
    case SHUNT_OP_REPKT:
      return src && i >= 1;
    case SHUNT_OP_RESPKT:
    case SHUNT_OP_RECPKT:
    case SHUNT_OP_RECSPKT:
      return i >= 1;
    default:
      return false;
  }
}

/* The data-side entry whose threads read an op's packets: upkt's destination, a packet
 * reduction's first destination; NULL for the others. */
static const struct shunt_plan_ref* pkt_reader_data(const struct shunt_plan_op* o) {
  switch (o->type) {
    case SHUNT_OP_UPKT:
    case SHUNT_OP_REPKT:
    case SHUNT_OP_RESPKT:
    case SHUNT_OP_RECPKT:
    case SHUNT_OP_RECSPKT:
      return o->ndst ? &o->dst[0] : NULL;
    default:
      return NULL;
  }
}

/* The chunks [lo, hi) of a buffer entry that an op's tbg slice covers. */
static void slice(const struct shunt_plan_op* o, const struct shunt_plan_ref* r, double* lo, double* hi) {
  double base = r->index, len = r->size;
  if (o->has_tbg && o->tbg_size > 1 && o->tbg_id < o->tbg_size) {
    *lo = base + len * o->tbg_id / o->tbg_size;
    *hi = base + len * (o->tbg_id + 1) / o->tbg_size;
  } else {
    *lo = base;
    *hi = base + len;
  }
}

static bool same(double a, double b) {
  return a - b < 1e-9 && b - a < 1e-9;
}

static bool overlaps(double alo, double ahi, double blo, double bhi) {
  return alo < bhi - 1e-9 && blo < ahi - 1e-9;
}

static void opname(const struct oppos* at, char* buf, size_t len) {
  if (at->j >= 0)
    snprintf(buf, len, "ops[%u].ops[%d]", at->i, at->j);
  else
    snprintf(buf, len, "ops[%u]", at->i);
}

static bool grow(void** v, size_t* cap, size_t n, size_t elem) {
  if (n < *cap) return true;
  size_t c = *cap ? *cap * 2 : 16;
  void* nv = realloc(*v, c * elem);
  if (!nv) return false;
  *v = nv;
  *cap = c;
  return true;
}

/* Whether the element range [lo, hi) (data layout, in `space`) that write w left is ordered
 * before a thread anchored at `anchor` by an LL flag: a packet read, at ops after w and
 * before `before` (or at `before` itself when `incl`), by the thread anchored there, of the
 * packet w's own thread stored after these elements. */
static bool flag_ordered(const struct tbstate* s, const struct wr* w, int space, double lo, double hi,
                         double anchor, uint32_t before, bool incl) {
  if (!w->has_pair || w->pkt) return false;
  for (size_t k = 0; k < s->npr; k++) {
    const struct prd* r = &s->pr[k];
    if (r->op <= w->op || r->op > before || (r->op == before && !incl)) continue;
    if (r->dspace != space || r->pspace != w->pspace || !same(r->dlo, anchor) || r->dlo > lo + 1e-9 ||
        r->dhi < hi - 1e-9)
      continue;
    /* The packet of element x is at packet chunk x + pair of w's packet entry: the reader
     * must take it from the same offset relative to its data. */
    if (same(r->plo - r->dlo, w->pair)) return true;
  }
  return false;
}

static void need(struct cctx* c, struct tbstate* s, const struct oppos* at, const char* why) {
  s->found++;
  s->n = 0;
  s->npr = 0;
  s->after_wait = false;
  if (s->fn) {
    s->fn(s->arg, at->i, at->j, why);
  } else if (c) {
    operr(c, at, "", "%s", why);
  }
}

/* Records an op's packet reads with the data entry its threads are anchored at. */
static void note_packet_reads(struct tbstate* s, const struct shunt_plan_op* o, uint32_t me) {
  const struct shunt_plan_ref* data = pkt_reader_data(o);
  if (!data || space_of(data) < 0) return;
  double dlo, dhi;
  slice(o, data, &dlo, &dhi);
  for (uint32_t i = 0; i < o->nsrc; i++) {
    if (!pkt_entry(o, true, i) || space_of(&o->src[i]) < 0) continue;
    if (!grow((void**)&s->pr, &s->prcap, s->npr, sizeof(*s->pr))) return;
    double plo, phi;
    slice(o, &o->src[i], &plo, &phi);
    s->pr[s->npr++] = (struct prd){space_of(data), space_of(&o->src[i]), dlo, dhi, plo, me};
  }
}

static void step(struct cctx* c, struct tbstate* s, const struct oppos* at, const struct shunt_plan_op* o) {
  char w[48], why[200];
  if (o->nsrc > SHUNT_PLAN_MAX_ENTRIES_PER_OP || o->ndst > SHUNT_PLAN_MAX_ENTRIES_PER_OP) return;
  uint32_t me = ++s->seq;
  switch (o->type) {
    case SHUNT_OP_NOP:
    case SHUNT_OP_BARRIER:
      s->n = 0;
      s->npr = 0;
      s->after_wait = false;
      return;
    case SHUNT_OP_WAIT:
    case SHUNT_OP_RLXWAIT:
    case SHUNT_OP_SEM_ACQUIRE:
      s->after_wait = true;
      s->wait_at = *at;
      return;
    case SHUNT_OP_PIPELINE:
    case SHUNT_OP_FLUSH:
    case SHUNT_OP_RLXSIGNAL:
      return;
    default:
      break;
  }
  bool publishes = o->type == SHUNT_OP_SIGNAL || o->type == SHUNT_OP_SEM_RELEASE || o->type == SHUNT_OP_PWS ||
                   o->type == SHUNT_OP_PWSF;
  if (publishes && s->n) {
    opname(&s->w[s->n - 1].at, w, sizeof(w));
    snprintf(why, sizeof(why),
             "%s publishes data that %s wrote in other threads, with no nop or barrier in between",
             shunt_op_name(o->type), w);
    need(c, s, at, why);
  }
  if (shunt_op_is_sync(o->type)) return;
  if (s->after_wait) {
    opname(&s->wait_at, w, sizeof(w));
    snprintf(why, sizeof(why), "%s runs right after the wait at %s, which only some threads performed",
             shunt_op_name(o->type), w);
    need(c, s, at, why);
  }
  /* A port op's sources are read by the proxy, or copied in 8-byte packets by every thread:
   * not by the threads that wrote them, and (but for rppkt, which waits for every flag and
   * syncs the block first) without looking at packet flags. */
  bool proxy = o->channel_type == SHUNT_CHAN_PORT && (o->type == SHUNT_OP_PUT || o->type == SHUNT_OP_PWS ||
                                                      o->type == SHUNT_OP_PWSF || o->type == SHUNT_OP_PPKT);
  /* Reads, then writes: an op reads all its sources before it stores an element, and its
   * own packet reads order its writes. */
  for (int pass = 0; pass < 2; pass++) {
    if (pass == 1) note_packet_reads(s, o, me);
    bool src = pass == 0;
    uint32_t n = src ? o->nsrc : o->ndst;
    for (uint32_t i = 0; i < n; i++) {
      const struct shunt_plan_ref* r = src ? &o->src[i] : &o->dst[i];
      bool pkt = pkt_entry(o, src, i);
      if (src && pkt && !proxy) continue; /* packet reads spin on each packet's flag */
      int sp = space_of(r);
      if (sp < 0) continue;
      double lo, hi;
      slice(o, r, &lo, &hi);
      double glo = pkt ? 2 * lo : lo, ghi = pkt ? 2 * hi : hi;
      for (size_t k = s->n; k-- > 0;) {
        const struct wr* x = &s->w[k];
        if (x->space != sp || !overlaps(glo, ghi, x->lo, x->hi)) continue;
        if (!(src && proxy) && x->pkt == pkt && same(x->lo, glo)) continue; /* the same thread, in order */
        double olo = glo > x->lo ? glo : x->lo, ohi = ghi < x->hi ? ghi : x->hi;
        /* A write follows its own packet reads; a read only earlier ops' ones (an upkt of that
         * packet, which also rewrote the bytes with the same values in the reader's thread). */
        if (!pkt && !(src && proxy) && flag_ordered(s, x, sp, olo, ohi, glo, me, !src)) continue;
        opname(&x->at, w, sizeof(w));
        snprintf(why, sizeof(why),
                 "%s %s chunks that %s wrote in other threads, with no nop or barrier in between",
                 shunt_op_name(o->type), src ? "reads" : "overwrites", w);
        need(c, s, at, why);
        break;
      }
    }
  }
  bool paired = (o->type == SHUNT_OP_RECPKT || o->type == SHUNT_OP_RECSPKT) && o->ndst >= 2 &&
                o->dst[1].kind == SHUNT_REF_LOCAL;
  for (uint32_t i = 0; i < o->ndst; i++) {
    int sp = space_of(&o->dst[i]);
    if (sp < 0) continue;
    if (!grow((void**)&s->w, &s->cap, s->n, sizeof(*s->w))) return;
    double lo, hi;
    slice(o, &o->dst[i], &lo, &hi);
    bool pkt = pkt_entry(o, false, i);
    struct wr e = {sp, pkt ? 2 * lo : lo, pkt ? 2 * hi : hi, pkt, false, -1, 0, me, *at};
    if (paired && i == 0) {
      double plo, phi;
      slice(o, &o->dst[1], &plo, &phi);
      e.has_pair = true;
      e.pspace = space_of(&o->dst[1]);
      e.pair = plo - lo;
    }
    s->w[s->n++] = e;
  }
}

static unsigned block_syncs(struct cctx* c, const struct shunt_plan* p, uint32_t r, uint32_t b,
                            shunt_plan_sync_fn fn, void* arg) {
  const struct shunt_plan_threadblock* tb = &p->gpus[r].threadblocks[b];
  /* Blocks beyond the encoding limits are rejected by shunt_plan_check; skipping them keeps
   * this check's cost bounded for any input. */
  if (tb->nops_flat > SHUNT_PLAN_MAX_OPS_PER_BLOCK) return 0;
  struct tbstate s = {.fn = fn, .arg = arg};
  for (uint32_t i = 0; i < tb->nops; i++) {
    struct oppos at = {r, b, i, -1};
    step(c, &s, &at, &tb->ops[i]);
    for (uint32_t j = 0; j < tb->ops[i].nops; j++) {
      struct oppos in = {r, b, i, (int32_t)j};
      step(c, &s, &in, &tb->ops[i].ops[j]);
    }
  }
  free(s.w);
  free(s.pr);
  return s.found;
}

unsigned shunt_plan_block_syncs(const struct shunt_plan* p, uint32_t r, uint32_t b, shunt_plan_sync_fn fn,
                                void* arg) {
  if (r >= p->ngpus || b >= p->gpus[r].nthreadblocks) return 0;
  return block_syncs(NULL, p, r, b, fn, arg);
}

unsigned shunt_plan_missing_barriers(const struct shunt_plan* p, struct shunt_plan_errors* notes) {
  struct cctx c = {.p = p, .errs = notes};
  unsigned n = 0;
  for (uint32_t r = 0; r < p->ngpus; r++)
    for (uint32_t b = 0; b < p->gpus[r].nthreadblocks; b++) n += block_syncs(&c, p, r, b, NULL, NULL);
  return n;
}

unsigned shunt_plan_check_races(const struct shunt_plan* p, struct shunt_plan_errors* errs) {
  struct cctx c = {.p = p, .errs = errs};
  check_cross_races(&c);
  check_step(&c);
  return c.nerr;
}
