/* Loading a plan folder into a PlanSet: sorted file order, parse + checks, duplicates,
 * tuning overrides, the set's hash. */
#include "plan/planset.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/check.h"
#include "plan/parse.h"
#include "plan/peek.h"
#include "plan/planset_internal.h"
#include "plan/rotate.h"
#include "plan/tuning.h"
#include "util/env.h"
#include "util/log.h"
#include "util/status.h"

const char* shunt_plan_dir_from_env(void) {
  return shunt_env_str("SHUNT_PLAN_DIR", "MSCCLPP_EXECUTION_PLAN_DIR");
}
const char* shunt_tuning_path_from_env(void) {
  const char* v = shunt_env_str("SHUNT_TUNING", NULL);
  /* The words name modes, not files (a file called so is given as ./auto). */
  if (v && (!strcmp(v, "auto") || !strcmp(v, "none"))) return NULL;
  return v;
}

bool shunt_tuning_auto_from_env(void) {
  const char* v = shunt_env_str("SHUNT_TUNING", NULL);
  return v && !strcmp(v, "auto");
}

static int cmp_name(const void* a, const void* b) {
  return strcmp(*(char* const*)a, *(char* const*)b);
}

static bool is_plan_name(const char* n) {
  size_t len = strlen(n);
  return n[0] != '.' && len > 5 && strcmp(n + len - 5, ".json") == 0;
}

int shunt_plan_dir_names(const char* dir, char*** names, uint32_t* n, struct shunt_plan_errors* errs) {
  *names = NULL;
  *n = 0;
  DIR* d = opendir(dir);
  if (!d) {
    int e = errno;
    shunt_plan_error_add(errs, dir, "", "cannot open plan folder: %s", strerror(e));
    return shunt_errno_status(e);
  }
  uint32_t cap = 0;
  struct dirent* de;
  errno = 0;
  while ((de = readdir(d))) {
    if (!is_plan_name(de->d_name)) continue;
    if (*n == cap) {
      uint32_t nc = cap ? cap * 2 : 32;
      char** v = realloc(*names, nc * sizeof(*v));
      if (!v) break;
      *names = v;
      cap = nc;
    }
    char* s = strdup(de->d_name);
    if (!s) break;
    (*names)[(*n)++] = s;
  }
  closedir(d);
  if (*n) qsort(*names, *n, sizeof(**names), cmp_name);
  return 0;
}

static const char* fmt_str(struct shunt_arena* a, const char* fmt, const char* s1, unsigned u) {
  char buf[1024];
  snprintf(buf, sizeof(buf), fmt, s1, u);
  const char* r = shunt_arena_strdup(a, buf);
  return r ? r : "";
}

static void hash_u64(uint64_t* h, uint64_t v) {
  unsigned char b[8];
  for (int i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (8 * i));
  *h = shunt_fnv64(*h, b, 8);
}

/* Whether the file at path holds a plan for another rank count than opts->nranks (which its
 * outline tells without parsing it: shunt_plan_peek); if so its name is kept for the tuning
 * rules. Otherwise *text holds the file (NULL when it could not be read: the error is in errs). */
static bool other_ranks(struct shunt_planset* ps, const char* path, const struct shunt_planset_opts* opts,
                        char** text, size_t* len, struct shunt_plan_errors* errs) {
  *text = shunt_plan_read_file(path, len, errs);
  struct shunt_plan_peek pk;
  if (!*text || !opts || !opts->nranks || !shunt_plan_peek(*text, *len, &pk) || pk.ngpus == opts->nranks)
    return false;
  free(*text);
  *text = NULL;
  if (ps->nother == ps->other_cap) {
    uint32_t nc = ps->other_cap ? 2 * ps->other_cap : 16;
    struct shunt_planset_other* v = realloc(ps->other, nc * sizeof(*v));
    if (!v) return true; /* only a tuning rule naming it may then WARN as unknown */
    ps->other = v, ps->other_cap = nc;
  }
  const char* name = shunt_arena_strdup(ps->strings, pk.name);
  if (name) ps->other[ps->nother++] = (struct shunt_planset_other){name, pk.ngpus};
  return true;
}

/* text: the file's bytes, or NULL when reading failed (why: in read_errs). */
static void load_one(struct shunt_planset* ps, struct shunt_plan_entry* e, const char* text, size_t len,
                     struct shunt_plan_errors* read_errs, const struct shunt_planset_opts* opts,
                     struct shunt_plan_errors* errs) {
  struct shunt_plan_errors mine = {0};
  if (text)
    e->plan = shunt_plan_parse(text, len, e->path, &mine);
  else
    shunt_plan_errors_append(&mine, read_errs);
  if (e->plan) {
    e->content_hash = e->plan->content_hash;
    struct shunt_check_opts co = {.max_threadblocks = opts ? opts->max_threadblocks : 0};
    /* Races no local barrier can order refuse the plan; hazards inside a block only cost the
     * barriers the lowering adds. */
    if (shunt_plan_check(e->plan, &co, &mine) == 0 && shunt_plan_check_races(e->plan, &mine) == 0) {
      struct shunt_plan_errors notes = {0};
      unsigned n = shunt_plan_missing_barriers(e->plan, &notes);
      if (n && notes.n)
        SHUNT_INFO(SHUNT_PLAN, "%s: the lowering adds %u block barrier(s) the plan left out (first: %s: %s)",
                   e->path, n, notes.v[0].path, notes.v[0].reason);
      shunt_plan_errors_free(&notes);
    }
  }
  if (mine.n) {
    char buf[1024];
    e->status = SHUNT_PLAN_REJECTED;
    shunt_plan_error_format(&mine.v[0], buf, sizeof(buf));
    const char* reason = shunt_arena_strdup(ps->strings, buf);
    e->reason = reason ? reason : "rejected";
    if (mine.n > 1 || mine.dropped) {
      snprintf(buf, sizeof(buf), "%s (and %u more)", e->reason, mine.n - 1 + mine.dropped);
      reason = shunt_arena_strdup(ps->strings, buf);
      if (reason) e->reason = reason;
    }
    SHUNT_INFO(SHUNT_PLAN, "plan rejected: %s", e->reason);
    shunt_plan_errors_append(errs, &mine);
  }
  shunt_plan_errors_free(&mine);
  if (e->plan) {
    e->min_bytes = e->plan->min_message_size;
    e->max_bytes = e->plan->max_message_size;
  }
}

static void reject_duplicates(struct shunt_planset* ps, struct shunt_plan_errors* errs) {
  for (uint32_t i = 0; i < ps->n; i++) {
    struct shunt_plan_entry* e = &ps->entries[i];
    if (e->status != SHUNT_PLAN_OK) continue;
    for (uint32_t j = 0; j < i; j++) {
      const struct shunt_plan_entry* f = &ps->entries[j];
      if (f->status != SHUNT_PLAN_OK) continue;
      const struct shunt_plan *a = e->plan, *b = f->plan;
      if (strcmp(a->name, b->name) || strcmp(a->collective, b->collective) || a->ngpus != b->ngpus ||
          a->inplace != b->inplace)
        continue;
      char buf[512];
      snprintf(buf, sizeof(buf), "%s: duplicate plan '%s' (%s, %u ranks, %s) already loaded from %s", e->path,
               a->name, a->collective, a->ngpus, a->inplace ? "in-place" : "out-of-place", f->file);
      shunt_plan_error_add(errs, e->path, "name",
                           "duplicate plan '%s' (%s, %u ranks, %s) already loaded from %s", a->name,
                           a->collective, a->ngpus, a->inplace ? "in-place" : "out-of-place", f->file);
      e->status = SHUNT_PLAN_REJECTED;
      e->reason = shunt_arena_strdup(ps->strings, buf);
      if (!e->reason) e->reason = "duplicate plan";
      SHUNT_INFO(SHUNT_PLAN, "plan rejected: %s", e->reason);
      break;
    }
  }
}

static void apply_tuning(struct shunt_planset* ps, const char* path, struct shunt_plan_errors* errs) {
  struct shunt_tuning t = {0};
  uint32_t first = errs ? errs->n : 0;
  int bad = shunt_tuning_load(path, &t, errs);
  if (bad < 0) {
    SHUNT_WARN("tuning file %s cannot be read; plan ranges are used as written", path);
    shunt_tuning_free(&t);
    return;
  }
  /* One WARN per bad line, with file and line, up to a bound; the other lines apply. */
  for (uint32_t i = first; errs && i < errs->n && i < first + 20; i++) {
    char line[512];
    SHUNT_WARN("tuning: %s", shunt_plan_error_format(&errs->v[i], line, sizeof(line)));
  }
  if (bad) SHUNT_WARN("tuning file %s: %d bad line(s) skipped, the others applied", path, bad);
  /* Two rules for one plan and rank count: the later replaces the earlier, which is likely a
   * mistake (a file edited by hand, or two files joined). */
  for (uint32_t k = 1; k < t.n; k++)
    for (uint32_t j = 0; j < k; j++)
      if (t.rules[j].nranks == t.rules[k].nranks && strcmp(t.rules[j].name, t.rules[k].name) == 0) {
        char ranks[24];
        if (t.rules[k].nranks)
          snprintf(ranks, sizeof(ranks), "%u ranks", t.rules[k].nranks);
        else
          snprintf(ranks, sizeof(ranks), "any rank count");
        SHUNT_WARN("tuning file %s:%u: a second rule for '%s' on %s; it replaces line %u's", path,
                   t.rules[k].line, t.rules[k].name, ranks, t.rules[j].line);
        break;
      }
  for (uint32_t i = 0; i < ps->n; i++) {
    struct shunt_plan_entry* e = &ps->entries[i];
    if (e->status != SHUNT_PLAN_OK) continue;
    /* Every rule naming this plan counts as used, also one shadowed by a more exact rule. */
    for (uint32_t k = 0; k < t.n; k++)
      if (strcmp(t.rules[k].name, e->plan->name) == 0 &&
          (!t.rules[k].nranks || t.rules[k].nranks == e->plan->ngpus))
        t.rules[k].used = true;
    const struct shunt_tuning_rule* r = shunt_tuning_find(&t, e->plan->name, e->plan->ngpus);
    if (!r) continue;
    e->range_source = fmt_str(ps->strings, "%s:%u", path, r->line);
    if (r->disable) {
      e->status = SHUNT_PLAN_DISABLED;
      e->reason = fmt_str(ps->strings, "disabled by %s:%u", path, r->line);
      SHUNT_INFO(SHUNT_PLAN, "%s: %s", e->path, e->reason);
    } else {
      /* The plan's own range too: the checks behind selection (and verify) read the plan. */
      e->min_bytes = e->plan->min_message_size = r->min;
      e->max_bytes = e->plan->max_message_size = r->max;
    }
  }
  /* A rule for a plan of another rank count, left unread, is that plan's: not unknown. */
  for (uint32_t i = 0; i < ps->nother; i++)
    for (uint32_t k = 0; k < t.n; k++)
      if (strcmp(t.rules[k].name, ps->other[i].name) == 0 &&
          (!t.rules[k].nranks || t.rules[k].nranks == ps->other[i].ngpus))
        t.rules[k].used = true;
  for (uint32_t k = 0; k < t.n; k++)
    if (!t.rules[k].used)
      SHUNT_WARN("tuning file %s:%u: no usable plan is named '%s'%s", path, t.rules[k].line, t.rules[k].name,
                 t.rules[k].nranks ? " for that rank count" : "");
  shunt_tuning_free(&t);
}

/* Every plan of a rooted collective (broadcast), renamed for each root its placement allows
 * (plan/rotate.h). Made once the ranges are final (tuning applied): the copies carry them. */
static void make_roots(struct shunt_planset* ps, const char* dir, struct shunt_plan_errors* errs) {
  for (uint32_t i = 0; i < ps->n; i++) {
    struct shunt_plan_entry* e = &ps->entries[i];
    if (e->status != SHUNT_PLAN_OK || !shunt_coll_rooted(e->plan->coll) || !e->plan->ngpus) continue;
    uint32_t n = e->plan->ngpus;
    struct shunt_plan_entry* v = calloc(n, sizeof(*v));
    if (!v) {
      shunt_plan_error_add(errs, dir, "", "out of memory renaming the ranks of %s", e->file);
      continue;
    }
    for (uint32_t r = 0; r < n; r++) {
      v[r] = *e;
      v[r].roots = NULL;
      uint32_t shift = shunt_plan_root_shift(e->plan, r);
      if (!shift) continue; /* the plan itself */
      v[r].plan = shunt_plan_rotatable(e->plan, shift) ? shunt_plan_rotate(e->plan, shift) : NULL;
      if (shunt_plan_rotatable(e->plan, shift) && !v[r].plan)
        shunt_plan_error_add(errs, dir, "", "out of memory renaming the ranks of %s", e->file);
    }
    e->roots = v;
  }
}

static void free_roots(struct shunt_plan_entry* e) {
  if (!e->roots) return;
  for (uint32_t r = 0; r < e->plan->ngpus; r++)
    if (e->roots[r].plan != e->plan) shunt_plan_free(e->roots[r].plan);
  free((void*)e->roots);
  e->roots = NULL;
}

static void compute_hash(struct shunt_planset* ps) {
  uint64_t h = SHUNT_FNV64_INIT;
  hash_u64(&h, ps->n);
  for (uint32_t i = 0; i < ps->n; i++) {
    const struct shunt_plan_entry* e = &ps->entries[i];
    h = shunt_fnv64(h, e->file, strlen(e->file) + 1);
    hash_u64(&h, e->content_hash);
    hash_u64(&h, (uint64_t)e->status);
    hash_u64(&h, e->status == SHUNT_PLAN_OK ? e->min_bytes : 0);
    hash_u64(&h, e->status == SHUNT_PLAN_OK ? e->max_bytes : 0);
  }
  ps->hash = h;
}

int shunt_planset_load(const char* dir, const struct shunt_planset_opts* opts, struct shunt_planset** out,
                       struct shunt_plan_errors* errs) {
  *out = NULL;
  struct shunt_planset* ps = calloc(1, sizeof(*ps));
  if (!ps || !(ps->strings = shunt_arena_new())) {
    free(ps);
    shunt_plan_error_add(errs, dir ? dir : "", "", "out of memory");
    return SHUNT_E_NOMEM;
  }
  char** names = NULL;
  uint32_t n = 0;
  int rc = 0;
  if (!dir || !*dir) {
    shunt_plan_error_add(errs, "", "", "no plan folder given");
    rc = SHUNT_E_INVALID;
  } else {
    rc = shunt_plan_dir_names(dir, &names, &n, errs);
  }
  ps->entries = calloc(n ? n : 1, sizeof(*ps->entries));
  if (!ps->entries) n = 0;
  for (uint32_t i = 0; i < n; i++) {
    struct shunt_plan_entry* e = &ps->entries[ps->n];
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
    char* text;
    size_t len;
    struct shunt_plan_errors rd = {0};
    if (other_ranks(ps, path, opts, &text, &len, &rd)) {
      free(names[i]);
      shunt_plan_errors_free(&rd);
      continue;
    }
    e->file = shunt_arena_strdup(ps->strings, names[i]);
    e->path = shunt_arena_strdup(ps->strings, path);
    free(names[i]);
    if (e->file && e->path) {
      e->reason = "";
      e->range_source = "plan file";
      ps->n++;
      load_one(ps, e, text, len, &rd, opts, errs);
    }
    free(text);
    shunt_plan_errors_free(&rd);
  }
  free(names);
  reject_duplicates(ps, errs);
  if (opts && opts->tuning_path) apply_tuning(ps, opts->tuning_path, errs);
  for (uint32_t i = 0; i < ps->n; i++) ps->usable += ps->entries[i].status == SHUNT_PLAN_OK;
  make_roots(ps, dir ? dir : "", errs);
  compute_hash(ps);
  if (!planset_index(ps)) shunt_plan_error_add(errs, dir, "", "out of memory indexing plans");
  *out = ps;
  return rc;
}

void shunt_planset_free(struct shunt_planset* ps) {
  if (!ps) return;
  for (uint32_t i = 0; i < ps->n; i++) {
    free_roots(&ps->entries[i]); /* the renamed plans share parts of the plan */
    shunt_plan_free(ps->entries[i].plan);
  }
  free(ps->entries);
  free(ps->sel);
  free(ps->buckets);
  free(ps->slots);
  free(ps->other);
  shunt_arena_free(ps->strings);
  free(ps);
}

uint32_t shunt_planset_count(const struct shunt_planset* ps) {
  return ps ? ps->n : 0;
}
const struct shunt_plan_entry* shunt_planset_entry(const struct shunt_planset* ps, uint32_t i) {
  return ps && i < ps->n ? &ps->entries[i] : NULL;
}
uint32_t shunt_planset_usable(const struct shunt_planset* ps) {
  return ps ? ps->usable : 0;
}
uint32_t shunt_planset_other_ranks(const struct shunt_planset* ps) {
  return ps ? ps->nother : 0;
}
uint64_t shunt_planset_hash(const struct shunt_planset* ps) {
  return ps ? ps->hash : 0;
}
