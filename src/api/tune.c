#include "api/tune.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/gpu_gate.h"
#include "api/plans.h"
#include "exec/backend.h"
#include "plan/tune_cache.h"
#include "transport/cu.h"
#include "comm/bootstrap.h"
#include "fallback/real_nccl.h"
#include "util/env.h"
#include "util/log.h"
#include "util/status.h"

#define MAX_CAND SHUNT_TUNE_MAX_CAND

/* A bucket screens every candidate (the least of a few calls each), keeps those near the best
 * and the untuned one, samples them, and decides (docs/tuning.md, "Tuning inside the job"). */
enum bucket_state { SCREENING = 0, SAMPLING, DECIDED, UNTUNED };

const struct shunt_plan_entry shunt_tune_nccl = {.file = SHUNT_TUNE_NCCL_NAME};

static const char* cand_name(const struct shunt_plan_entry* e) {
  return e == &shunt_tune_nccl ? SHUNT_TUNE_NCCL_NAME : e->plan->name;
}

/* A device sample: events recorded on the call's stream before and after it, read once the
 * second has completed (never waited for). */
struct pend {
  CUevent a, b;
};

struct cand {
  const struct shunt_plan_entry* e; /* &shunt_tune_nccl: NCCL */
  double* t;                        /* this rank's sampled seconds */
  uint32_t n;
  struct pend* p; /* device samples not yet read */
  uint32_t np;
  bool failed;
};

struct shunt_tune_bucket {
  struct shunt_tune_key key;
  uint32_t calls; /* calls selected so far */
  uint32_t ncand, baseline;
  uint32_t untuned; /* the candidate selection picks without tuning (the baseline, or NCCL's is) */
  struct cand cand[MAX_CAND];
  uint32_t warm;         /* warm-up rounds of the screen */
  uint32_t screen_calls; /* calls of the screen: ncand x (warm + 1) */
  /* The call whose run swaps the times of the phase under way; it moves on by one while some
   * rank's device samples have not completed (every rank moves it at the same call). */
  uint32_t swap_at;
  uint32_t sampling_from;         /* the first call of the samples, after the screen's swap */
  uint32_t surv[MAX_CAND], nsurv; /* the candidates kept by the screen, in the order they are sampled */
  uint32_t fastest;               /* the screen's fastest */
  enum bucket_state state;
  const struct shunt_plan_entry* winner;
  bool measured; /* decided here by measuring (not read from the cache) */
  /* Each candidate's time as the job sees it (slowest rank, us): the screen's, then the
   * samples' median for those kept; < 0: none. Kept with the decision. */
  double us[MAX_CAND];
  const struct shunt_tune_saved* from; /* the cache's decision it took, if any */
  bool told_put_off;                   /* the log has said a swap of this bucket was put off */
  bool resampled;                      /* the winner and the baseline were sampled a second round */
};

struct shunt_tune {
  pthread_mutex_t mu;
  struct shunt_comm* c;
  struct shunt_tune_bucket** b;
  uint32_t nb, cap;
  uint32_t warmup, samples, reach;
  uint32_t slots;  /* times a candidate holds: W + 1 screen calls or two rounds of samples, and one */
  double margin;   /* a fraction: 0.05 keeps the baseline unless another is 5 % faster */
  double cut;      /* a fraction: the screen keeps candidates within 1 + cut of the fastest */
  bool broken;     /* an exchange failed: the untuned choices serve from now on */
  bool have_cache; /* path holds the cache file */
  bool dirty;      /* decisions not yet written */
  char fingerprint[256];
  char path[4200];
  struct shunt_tune_saved* saved; /* the cache's decisions, buckets seen or not */
  uint32_t nsaved;
  /* The CUDA driver, where device calls can be timed (events and their elapsed time); NULL:
   * device calls are not tuned. */
  const struct shunt_cu* cu;
};

/* What every rank must share for the schedule to be the same everywhere, and what each says of
 * its device (the fingerprint and device tuning are the communicator's, the same on every rank). */
struct settings {
  uint32_t on, warmup, samples, margin_pct, cut_pct, reach;
};
struct rank_says {
  struct settings set;
  uint32_t timing; /* this rank can time device calls (events with their elapsed time) */
  char model[64];  /* its GPU's name, or "host" */
};

/* FNV-1a over the decisions a rank read from its cache, to learn whether all read the same. */
static uint64_t saved_hash(const struct shunt_tune_saved* d, uint32_t n) {
  uint64_t h = 1469598103934665603ull ^ n;
  for (uint32_t i = 0; i < n; i++) {
    const unsigned char* k = (const unsigned char*)&d[i].key;
    for (size_t j = 0; j < sizeof(d[i].key); j++) h = (h ^ k[j]) * 1099511628211ull;
    for (const char* w = d[i].winner; *w; w++) h = (h ^ (unsigned char)*w) * 1099511628211ull;
  }
  return h;
}

static bool key_eq(const struct shunt_tune_key* a, const struct shunt_tune_key* b) {
  return a->coll == b->coll && a->inplace == b->inplace && a->need == b->need && a->scale == b->scale &&
         a->root == b->root && a->cls == b->cls && a->device == b->device;
}

static void describe(const struct shunt_tune_key* k, char* buf, size_t len) {
  enum shunt_redop need = shunt_redop_from_code(k->need);
  const char* op = shunt_redop_computed(need) ? shunt_redop_name(need) : "op";
  enum shunt_coll coll = shunt_coll_from_code(k->coll);
  bool reduces = shunt_coll_reduces(coll);
  uint64_t lo = k->cls ? 1ull << k->cls : 0;
  snprintf(buf, len, "%s%s %s%s%s sizes %llu-%llu", k->device ? "device " : "", shunt_coll_name(coll),
           k->inplace ? "in-place" : "out-of-place", reduces ? " " : "", reduces ? op : "",
           (unsigned long long)lo, (unsigned long long)((k->cls >= 63 ? ~0ull : (2ull << k->cls) - 1)));
  if (shunt_coll_rooted(coll)) {
    size_t l = strlen(buf);
    snprintf(buf + l, len - l, " root %u", k->root);
  }
}

/* FNV-1a over the decided buckets in the order they were first seen (the same on every rank). */
static uint64_t table_hash(const struct shunt_tune* t, uint32_t* decided) {
  uint64_t h = 1469598103934665603ull;
  *decided = 0;
  for (uint32_t i = 0; i < t->nb; i++) {
    const struct shunt_tune_bucket* b = t->b[i];
    if (b->state != DECIDED) continue;
    (*decided)++;
    const uint32_t* w = (const uint32_t*)&b->key;
    for (size_t j = 0; j < sizeof(b->key) / sizeof(uint32_t); j++) h = (h ^ w[j]) * 1099511628211ull;
    for (const char* s = cand_name(b->winner); *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  }
  return h;
}

void shunt_tune_init(struct shunt_comm* c) {
  c->tune = NULL;
  if (!c->plans_enabled || !c->plans) return;
  struct rank_says mine = {
      {shunt_tuning_auto_from_env() ? 1u : 0u, (uint32_t)shunt_env_int("SHUNT_TUNING_WARMUP", 2, 0, 100),
       (uint32_t)shunt_env_int("SHUNT_TUNING_SAMPLES", 4, 1, 1000),
       (uint32_t)shunt_env_int("SHUNT_TUNING_MARGIN", 5, 0, 100),
       (uint32_t)shunt_env_int("SHUNT_TUNING_CUT", 30, 0, 1000),
       (uint32_t)shunt_env_int("SHUNT_TUNING_REACH", 3, 0, 64)},
      0,
      "host"};
  const struct shunt_cu* cu = c->cuda_dev >= 0 ? shunt_cu(NULL, 0) : NULL;
  if (cu && cu->EventElapsedTime &&
      cu->DeviceGetName(mine.model, (int)sizeof(mine.model) - 1, c->cuda_dev) == CUDA_SUCCESS) {
    mine.timing = 1;
    for (char* p = mine.model; *p; p++)
      if (*p == ' ') *p = '_';
  } else {
    snprintf(mine.model, sizeof(mine.model), "host");
  }
  /* Every rank with plans (the same on every rank) swaps its settings: ranks that tuned on
   * different schedules would serve one call with different plans. */
  struct rank_says* all = calloc((size_t)c->nranks, sizeof(*all));
  char err[256];
  if (!all) return;
  all[c->rank] = mine;
  if (shunt_bootstrap_allgather(c->boot, all, sizeof(*all), err, sizeof(err)) != 0) {
    free(all);
    if (mine.set.on)
      SHUNT_WARN("rank %d: in-job tuning off: the ranks could not swap settings: %s", c->rank, err);
    return;
  }
  bool same = true, timing = true, one_model = true;
  uint64_t models = 1469598103934665603ull;
  for (int r = 0; r < c->nranks; r++) {
    same &= !memcmp(&all[r].set, &all[0].set, sizeof(mine.set));
    timing &= all[r].timing != 0;
    one_model &= !strncmp(all[r].model, all[0].model, sizeof(mine.model));
    for (size_t j = 0; j < sizeof(mine.model) && all[r].model[j]; j++)
      models = (models ^ (unsigned char)all[r].model[j]) * 1099511628211ull;
  }
  char model[80];
  if (one_model)
    snprintf(model, sizeof(model), "%.63s", all[0].model);
  else
    snprintf(model, sizeof(model), "mixed-%016llx", (unsigned long long)models);
  free(all);
  if (!same) {
    if (mine.set.on)
      SHUNT_WARN(
          "rank %d: in-job tuning off for this communicator: ranks differ in SHUNT_TUNING, "
          "SHUNT_TUNING_WARMUP, _SAMPLES, _MARGIN, _CUT or _REACH",
          c->rank);
    return;
  }
  if (!mine.set.on) return;
  struct shunt_tune* t = calloc(1, sizeof(*t));
  if (!t) return;
  pthread_mutex_init(&t->mu, NULL);
  t->c = c;
  t->warmup = mine.set.warmup;
  t->samples = mine.set.samples;
  t->slots = (2 * t->samples > t->warmup + 1 ? 2 * t->samples : t->warmup + 1) + 1;
  t->margin = mine.set.margin_pct / 100.0;
  t->cut = mine.set.cut_pct / 100.0;
  t->reach = mine.set.reach;
  /* Device calls are tuned only where every rank can time them. */
  t->cu = timing ? cu : NULL;
  const struct shunt_real_nccl* real = shunt_real_nccl();
  snprintf(t->fingerprint, sizeof(t->fingerprint), "shunt=%s nccl=%d device=%s ranks=%d rpn=%d plans=%016llx",
           SHUNT_VERSION, real ? real->version : 0, model, c->nranks, c->ranks_per_node,
           (unsigned long long)shunt_planset_hash(c->plans));
  t->have_cache = shunt_tune_cache_path(t->fingerprint, t->path, sizeof(t->path));
  if (t->have_cache) shunt_tune_cache_read(t->path, t->fingerprint, &t->saved, &t->nsaved);
  /* Every rank must start from the same decisions (a cache folder on each host's own disk, a
   * file rewritten between two ranks' reads): if any rank read others, none uses its own. */
  uint64_t* hashes = calloc((size_t)c->nranks, sizeof(*hashes));
  bool agreed = hashes != NULL;
  if (hashes) {
    hashes[c->rank] = saved_hash(t->saved, t->nsaved);
    agreed = shunt_bootstrap_allgather(c->boot, hashes, sizeof(*hashes), err, sizeof(err)) == 0;
    for (int r = 0; agreed && r < c->nranks; r++) agreed = hashes[r] == hashes[0];
    free(hashes);
  }
  if (!agreed) {
    if (c->rank == 0)
      SHUNT_WARN(
          "tuning cache %s: the ranks read different decisions (a cache folder per host?); tuning afresh",
          t->have_cache ? t->path : "(none)");
    free(t->saved);
    t->saved = NULL;
    t->nsaved = 0;
  }
  if (c->rank == 0)
    SHUNT_INFO(SHUNT_TUNE,
               "in-job tuning: candidates ranged above a size or ending at most %u size classes below it, "
               "screened by the least of %u calls each, those within %u %% of the fastest and the untuned "
               "one timed %u times more, margin %u %%; cache %s (%u decisions)",
               t->reach, t->warmup + 1, mine.set.cut_pct, t->samples, mine.set.margin_pct,
               t->have_cache ? t->path : "none", t->nsaved);
  c->tune = t;
}

static void write_cache(struct shunt_tune* t) {
  if (!t->have_cache || t->c->rank != 0 || !t->dirty) return;
  uint32_t n = 0;
  struct shunt_tune_saved* d = calloc((size_t)t->nb + 1, sizeof(*d));
  if (!d) return;
  for (uint32_t i = 0; i < t->nb; i++) {
    const struct shunt_tune_bucket* b = t->b[i];
    if (b->state != DECIDED) continue;
    if (!b->measured && b->from) {
      d[n++] = *b->from;
      continue;
    }
    d[n].key = b->key;
    snprintf(d[n].winner, sizeof(d[n].winner), "%s", cand_name(b->winner));
    for (uint32_t k = 0; k < b->ncand; k++)
      if (b->us[k] >= 0) {
        struct shunt_tune_time* x = &d[n].times[d[n].ntimes++];
        snprintf(x->name, sizeof(x->name), "%s", cand_name(b->cand[k].e));
        x->us = b->us[k];
      }
    n++;
  }
  /* Decisions of the cache this communicator never met stay in it: those read at its creation
   * and those another communicator of the job (or another job) wrote since. */
  struct shunt_tune_saved* now = NULL;
  uint32_t nnow = 0;
  shunt_tune_cache_read(t->path, t->fingerprint, &now, &nnow);
  struct shunt_tune_saved* g = realloc(d, ((size_t)t->nb + t->nsaved + nnow + 1) * sizeof(*d));
  if (g) {
    d = g;
    for (uint32_t i = 0; i < t->nsaved + nnow; i++) {
      const struct shunt_tune_saved* x = i < t->nsaved ? &t->saved[i] : &now[i - t->nsaved];
      bool seen = false;
      for (uint32_t j = 0; j < n && !seen; j++) seen = key_eq(&d[j].key, &x->key);
      if (!seen) d[n++] = *x;
    }
  }
  free(now);
  if (shunt_tune_cache_write(t->path, t->fingerprint, (uint32_t)t->c->nranks, d, n)) {
    t->dirty = false;
    SHUNT_INFO(SHUNT_TUNE, "in-job tuning: %u decisions written to %s", n, t->path);
  }
  free(d);
}

void shunt_tune_fini(struct shunt_comm* c, bool abort) {
  struct shunt_tune* t = c->tune;
  if (!t) return;
  c->tune = NULL;
  if (!abort) write_cache(t);
  for (uint32_t i = 0; i < t->nb; i++) {
    for (uint32_t k = 0; k < t->b[i]->ncand; k++) {
      struct cand* cd = &t->b[i]->cand[k];
      for (uint32_t j = 0; j < cd->np && t->cu; j++) {
        t->cu->EventDestroy(cd->p[j].a);
        t->cu->EventDestroy(cd->p[j].b);
      }
      free(cd->p);
      free(cd->t);
    }
    free(t->b[i]);
  }
  free(t->b);
  free(t->saved);
  pthread_mutex_destroy(&t->mu);
  free(t);
}

/* Whether a plan is tried for calls of size class `cls`: its effective range ends at most
 * `reach` classes below it. A plan made for larger sizes is tried at every smaller one: a look
 * at it costs at most its latency, a small and bounded part of a small call's time, and on a
 * machine its ranges were not made for such a plan is often the fastest far below its range. A
 * plan made for smaller sizes costs more the further above its range it runs (its time grows
 * with the size at its lower bandwidth): it is tried only within `reach` classes. */
static bool within_reach(const struct shunt_plan_entry* e, uint32_t cls, uint32_t reach) {
  return cls <= shunt_tune_class(e->max_bytes) + reach;
}

static bool uses_ports(const struct shunt_plan* p) {
  for (uint32_t g = 0; g < p->ngpus; g++)
    if (p->gpus[g].nchannels[SHUNT_CHAN_PORT]) return true;
  return false;
}

/* Whether candidate k is a plan over port channels (sampled after the others: new_bucket). */
static bool cand_uses_ports(const struct shunt_tune_bucket* b, uint32_t k) {
  return b->cand[k].e != &shunt_tune_nccl && uses_ports(b->cand[k].e->plan);
}

/* A new bucket: its candidates, and the cache's decision when it has one. NULL: out of memory.
 * untuned: &shunt_tune_nccl when NCCL serves the call untuned. */
static struct shunt_tune_bucket* new_bucket(struct shunt_tune* t, const struct shunt_tune_key* key,
                                            const struct shunt_select_query* q,
                                            const struct shunt_plan_entry* untuned,
                                            const struct shunt_call* call, bool nccl) {
  if (t->nb == t->cap) {
    uint32_t cap = t->cap ? 2 * t->cap : 16;
    struct shunt_tune_bucket** g = realloc(t->b, cap * sizeof(*g));
    if (!g) return NULL;
    t->b = g;
    t->cap = cap;
  }
  struct shunt_tune_bucket* b = calloc(1, sizeof(*b));
  if (!b) return NULL;
  b->key = *key;
  const struct shunt_plan_entry* list[MAX_CAND];
  uint32_t found = shunt_planset_candidates(t->c->plans, q, list, MAX_CAND), n = 0;
  if (found > MAX_CAND - 1) found = MAX_CAND - 1; /* room for NCCL */
  b->baseline = b->untuned = UINT32_MAX;
  /* The screen's order: the baseline first, since a bucket's first calls are its slowest (the
   * size is new to the world, and the ranks come in from the calls before unevenly) and the
   * baseline is sampled again whenever another screens faster; then the plans, those over port
   * channels last (their proxy threads poll a while after a call, which on a host with fewer
   * cores than threads would be charged to the candidate timed next). NCCL, where it runs
   * behind shunt, is the baseline of device calls: a plan must beat it by the margin, so that
   * shunt never makes a call slower than NCCL would. */
  if (nccl) {
    b->baseline = n;
    if (untuned == &shunt_tune_nccl) b->untuned = n;
    b->cand[n++].e = &shunt_tune_nccl;
  }
  for (int pass = 0; pass < 3; pass++) /* the untuned plan, plans without port channels, with */
    for (uint32_t i = 0; i < found; i++) {
      bool is_untuned = list[i] == untuned;
      if (pass == 0 ? !is_untuned : is_untuned || uses_ports(list[i]->plan) != (pass == 2)) continue;
      if (!is_untuned && !within_reach(list[i], key->cls, t->reach)) continue;
      /* A device call runs only plans the GPU backend can run here (shunt_gpu_gate_plan). */
      if (call->on_gpu && shunt_gpu_gate_plan(t->c, call, list[i]->plan)) continue;
      if (is_untuned) {
        b->untuned = n;
        if (!nccl) b->baseline = n;
      }
      b->cand[n++].e = list[i];
    }
  b->ncand = n;
  for (uint32_t k = 0; k < MAX_CAND; k++) b->us[k] = -1;
  b->warm = t->warmup;
  b->screen_calls = b->swap_at = n * (b->warm + 1);
  bool ok = true;
  for (uint32_t i = 0; i < n && ok; i++)
    ok = (b->cand[i].t = calloc(t->slots, sizeof(double))) != NULL &&
         (!call->on_gpu || (b->cand[i].p = calloc(t->slots, sizeof(struct pend))) != NULL);
  if (!ok || b->baseline == UINT32_MAX || b->untuned == UINT32_MAX || n < 2) {
    /* Nothing to choose from (or the untuned choice is not among the candidates): the untuned
     * choice serves, as it would without tuning. */
    b->state = UNTUNED;
  }
  for (uint32_t i = 0; i < t->nsaved && b->state == SCREENING; i++) {
    if (!key_eq(&t->saved[i].key, key)) continue;
    for (uint32_t k = 0; k < n; k++)
      if (!strcmp(cand_name(b->cand[k].e), t->saved[i].winner)) {
        b->state = DECIDED;
        b->winner = b->cand[k].e;
        b->from = &t->saved[i];
      }
    if (b->state != DECIDED && t->c->rank == 0)
      SHUNT_WARN("tuning cache %s: %s is no candidate for its bucket here; tuning it afresh", t->path,
                 t->saved[i].winner);
  }
  t->b[t->nb++] = b;
  return b;
}

const struct shunt_plan_entry* shunt_tune_pick(struct shunt_tune* t, const struct shunt_select_query* q,
                                               const struct shunt_plan_entry* untuned,
                                               const struct shunt_call* call, bool grouped,
                                               struct shunt_tune_ticket* tk) {
  memset(tk, 0, sizeof(*tk));
  tk->cand = UINT32_MAX;
  if (!untuned) untuned = &shunt_tune_nccl;
  if (!t || q->only || (call->on_gpu && !t->cu)) return untuned;
  /* NCCL is a candidate for device calls when a real one runs behind this communicator. */
  bool nccl = call->on_gpu && t->c->real && shunt_real_nccl();
  if (untuned == &shunt_tune_nccl && !nccl) return untuned;
  bool reduces = shunt_coll_reduces(q->coll);
  struct shunt_tune_key key = {shunt_coll_code(q->coll),
                               !shunt_coll_rooted(q->coll) && q->inplace,
                               reduces ? shunt_redop_code(q->op) : 0,
                               0,
                               shunt_coll_rooted(q->coll) ? q->root : 0,
                               shunt_tune_class(q->bytes),
                               call->on_gpu ? 1u : 0u};
  /* A call captured into a graph replays later, with no way to time it: it takes the bucket's
   * decision when there is one, else the untuned choice, and is no part of the schedule. */
  bool captured = call->on_gpu && shunt_gpu_stream_capturing(call->stream);
  const struct shunt_plan_entry* e = untuned;
  pthread_mutex_lock(&t->mu);
  if (t->broken) goto out;
  struct shunt_tune_bucket* b = NULL;
  for (uint32_t i = t->nb; i-- > 0 && !b;)
    if (key_eq(&t->b[i]->key, &key)) b = t->b[i];
  if (captured) {
    if (b && b->state == DECIDED) e = b->winner;
    goto out;
  }
  if (!b && !(b = new_bucket(t, &key, q, untuned, call, nccl))) goto out;
  uint32_t idx = b->calls++;
  if (b->state == DECIDED) {
    e = b->winner;
  } else if (b->state != UNTUNED) {
    tk->bucket = b;
    tk->index = idx;
    tk->grouped = grouped;
    tk->device = call->on_gpu;
    if (idx < b->screen_calls) {
      /* Each candidate's calls in a row, warm-up calls timed too (the screen takes the least):
       * the first call after another candidate's can wait for that one's tail on a peer (a
       * device call runs behind the one before on its stream, and a collective waits for its
       * slowest rank), and the least leaves that wait out. */
      tk->cand = idx / (b->warm + 1);
      tk->sample = !grouped;
      e = b->cand[tk->cand].e;
    } else {
      /* Served as the screen and the samples after it say, known at the run: the screen's
       * times are swapped at the run of call swap_at, where every rank runs it. */
      tk->resolve = true;
    }
  }
out:
  pthread_mutex_unlock(&t->mu);
  return e;
}

void shunt_tune_unfit(struct shunt_tune_ticket* tk) {
  /* Only a sampling call names a candidate other than the untuned plan; the untuned plan serves
   * it instead, so it says nothing about the candidate. */
  memset(tk, 0, sizeof(*tk));
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

/* What one rank tells the others about one candidate. */
struct report {
  double value; /* seconds: the screen's least, the samples' median; < 0: no sample */
  double z;     /* at the samples' swap: how surely its samples are faster than the baseline's (pairs) */
  double won;   /* the share of (its sample, the baseline's sample) pairs where its is faster */
  uint32_t failed;
  uint32_t ready; /* 0: a device sample has not completed on this rank yet */
};

/* Reads the device samples whose second event has completed (no wait); whether none is left. */
static bool harvest(struct shunt_tune* t, struct cand* cd) {
  if (!cd->np) return true;
  struct shunt_cu_guard g = shunt_cu_enter(t->cu, NULL, 1); /* relaxed: another thread may capture */
  uint32_t keep = 0;
  for (uint32_t j = 0; j < cd->np; j++) {
    struct pend* p = &cd->p[j];
    CUresult q = t->cu->EventQuery(p->b);
    float ms = 0;
    if (q == CUDA_ERROR_NOT_READY) {
      cd->p[keep++] = *p;
      continue;
    }
    if (q == CUDA_SUCCESS && t->cu->EventElapsedTime(&ms, p->a, p->b) == CUDA_SUCCESS && cd->n < t->slots)
      cd->t[cd->n++] = ms * 1e-3;
    t->cu->EventDestroy(p->a);
    t->cu->EventDestroy(p->b);
  }
  cd->np = keep;
  shunt_cu_leave(&g);
  return keep == 0;
}

/* Seconds, the least (screen) or the median (samples) of this rank's samples; -1.0 when there
 * is none (a value, not a failure). The screen takes the least: with more ranks than cores a
 * call is often slowed by ranks waiting for a core, never sped up, and a candidate's first calls
 * at a size carry its lowering and the others' tail. */
static double value_of(struct cand* cd, bool least) {
  if (!cd->n) return -1.0;
  qsort(cd->t, cd->n, sizeof(double), cmp_double);
  if (least) return cd->t[0];
  return cd->n % 2 ? cd->t[cd->n / 2] : (cd->t[cd->n / 2 - 1] + cd->t[cd->n / 2]) / 2;
}

/* How surely candidate x's samples on this rank are faster than the baseline's y: of every pair
 * of one sample of each, the share where x's is faster (a tie counts half), as the standard score
 * of the Mann-Whitney count (0 when as many pairs go either way, 1.645 where 5 % of pairs of
 * samples from one and the same distribution reach it). */
static double pairs_won(const struct cand* x, const struct cand* y, double* share) {
  *share = 0;
  if (!x->n || !y->n) return 0;
  double u = 0, n = x->n, m = y->n;
  for (uint32_t i = 0; i < x->n; i++)
    for (uint32_t j = 0; j < y->n; j++) u += x->t[i] < y->t[j] ? 1.0 : x->t[i] == y->t[j] ? 0.5 : 0.0;
  *share = u / (n * m);
  return (u - n * m / 2) / sqrt(n * m * (n + m + 1) / 12);
}

/* Every rank: swaps the figures of the candidates in `which` (nwhich of them: each rank's least
 * at the screen, its median at the samples' swap) and computes, the same on every rank, each
 * one's slowest rank's figure (the time the job sees), the fastest rank's in `least` unless it is
 * NULL, with `base` (a position in `which`, or UINT32_MAX) each one's pairs_won against it in `z`
 * and its share of pairs in `won`, both on the rank where the baseline's median is slowest (the
 * rank whose time is the job's for it), and whether it is usable (times on every rank, no failure
 * anywhere; one WARN per failed candidate). SHUNT_OK; 1 when some rank's device samples have not
 * all completed (every rank then tries again at the bucket's next call); the exchange's SHUNT_E_*
 * code once tuning is broken (the bucket left untuned). With t->mu held. */
static int swap_times(struct shunt_tune* t, struct shunt_tune_bucket* b, const uint32_t* which, uint32_t n,
                      const char* what, double* slowest, double* least, uint32_t base, double* z, double* won,
                      bool* usable) {
  struct shunt_comm* c = t->c;
  bool screening = b->state == SCREENING;
  uint32_t nr = (uint32_t)c->nranks;
  struct report* all = calloc((size_t)n * nr, sizeof(*all));
  char err[256] = "out of memory";
  int rc = SHUNT_E_NOMEM;
  if (all) {
    for (uint32_t i = 0; i < n; i++) {
      struct cand* cd = &b->cand[which[i]];
      struct report* r = &all[(size_t)c->rank * n + i];
      r->ready = harvest(t, cd);
      r->failed = cd->failed;
      r->value = value_of(cd, screening);
      r->z = base < n ? pairs_won(cd, &b->cand[which[base]], &r->won) : 0;
    }
    rc = shunt_bootstrap_allgather(c->boot, all, n * sizeof(*all), err, sizeof(err));
  }
  if (rc != 0) {
    free(all);
    t->broken = true;
    b->state = UNTUNED;
    SHUNT_WARN(
        "rank %d: in-job tuning ended for this communicator (%s: the ranks could not swap timings: %s); "
        "the untuned plans serve",
        c->rank, what, err);
    return rc < 0 ? rc : SHUNT_E_INVALID;
  }
  bool ready = true;
  for (size_t i = 0; i < (size_t)n * nr; i++) ready &= all[i].ready != 0;
  if (!ready) {
    free(all);
    return 1;
  }
  for (uint32_t i = 0; i < n; i++) {
    slowest[i] = 0;
    if (least) least[i] = -1;
    if (z) z[i] = 0, won[i] = 0;
    usable[i] = true;
    bool failed = false;
    for (uint32_t r = 0; r < nr; r++) {
      const struct report* x = &all[(size_t)r * n + i];
      failed |= x->failed != 0;
      if (x->value < 0) usable[i] = false;
      if (x->value > slowest[i]) slowest[i] = x->value;
      if (least && (least[i] < 0 || x->value < least[i])) least[i] = x->value;
    }
    if (failed) {
      usable[i] = false;
      b->cand[which[i]].failed = true; /* on every rank: out of every later phase */
      if (c->rank == 0)
        SHUNT_WARN("in-job tuning: %s failed on some rank during tuning (%s); it is out on every rank",
                   cand_name(b->cand[which[i]].e), what);
    }
  }
  if (z && base < n) {
    uint32_t slow = 0;
    for (uint32_t r = 1; r < nr; r++)
      if (all[(size_t)r * n + base].value > all[(size_t)slow * n + base].value) slow = r;
    for (uint32_t i = 0; i < n; i++)
      z[i] = all[(size_t)slow * n + i].z, won[i] = all[(size_t)slow * n + i].won;
  }
  free(all);
  return 0;
}

/* "name 12.3 us, name out, ..." for the log ("name 12.3/10.1 us" with the fastest rank's figure). */
static void list_times(const struct shunt_tune_bucket* b, const uint32_t* which, uint32_t n,
                       const double* slowest, const double* least, const bool* usable, char* out,
                       size_t len) {
  size_t l = 0;
  out[0] = '\0';
  for (uint32_t i = 0; i < n && l < len; i++) {
    const char* name = cand_name(b->cand[which[i]].e);
    if (usable[i] && least)
      l += (size_t)snprintf(out + l, len - l, "%s%s %.1f/%.1f us", i ? ", " : "", name, slowest[i] * 1e6,
                            least[i] * 1e6);
    else if (usable[i])
      l += (size_t)snprintf(out + l, len - l, "%s%s %.1f us", i ? ", " : "", name, slowest[i] * 1e6);
    else
      l += (size_t)snprintf(out + l, len - l, "%s%s out", i ? ", " : "", name);
  }
}

static void decided(struct shunt_tune* t, struct shunt_tune_bucket* b, uint32_t win) {
  b->state = DECIDED;
  b->winner = b->cand[win].e;
  b->measured = true;
  t->dirty = true;
  uint32_t n;
  uint64_t h = table_hash(t, &n);
  SHUNT_INFO(SHUNT_TUNE, "rank %d: decision table %016llx (%u buckets decided)", t->c->rank,
             (unsigned long long)h, n);
  bool all_done = true;
  for (uint32_t i = 0; i < t->nb; i++) all_done &= t->b[i]->state == DECIDED || t->b[i]->state == UNTUNED;
  if (all_done) write_cache(t);
}

/* Whether kept candidate x is sampled before y: plans over port channels last, then the faster. */
static bool sampled_before(const struct shunt_tune_bucket* b, uint32_t x, uint32_t y, const double* slowest) {
  bool px = cand_uses_ports(b, x), py = cand_uses_ports(b, y);
  return px != py ? py : slowest[x] < slowest[y];
}

/* Some rank's device samples have not completed at a swap: every rank tries it at the bucket's
 * next call, which `serving` serves meanwhile. With t->mu held. */
static void put_off(struct shunt_tune* t, struct shunt_tune_bucket* b, const char* what,
                    const char* serving) {
  if (t->c->rank == 0 && !b->told_put_off)
    SHUNT_INFO(SHUNT_TUNE,
               "%s on %d ranks: a sample still runs on some rank at call %u; the swap is put off to the "
               "bucket's next call, %s serving until then",
               what, t->c->nranks, b->swap_at, serving);
  b->told_put_off = true;
  b->swap_at++;
}

/* The screen's times swapped: the candidates within 1 + cut of the fastest go on to be sampled,
 * with the baseline when another was faster; the baseline alone is the winner. With t->mu held.
 *
 * "Within" on either of two figures, each rank's least taken over the slowest rank or over the
 * fastest one. The screen only sorts out: a figure too low costs a candidate's samples, one too
 * high drops it for good. The slowest rank's is the time the job sees, but in calls back to back
 * the ranks that left a call early wait in the next for the others' tail, and after a
 * candidate's first call (it lowers the program on every rank) that tail can be several times the
 * call: the rank that came last to a call did not wait to start it, so the fastest rank's figure
 * is the call's own. The samples then decide on the slowest rank's. */
static void screen(struct shunt_tune* t, struct shunt_tune_bucket* b) {
  uint32_t all[MAX_CAND] = {0}, n = b->ncand;
  double slowest[MAX_CAND], least[MAX_CAND];
  bool usable[MAX_CAND];
  char what[160];
  describe(&b->key, what, sizeof(what));
  for (uint32_t k = 0; k < n; k++) all[k] = k;
  int rc = swap_times(t, b, all, n, what, slowest, least, UINT32_MAX, NULL, NULL, usable);
  if (rc > 0) put_off(t, b, what, "the untuned choice"); /* the next call tries */
  if (rc != 0) return;
  uint32_t best = UINT32_MAX, best_least = UINT32_MAX;
  for (uint32_t k = 0; k < n; k++) {
    if (usable[k] && (best == UINT32_MAX || slowest[k] < slowest[best])) best = k;
    if (usable[k] && (best_least == UINT32_MAX || least[k] < least[best_least])) best_least = k;
  }
  b->nsurv = 0;
  for (uint32_t k = 0; k < n; k++) b->us[k] = usable[k] ? slowest[k] * 1e6 : -1;
  if (best != UINT32_MAX) {
    /* Fastest first, the order every rank computes alike. The baseline stays whenever another
     * screened faster: a few calls each are too few to leave the untuned choice on (a call that
     * waited for a core can take several times its usual time), so the samples must confirm. */
    for (uint32_t k = 0; k < n; k++)
      if (usable[k] && (slowest[k] <= slowest[best] * (1 + t->cut) ||
                        least[k] <= least[best_least] * (1 + t->cut) || k == b->baseline))
        b->surv[b->nsurv++] = k;
    /* Sampled fastest first, but plans over port channels after the others (new_bucket). */
    b->fastest = best;
    for (uint32_t i = 1; i < b->nsurv; i++)
      for (uint32_t j = i; j > 0 && sampled_before(b, b->surv[j], b->surv[j - 1], slowest); j--) {
        uint32_t x = b->surv[j];
        b->surv[j] = b->surv[j - 1];
        b->surv[j - 1] = x;
      }
  }
  if (t->c->rank == 0 && shunt_log_enabled(SHUNT_LOG_INFO, SHUNT_TUNE)) {
    char times[1024];
    list_times(b, all, n, slowest, least, usable, times, sizeof(times));
    uint32_t w = b->nsurv ? b->fastest : b->baseline;
    const char* wname = cand_name(b->cand[w].e);
    if (b->nsurv >= 2)
      SHUNT_INFO(SHUNT_TUNE, "%s on %d ranks: screen %s (slowest/fastest rank); %u kept", what, t->c->nranks,
                 times, b->nsurv);
    else
      SHUNT_INFO(SHUNT_TUNE,
                 "%s on %d ranks: screen %s (slowest/fastest rank); winner %s%s, none other within %.0f %%",
                 what, t->c->nranks, times, wname, w == b->baseline ? " (untuned)" : "", t->cut * 100);
  }
  for (uint32_t k = 0; k < n; k++) b->cand[k].n = 0;
  if (b->nsurv >= 2) {
    b->state = SAMPLING;
    b->sampling_from = b->swap_at + 1;
    b->swap_at = b->sampling_from + b->nsurv * t->samples;
    return;
  }
  /* One candidate left (or none with times everywhere: the untuned plan). */
  decided(t, b, b->nsurv ? b->fastest : b->baseline);
}

/* The survivors' samples swapped: the fastest wins, but the untuned plan stays unless another is
 * faster by more than the margin and by more than the samples' spread: on the rank where the
 * untuned plan's median is slowest, its samples must be faster than the untuned plan's in enough
 * of their pairs that two plans equally fast would get there in only 5 % of buckets (pairs_won
 * 1.645 or more: with 4 samples each, 14 of the 16 pairs), where the margin alone lets the other
 * one win about 40 % of them when one call's time moves by 30 %. Where the samples do not tell the
 * two apart, the winner and the untuned plan are sampled S more times each, once, and decided on
 * all of them; then the untuned plan is what a job without tuning would have had. With t->mu
 * held. */
static void decide(struct shunt_tune* t, struct shunt_tune_bucket* b) {
  uint32_t n = b->nsurv;
  double slowest[MAX_CAND], z[MAX_CAND], won[MAX_CAND];
  bool usable[MAX_CAND];
  char what[160];
  describe(&b->key, what, sizeof(what));
  uint32_t best = UINT32_MAX, base = UINT32_MAX;
  for (uint32_t i = 0; i < n; i++)
    if (b->surv[i] == b->baseline) base = i;
  int rc = swap_times(t, b, b->surv, n, what, slowest, NULL, base, z, won, usable);
  if (rc > 0) put_off(t, b, what, "the screen's fastest");
  if (rc != 0) return;
  for (uint32_t i = 0; i < n; i++) {
    if (usable[i]) b->us[b->surv[i]] = slowest[i] * 1e6;
    if (usable[i] && (best == UINT32_MAX || slowest[i] < slowest[best])) best = i;
  }
  uint32_t win = best;
  bool spread = false; /* the baseline kept by the spread alone */
  if (best == UINT32_MAX) {
    win = base; /* no survivor has times on every rank */
  } else if (base != UINT32_MAX && usable[base] && best != base) {
    if (!(slowest[best] < slowest[base] * (1 - t->margin)))
      win = base;
    else if (!(z[best] >= 1.645))
      win = base, spread = true;
  }
  if (spread && !b->resampled) {
    /* The medians say the winner is faster by more than the margin, the samples overlap: one more
     * round of S samples for the two (each keeping its first), then the same rule decides. A
     * plan over port channels is sampled last, as before. */
    uint32_t x = b->surv[best], y = b->surv[base];
    bool xp = cand_uses_ports(b, x), yp = cand_uses_ports(b, y);
    if (t->c->rank == 0)
      SHUNT_INFO(
          SHUNT_TUNE,
          "%s on %d ranks: %s %.2fx faster than the untuned %s on the median, but their samples overlap "
          "(faster in %.0f %% of their pairs): %u more samples each",
          what, t->c->nranks, cand_name(b->cand[x].e), slowest[base] / slowest[best], cand_name(b->cand[y].e),
          won[best] * 100, t->samples);
    b->resampled = true;
    b->nsurv = 2;
    b->surv[0] = xp && !yp ? y : x;
    b->surv[1] = xp && !yp ? x : y;
    b->sampling_from = b->swap_at + 1;
    b->swap_at = b->sampling_from + 2 * t->samples;
    return;
  }
  uint32_t w = win == UINT32_MAX ? b->baseline : b->surv[win];
  if (t->c->rank == 0 && shunt_log_enabled(SHUNT_LOG_INFO, SHUNT_TUNE)) {
    char times[1024];
    list_times(b, b->surv, n, slowest, NULL, usable, times, sizeof(times));
    double gain = win != UINT32_MAX && base != UINT32_MAX && usable[base] && slowest[win] > 0
                      ? slowest[base] / slowest[win]
                      : 0;
    if (spread)
      SHUNT_INFO(SHUNT_TUNE,
                 "%s on %d ranks: %s (slowest rank's median); winner %s (untuned): %s was %.2fx faster but "
                 "its samples overlap (faster in %.0f %% of their pairs)",
                 what, t->c->nranks, times, cand_name(b->cand[w].e), cand_name(b->cand[b->surv[best]].e),
                 slowest[base] / slowest[best], won[best] * 100);
    else if (gain > 0)
      SHUNT_INFO(SHUNT_TUNE, "%s on %d ranks: %s (slowest rank's median); winner %s%s, %.2fx the untuned %s",
                 what, t->c->nranks, times, cand_name(b->cand[w].e), w == b->baseline ? " (untuned)" : "",
                 gain, cand_name(b->cand[b->baseline].e));
    else
      SHUNT_INFO(SHUNT_TUNE,
                 "%s on %d ranks: %s (slowest rank's median); winner %s, the untuned %s left at the screen",
                 what, t->c->nranks, times, cand_name(b->cand[w].e), cand_name(b->cand[b->baseline].e));
  }
  decided(t, b, w);
}

const struct shunt_plan_entry* shunt_tune_resolve(struct shunt_comm* c, struct shunt_tune_ticket* tk,
                                                  const struct shunt_plan_entry* planned) {
  struct shunt_tune* t = c->tune;
  if (!t || !tk->bucket || !tk->resolve) return planned;
  pthread_mutex_lock(&t->mu);
  struct shunt_tune_bucket* b = tk->bucket;
  const struct shunt_plan_entry* e = planned;
  /* Runs come in call order on every rank: the call that swaps a phase's times finds the bucket
   * in that phase on every rank, and a swap put off moves swap_at alike everywhere. Calls
   * between the screen's timed calls and its swap are served by the untuned choice, those
   * between the samples and their swap by the screen's fastest. */
  if (!t->broken && b->state == SCREENING) {
    if (tk->index == b->swap_at) screen(t, b);
    if (b->state == SCREENING) e = b->cand[b->untuned].e;
  }
  if (!t->broken && b->state == SAMPLING) {
    uint32_t S = t->samples;
    if (tk->index < b->sampling_from) {
      e = b->cand[b->fastest].e; /* the call that swapped the screen's times: its fastest */
    } else if (tk->index - b->sampling_from < b->nsurv * S) {
      tk->cand = b->surv[(tk->index - b->sampling_from) / S]; /* each one's samples in a row */
      tk->sample = !tk->grouped;
      e = b->cand[tk->cand].e;
    } else {
      if (tk->index == b->swap_at) decide(t, b);
      /* The swap put off (samples still running somewhere): the screen's fastest serves, the
       * best guess so far, and lighter on a stream still busy with the samples. */
      if (b->state == SAMPLING) e = b->cand[b->fastest].e;
    }
  }
  if (b->state == DECIDED) e = b->winner;
  if (b->state == UNTUNED && !t->broken) e = planned;
  pthread_mutex_unlock(&t->mu);
  return e;
}

void shunt_tune_start(struct shunt_tune* t, struct shunt_tune_ticket* tk, void* stream) {
  if (!t || !tk->bucket || !tk->sample || !tk->device) return;
  /* A device sample: an event on the call's stream before it and one after (in record). */
  tk->sample = false;
  if (!t->cu || t->cu->EventCreate(&tk->ev[0], 0) != CUDA_SUCCESS) return;
  if (t->cu->EventCreate(&tk->ev[1], 0) != CUDA_SUCCESS) {
    t->cu->EventDestroy(tk->ev[0]);
    return;
  }
  if (t->cu->EventRecord(tk->ev[0], (CUstream)stream) != CUDA_SUCCESS) {
    t->cu->EventDestroy(tk->ev[0]);
    t->cu->EventDestroy(tk->ev[1]);
    return;
  }
  tk->stream = stream;
  tk->sample = true;
}

void shunt_tune_record(struct shunt_tune* t, struct shunt_tune_ticket* tk, double seconds, bool ok) {
  if (!t || !tk->bucket || tk->cand == UINT32_MAX) return;
  bool pend = false;
  if (tk->device && tk->sample) {
    /* The second event; the pair is read when its time is swapped, once it has completed. */
    pend = ok && t->cu->EventRecord(tk->ev[1], (CUstream)tk->stream) == CUDA_SUCCESS;
    if (!pend) {
      t->cu->EventDestroy(tk->ev[0]);
      t->cu->EventDestroy(tk->ev[1]);
    }
  }
  pthread_mutex_lock(&t->mu);
  struct shunt_tune_bucket* b = tk->bucket;
  struct cand* cd = &b->cand[tk->cand];
  if (!ok) cd->failed = true;
  bool timing = b->state == SCREENING || b->state == SAMPLING;
  if (pend && timing && cd->p && cd->n + cd->np < t->slots) {
    cd->p[cd->np++] = (struct pend){tk->ev[0], tk->ev[1]};
    pend = false;
  } else if (!tk->device && ok && tk->sample && timing && cd->n < t->slots && isfinite(seconds)) {
    cd->t[cd->n++] = seconds;
  }
  pthread_mutex_unlock(&t->mu);
  if (pend) {
    t->cu->EventDestroy(tk->ev[0]);
    t->cu->EventDestroy(tk->ev[1]);
  }
}
