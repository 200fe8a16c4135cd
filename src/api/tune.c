#include "api/tune.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/plans.h"
#include "plan/tune_cache.h"
#include "comm/bootstrap.h"
#include "fallback/real_nccl.h"
#include "util/env.h"
#include "util/log.h"

/* Candidates per bucket: the shipped folders offer at most four plans for one call. */
#define MAX_CAND 8

enum bucket_state { SAMPLING = 0, DECIDED, UNTUNED };

struct cand {
  const struct shunt_plan_entry* e;
  double* t; /* this rank's sampled seconds */
  uint32_t n;
  bool failed;
};

struct shunt_tune_bucket {
  struct shunt_tune_key key;
  uint32_t calls; /* calls selected so far */
  uint32_t ncand, baseline;
  struct cand cand[MAX_CAND];
  enum bucket_state state;
  const struct shunt_plan_entry* winner;
  bool measured; /* decided here by measuring (not read from the cache) */
};

struct shunt_tune {
  pthread_mutex_t mu;
  struct shunt_comm* c;
  struct shunt_tune_bucket** b;
  uint32_t nb, cap;
  uint32_t warmup, samples;
  double margin;   /* a fraction: 0.05 keeps the baseline unless another is 5 % faster */
  bool broken;     /* an exchange failed: the untuned choices serve from now on */
  bool have_cache; /* path holds the cache file */
  bool dirty;      /* decisions not yet written */
  char fingerprint[256];
  char path[4200];
  struct shunt_tune_saved* saved; /* the cache's decisions, buckets seen or not */
  uint32_t nsaved;
};

/* What every rank must share for the schedule to be the same everywhere. */
struct settings {
  uint32_t on, warmup, samples, margin_pct;
};

static bool key_eq(const struct shunt_tune_key* a, const struct shunt_tune_key* b) {
  return a->coll == b->coll && a->inplace == b->inplace && a->need == b->need && a->scale == b->scale &&
         a->root == b->root && a->cls == b->cls;
}

static void describe(const struct shunt_tune_key* k, char* buf, size_t len) {
  enum shunt_redop need = shunt_redop_from_code(k->need);
  const char* op = shunt_redop_computed(need) ? shunt_redop_name(need) : "op";
  enum shunt_coll coll = shunt_coll_from_code(k->coll);
  bool reduces = shunt_coll_reduces(coll);
  uint64_t lo = k->cls ? 1ull << k->cls : 0;
  snprintf(buf, len, "%s %s%s%s sizes %llu-%llu", shunt_coll_name(coll),
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
    for (const char* s = b->winner->plan->name; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  }
  return h;
}

void shunt_tune_init(struct shunt_comm* c) {
  c->tune = NULL;
  if (!c->plans_enabled || !c->plans) return;
  struct settings mine = {shunt_tuning_auto_from_env() ? 1u : 0u,
                          (uint32_t)shunt_env_int("SHUNT_TUNING_WARMUP", 1, 0, 100),
                          (uint32_t)shunt_env_int("SHUNT_TUNING_SAMPLES", 5, 1, 1000),
                          (uint32_t)shunt_env_int("SHUNT_TUNING_MARGIN", 5, 0, 100)};
  /* Every rank with plans (the same on every rank) swaps its settings: ranks that tuned on
   * different schedules would serve one call with different plans. */
  struct settings* all = calloc((size_t)c->nranks, sizeof(*all));
  char err[256];
  if (!all) return;
  all[c->rank] = mine;
  if (shunt_bootstrap_allgather(c->boot, all, sizeof(*all), err, sizeof(err)) != 0) {
    free(all);
    if (mine.on)
      SHUNT_WARN("rank %d: in-job tuning off: the ranks could not swap settings: %s", c->rank, err);
    return;
  }
  bool same = true;
  for (int r = 0; r < c->nranks; r++) same &= !memcmp(&all[r], &all[0], sizeof(mine));
  free(all);
  if (!same) {
    if (mine.on)
      SHUNT_WARN(
          "rank %d: in-job tuning off for this communicator: ranks differ in SHUNT_TUNING, "
          "SHUNT_TUNING_WARMUP, SHUNT_TUNING_SAMPLES or SHUNT_TUNING_MARGIN",
          c->rank);
    return;
  }
  if (!mine.on) return;
  struct shunt_tune* t = calloc(1, sizeof(*t));
  if (!t) return;
  pthread_mutex_init(&t->mu, NULL);
  t->c = c;
  t->warmup = mine.warmup;
  t->samples = mine.samples;
  t->margin = mine.margin_pct / 100.0;
  const struct shunt_real_nccl* real = shunt_real_nccl();
  snprintf(t->fingerprint, sizeof(t->fingerprint),
           "shunt=%s nccl=%d device=host ranks=%d rpn=%d plans=%016llx", SHUNT_VERSION,
           real ? real->version : 0, c->nranks, c->ranks_per_node,
           (unsigned long long)shunt_planset_hash(c->plans));
  t->have_cache = shunt_tune_cache_path(t->fingerprint, t->path, sizeof(t->path));
  if (t->have_cache) shunt_tune_cache_read(t->path, t->fingerprint, &t->saved, &t->nsaved);
  if (c->rank == 0)
    SHUNT_INFO(
        SHUNT_TUNE,
        "in-job tuning: %u warm-up and %u timed calls per candidate, margin %u %%; cache %s (%u decisions)",
        t->warmup, t->samples, mine.margin_pct, t->have_cache ? t->path : "none", t->nsaved);
  c->tune = t;
}

static void write_cache(struct shunt_tune* t) {
  if (!t->have_cache || t->c->rank != 0 || !t->dirty) return;
  uint32_t n = 0;
  struct shunt_tune_saved* d = calloc((size_t)t->nb + 1, sizeof(*d));
  if (!d) return;
  for (uint32_t i = 0; i < t->nb; i++)
    if (t->b[i]->state == DECIDED) {
      d[n].key = t->b[i]->key;
      snprintf(d[n].winner, sizeof(d[n].winner), "%s", t->b[i]->winner->plan->name);
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
    for (uint32_t k = 0; k < t->b[i]->ncand; k++) free(t->b[i]->cand[k].t);
    free(t->b[i]);
  }
  free(t->b);
  free(t->saved);
  pthread_mutex_destroy(&t->mu);
  free(t);
}

/* A new bucket: its candidates, and the cache's decision when it has one. NULL: out of memory. */
static struct shunt_tune_bucket* new_bucket(struct shunt_tune* t, const struct shunt_tune_key* key,
                                            const struct shunt_select_query* q,
                                            const struct shunt_plan_entry* untuned) {
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
  uint32_t n = shunt_planset_candidates(t->c->plans, q, list, MAX_CAND);
  if (n > MAX_CAND) n = MAX_CAND;
  b->baseline = UINT32_MAX;
  for (uint32_t i = 0; i < n; i++) {
    b->cand[i].e = list[i];
    if (list[i] == untuned) b->baseline = i;
  }
  b->ncand = n;
  bool ok = true;
  for (uint32_t i = 0; i < n && ok; i++) ok = (b->cand[i].t = calloc(t->samples, sizeof(double))) != NULL;
  if (!ok || b->baseline == UINT32_MAX || n < 2) {
    /* Nothing to choose from (or the untuned plan is not among the candidates): the untuned
     * choice serves, as it would without tuning. */
    b->state = UNTUNED;
  }
  for (uint32_t i = 0; i < t->nsaved && b->state == SAMPLING; i++) {
    if (!key_eq(&t->saved[i].key, key)) continue;
    for (uint32_t k = 0; k < n; k++)
      if (!strcmp(b->cand[k].e->plan->name, t->saved[i].winner)) {
        b->state = DECIDED;
        b->winner = b->cand[k].e;
      }
    if (b->state != DECIDED && t->c->rank == 0)
      SHUNT_WARN("tuning cache %s: plan %s is no candidate for its bucket here; tuning it afresh", t->path,
                 t->saved[i].winner);
  }
  t->b[t->nb++] = b;
  return b;
}

const struct shunt_plan_entry* shunt_tune_pick(struct shunt_tune* t, const struct shunt_select_query* q,
                                               const struct shunt_plan_entry* untuned, bool grouped,
                                               struct shunt_tune_ticket* tk) {
  memset(tk, 0, sizeof(*tk));
  if (!t || q->only) return untuned;
  bool reduces = shunt_coll_reduces(q->coll);
  struct shunt_tune_key key = {shunt_coll_code(q->coll),
                               !shunt_coll_rooted(q->coll) && q->inplace,
                               reduces ? shunt_redop_code(q->op) : 0,
                               0,
                               shunt_coll_rooted(q->coll) ? q->root : 0,
                               shunt_tune_class(q->bytes)};
  const struct shunt_plan_entry* e = untuned;
  pthread_mutex_lock(&t->mu);
  if (t->broken) goto out;
  struct shunt_tune_bucket* b = NULL;
  for (uint32_t i = t->nb; i-- > 0 && !b;)
    if (key_eq(&t->b[i]->key, &key)) b = t->b[i];
  if (!b && !(b = new_bucket(t, &key, q, untuned))) goto out;
  uint32_t idx = b->calls++;
  if (b->state == DECIDED) {
    e = b->winner;
  } else if (b->state == SAMPLING) {
    uint32_t total = b->ncand * (t->warmup + t->samples);
    tk->bucket = b;
    tk->index = idx;
    if (idx < total) {
      tk->cand = idx % b->ncand;
      tk->sample = !grouped && idx / b->ncand >= t->warmup;
      e = b->cand[tk->cand].e;
    } else {
      /* Decided at the run of call `total`, where every rank swaps its medians. */
      tk->resolve = true;
      tk->agree = idx == total;
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
  double median; /* seconds; < 0: no sample */
  uint32_t failed, pad;
};

/* Every rank: swap medians, take the same winner. With t->mu held. */
static void decide(struct shunt_tune* t, struct shunt_tune_bucket* b) {
  struct shunt_comm* c = t->c;
  uint32_t n = b->ncand, nr = (uint32_t)c->nranks;
  struct report* all = calloc((size_t)n * nr, sizeof(*all));
  char err[256] = "out of memory";
  int rc = -1;
  if (all) {
    for (uint32_t k = 0; k < n; k++) {
      struct cand* cd = &b->cand[k];
      struct report* r = &all[(size_t)c->rank * n + k];
      r->failed = cd->failed;
      r->median = -1;
      if (cd->n) {
        qsort(cd->t, cd->n, sizeof(double), cmp_double);
        r->median = cd->n % 2 ? cd->t[cd->n / 2] : (cd->t[cd->n / 2 - 1] + cd->t[cd->n / 2]) / 2;
      }
    }
    rc = shunt_bootstrap_allgather(c->boot, all, n * sizeof(*all), err, sizeof(err));
  }
  char what[160];
  describe(&b->key, what, sizeof(what));
  if (rc != 0) {
    free(all);
    t->broken = true;
    b->state = UNTUNED;
    SHUNT_WARN(
        "rank %d: in-job tuning ended for this communicator (%s: the ranks could not swap timings: %s); "
        "the untuned plans serve",
        c->rank, what, err);
    return;
  }
  double slowest[MAX_CAND];
  bool usable[MAX_CAND];
  for (uint32_t k = 0; k < n; k++) {
    slowest[k] = 0;
    usable[k] = true;
    bool failed = false;
    for (uint32_t r = 0; r < nr; r++) {
      const struct report* x = &all[(size_t)r * n + k];
      failed |= x->failed != 0;
      if (x->median < 0) usable[k] = false;
      if (x->median > slowest[k]) slowest[k] = x->median;
    }
    if (failed) {
      usable[k] = false;
      if (c->rank == 0)
        SHUNT_WARN("in-job tuning: plan %s failed on some rank during tuning (%s); it is out on every rank",
                   b->cand[k].e->plan->name, what);
    }
  }
  free(all);
  uint32_t best = b->baseline;
  for (uint32_t k = 0; k < n; k++)
    if (usable[k] && (!usable[best] || slowest[k] < slowest[best])) best = k;
  /* The baseline stays unless another is faster by more than the margin (timing noise). */
  uint32_t win = best;
  if (usable[b->baseline] && best != b->baseline && !(slowest[best] < slowest[b->baseline] * (1 - t->margin)))
    win = b->baseline;
  if (!usable[win]) win = b->baseline; /* no candidate has times on every rank */
  b->state = DECIDED;
  b->winner = b->cand[win].e;
  b->measured = true;
  t->dirty = true;
  if (c->rank == 0 && shunt_log_enabled(SHUNT_LOG_INFO, SHUNT_TUNE)) {
    char times[1024];
    size_t l = 0;
    times[0] = '\0';
    for (uint32_t k = 0; k < n && l < sizeof(times); k++) {
      if (usable[k])
        l += (size_t)snprintf(times + l, sizeof(times) - l, "%s%s %.1f us", k ? ", " : "",
                              b->cand[k].e->plan->name, slowest[k] * 1e6);
      else
        l += (size_t)snprintf(times + l, sizeof(times) - l, "%s%s out", k ? ", " : "",
                              b->cand[k].e->plan->name);
    }
    double gain = usable[b->baseline] && slowest[win] > 0 ? slowest[b->baseline] / slowest[win] : 0;
    SHUNT_INFO(SHUNT_TUNE, "%s on %d ranks: %s (slowest rank's median); winner %s%s, %.2fx the untuned %s",
               what, c->nranks, times, b->winner->plan->name, win == b->baseline ? " (untuned)" : "", gain,
               b->cand[b->baseline].e->plan->name);
  }
  uint32_t decided;
  uint64_t h = table_hash(t, &decided);
  SHUNT_INFO(SHUNT_TUNE, "rank %d: decision table %016llx (%u buckets decided)", c->rank,
             (unsigned long long)h, decided);
  bool all_done = true;
  for (uint32_t i = 0; i < t->nb; i++) all_done &= t->b[i]->state != SAMPLING;
  if (all_done) write_cache(t);
}

const struct shunt_plan_entry* shunt_tune_resolve(struct shunt_comm* c, const struct shunt_tune_ticket* tk,
                                                  const struct shunt_plan_entry* planned) {
  struct shunt_tune* t = c->tune;
  if (!t || !tk->bucket || !(tk->resolve || tk->agree)) return planned;
  pthread_mutex_lock(&t->mu);
  struct shunt_tune_bucket* b = tk->bucket;
  if (tk->agree && b->state == SAMPLING && !t->broken) decide(t, b);
  const struct shunt_plan_entry* e = tk->resolve && b->state == DECIDED ? b->winner : planned;
  pthread_mutex_unlock(&t->mu);
  return e;
}

void shunt_tune_record(struct shunt_tune* t, const struct shunt_tune_ticket* tk, double seconds, bool ok) {
  if (!t || !tk->bucket || tk->resolve || tk->agree) return;
  pthread_mutex_lock(&t->mu);
  struct shunt_tune_bucket* b = tk->bucket;
  struct cand* cd = &b->cand[tk->cand];
  if (!ok) cd->failed = true;
  if (ok && tk->sample && b->state == SAMPLING && cd->n < t->samples && isfinite(seconds))
    cd->t[cd->n++] = seconds;
  pthread_mutex_unlock(&t->mu);
}
