/* shunt-plan list: the plan table of a folder, as the library would load it. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "fmt.h"
#include "plan/planset.h"
#include "plan/tune_cache.h"
#include "plan/tuning.h"

static void channel_types(const struct shunt_plan* p, char* buf) {
  bool used[SHUNT_CHAN_TYPES] = {false};
  for (uint32_t r = 0; r < p->ngpus; r++)
    for (int t = SHUNT_CHAN_MEMORY; t < SHUNT_CHAN_TYPES; t++) used[t] |= p->gpus[r].nchannels[t] > 0;
  buf[0] = '\0';
  for (int t = SHUNT_CHAN_MEMORY; t < SHUNT_CHAN_TYPES; t++)
    if (used[t]) {
      if (buf[0]) strcat(buf, ",");
      strcat(buf, shunt_chan_type_name((enum shunt_chan_type)t));
    }
  if (!buf[0]) strcpy(buf, "-");
}

/* A rooted collective's entry's roots: " (root R; serves roots: all)" or the list its placement
 * allows. */
static void roots_note(const struct shunt_plan_entry* e, char* buf, size_t len) {
  buf[0] = '\0';
  if (!e->plan || !shunt_coll_rooted(e->plan->coll) || !e->roots) return;
  uint32_t n = e->plan->ngpus, served = 0;
  for (uint32_t r = 0; r < n; r++) served += e->roots[r].plan != NULL;
  size_t at = (size_t)snprintf(buf, len, " (root %u; serves roots: ", e->plan->root);
  if (served == n) {
    snprintf(buf + at, len - at, "all)");
    return;
  }
  for (uint32_t r = 0; r < n && at < len; r++)
    if (e->roots[r].plan)
      at += (size_t)snprintf(buf + at, len - at, "%s%u", at && buf[at - 1] != ' ' ? "," : "", r);
  if (at < len) snprintf(buf + at, len - at, ")");
}

/* A tuning file written by in-job tuning (SHUNT_TUNING=auto): its decisions, bucket by bucket. */
static void list_decisions(const char* path) {
  struct shunt_tune_saved* d = NULL;
  uint32_t n = 0;
  FILE* f = fopen(path, "r");
  char first[128] = "";
  if (f) {
    if (!fgets(first, sizeof(first), f)) first[0] = '\0';
    fclose(f);
  }
  if (!strstr(first, "SHUNT_TUNING=auto")) return; /* a hand-written or shunt-tune file */
  shunt_tune_cache_read(path, NULL, &d, &n);
  printf("in-job decisions (%u):\n", n);
  for (uint32_t i = 0; i < n; i++) {
    const struct shunt_tune_key* k = &d[i].key;
    char lo[32], hi[32], root[24] = "";
    enum shunt_coll coll = shunt_coll_from_code(k->coll);
    enum shunt_redop need = shunt_redop_from_code(k->need);
    if (shunt_coll_rooted(coll)) snprintf(root, sizeof(root), " root %u", k->root);
    bool reduces = shunt_coll_reduces(coll);
    printf("  %-13s %-12s %-9s %15s..%-15s -> %s%s\n", shunt_coll_name(coll),
           k->inplace ? "in-place" : "out-of-place", reduces && shunt_redop_computed(need) ? shunt_redop_name(need) : "-",
           shunt_tuning_format_size(k->cls ? 1ull << k->cls : 0, lo, sizeof(lo)),
           shunt_tuning_format_size(k->cls >= 63 ? UINT64_MAX : (2ull << k->cls) - 1, hi, sizeof(hi)),
           d[i].winner, root);
  }
  free(d);
}

int cmd_list(int argc, char** argv) {
  struct shunt_planset_opts opts = {.tuning_path = shunt_tuning_path_from_env()};
  if (take_max_threadblocks(&argc, argv, &opts.max_threadblocks) != 0) {
    fprintf(stderr, "shunt-plan list: --max-threadblocks needs a number\n");
    return 2;
  }
  /* --tsv: one tab-separated row per plan file and no summary, for programs (python -m shunt
   * doctor) that must not depend on the table's column widths. */
  bool tsv = false;
  for (;;) {
    if (argc >= 2 && strcmp(argv[0], "--tuning") == 0) {
      opts.tuning_path = argv[1];
      argc -= 2;
      argv += 2;
    } else if (argc >= 1 && strcmp(argv[0], "--tsv") == 0) {
      tsv = true;
      argc--;
      argv++;
    } else {
      break;
    }
  }
  if (argc != 1) {
    fprintf(stderr, "usage: shunt-plan list [--tuning FILE] [--max-threadblocks N] [--tsv] DIR\n");
    return 2;
  }
  struct shunt_plan_errors errs = {0};
  struct shunt_planset* ps = NULL;
  int rc = shunt_planset_load(argv[0], &opts, &ps, &errs);
  if (rc != 0) {
    char buf[1024];
    for (uint32_t i = 0; i < errs.n; i++)
      fprintf(stderr, "%s\n", shunt_plan_error_format(&errs.v[i], buf, sizeof(buf)));
    shunt_planset_free(ps);
    shunt_plan_errors_free(&errs);
    return 2;
  }
  if (tsv)
    printf(
        "file\tname\tcoll\tranks\tproto\tinplace\tmin_bytes\tmax_bytes\t"
        "range_from\ttbs\tchannels\tstatus\treason\n");
  else
    printf("%-36s %-30s %-10s %5s %-6s %-7s %-15s %-20s %4s %-19s %s\n", "FILE", "NAME", "COLL", "RANKS",
           "PROTO", "INPLACE", "RANGE", "RANGE-FROM", "TBS", "CHANNELS", "STATUS");
  for (uint32_t i = 0; i < shunt_planset_count(ps); i++) {
    const struct shunt_plan_entry* e = shunt_planset_entry(ps, i);
    const struct shunt_plan* p = e->plan;
    char lo[32], hi[32], range[72], chans[32] = "-";
    uint32_t tbs = 0;
    if (p) {
      for (uint32_t r = 0; r < p->ngpus; r++)
        if (p->gpus[r].nthreadblocks > tbs) tbs = p->gpus[r].nthreadblocks;
      channel_types(p, chans);
    }
    snprintf(range, sizeof(range), "%s..%s", shunt_tuning_format_size(e->min_bytes, lo, sizeof(lo)),
             shunt_tuning_format_size(e->max_bytes, hi, sizeof(hi)));
    char roots[160];
    roots_note(e, roots, sizeof(roots));
    const char* status = e->status == SHUNT_PLAN_OK         ? "ok"
                         : e->status == SHUNT_PLAN_DISABLED ? "disabled"
                                                            : "rejected";
    /* A rooted collective's plan serves both modes (plan/planset.h). */
    const char* inplace = !p ? "-" : shunt_coll_rooted(p->coll) ? "both" : p->inplace ? "yes" : "no";
    if (tsv) {
      printf("%s\t%s\t%s\t%u\t%s\t%s\t%" PRIu64 "\t%" PRIu64 "\t%s\t%u\t%s\t%s\t%s\n", e->file,
             p ? p->name : "-", p ? p->collective : "-", p ? p->ngpus : 0, p ? p->protocol : "-", inplace,
             (uint64_t)e->min_bytes, (uint64_t)e->max_bytes, p ? e->range_source : "-", tbs, chans, status,
             e->reason);
      continue;
    }
    printf("%-36s %-30s %-10s %5u %-6s %-7s %-15s %-20s %4u %-19s %s%s%s%s\n", e->file, p ? p->name : "-",
           p ? p->collective : "-", p ? p->ngpus : 0, p ? p->protocol : "-", inplace, p ? range : "-",
           p ? e->range_source : "-", tbs, chans, status, roots, e->reason[0] ? ": " : "", e->reason);
  }
  if (!tsv)
    printf("%u plan file(s), %u usable, plan-set hash %016" PRIx64 "\n", shunt_planset_count(ps),
           shunt_planset_usable(ps), shunt_planset_hash(ps));
  if (opts.tuning_path && !tsv) list_decisions(opts.tuning_path);
  shunt_planset_free(ps);
  shunt_plan_errors_free(&errs);
  return 0;
}
