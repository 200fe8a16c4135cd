/* Renaming a plan's ranks (plan/rotate.h): every rank reference of the shipped broadcast plans
 * and of a multi-node plan (port channels, remote buffers over both channel types) moves, the
 * renamed plan passes the static checks, the placement rule, and selection of the entry that
 * serves each broadcast root (a placement no renaming keeps gets none, with the reason). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/check.h"
#include "plan/check.h"
#include "plan/parse.h"
#include "plan/planset.h"
#include "plan/rotate.h"

static int32_t ren(int32_t q, uint32_t s, uint32_t n) {
  return q < 0 ? q : (int32_t)(((uint32_t)q + s) % n);
}

static unsigned refs_moved(const struct shunt_plan_ref* a, const struct shunt_plan_ref* b, uint32_t n,
                           uint32_t s, uint32_t nranks) {
  unsigned bad = 0;
  for (uint32_t i = 0; i < n; i++) {
    bad += b[i].rank != ren(a[i].rank, s, nranks) || b[i].peer != ren(a[i].peer, s, nranks);
    bad += b[i].kind != a[i].kind || b[i].index != a[i].index || b[i].size != a[i].size ||
           b[i].global != a[i].global || b[i].type != a[i].type;
  }
  return bad;
}

static unsigned ops_moved(const struct shunt_plan_op* a, const struct shunt_plan_op* b, uint32_t n,
                          uint32_t s, uint32_t nranks, unsigned* nrefs) {
  unsigned bad = 0;
  for (uint32_t i = 0; i < n; i++) {
    bad +=
        a[i].type != b[i].type || a[i].nsrc != b[i].nsrc || a[i].ndst != b[i].ndst || a[i].nops != b[i].nops;
    if (bad) return bad;
    bad += refs_moved(a[i].src, b[i].src, a[i].nsrc, s, nranks) +
           refs_moved(a[i].dst, b[i].dst, a[i].ndst, s, nranks);
    for (uint32_t k = 0; k < a[i].nsrc; k++) *nrefs += a[i].src[k].peer >= 0;
    for (uint32_t k = 0; k < a[i].ndst; k++) *nrefs += a[i].dst[k].peer >= 0;
    bad += ops_moved(a[i].ops, b[i].ops, a[i].nops, s, nranks, nrefs);
  }
  return bad;
}

/* Rank k's part of p is rank k + s's part of q, every rank it names renamed; returns the
 * differences and counts the rank references seen (so that a plan naming none proves nothing). */
static unsigned moved(const struct shunt_plan* p, const struct shunt_plan* q, uint32_t s, unsigned* nrefs) {
  uint32_t n = p->ngpus;
  unsigned bad = q->ngpus != n ||
                 q->root != (p->coll == SHUNT_COLL_BROADCAST ? (p->root + s) % n : p->root) ||
                 strcmp(q->name, p->name) || q->min_message_size != p->min_message_size ||
                 q->max_message_size != p->max_message_size;
  for (uint32_t k = 0; k < n && !bad; k++) {
    const struct shunt_plan_gpu *a = &p->gpus[k], *b = &q->gpus[(k + s) % n];
    bad += b->id != ren(a->id, s, n) || b->nthreadblocks != a->nthreadblocks ||
           b->nremote_buffers != a->nremote_buffers || b->input_chunks != a->input_chunks;
    for (int t = 0; t < SHUNT_CHAN_TYPES && !bad; t++) {
      bad += b->nchannels[t] != a->nchannels[t];
      for (uint32_t i = 0; i < a->nchannels[t] && !bad; i++) {
        const struct shunt_plan_channel *x = &a->channels[t][i], *y = &b->channels[t][i];
        bad += y->peer != ren(x->peer, s, n) || y->nranks != x->nranks || y->peer_ordinal != x->peer_ordinal;
        *nrefs += x->peer >= 0;
        for (uint32_t r = 0; r < x->nranks && !bad; r++) bad += y->ranks[r] != ren(x->ranks[r], s, n);
      }
    }
    for (uint32_t i = 0; i < a->nremote_buffers && !bad; i++) {
      bad += b->remote_buffers[i].rank != ren(a->remote_buffers[i].rank, s, n) ||
             b->remote_buffers[i].type != a->remote_buffers[i].type;
      *nrefs += 1;
    }
    for (uint32_t i = 0; i < a->nthreadblocks && !bad; i++)
      bad += ops_moved(a->threadblocks[i].ops, b->threadblocks[i].ops, a->threadblocks[i].nops, s, n, nrefs);
  }
  return bad;
}

static struct shunt_plan* load(const char* name) {
  char path[1024];
  snprintf(path, sizeof(path), "%s/%s.json", PLAN_DIR, name);
  struct shunt_plan_errors e = {0};
  struct shunt_plan* p = shunt_plan_load_file(path, &e);
  CHECK_MSG(p != NULL && e.n == 0, "%s does not load", path);
  shunt_plan_errors_free(&e);
  return p;
}

static void rotate_all(const char* name) {
  struct shunt_plan* p = load(name);
  if (!p) return;
  for (uint32_t s = 0; s < p->ngpus; s++) {
    if (!shunt_plan_rotatable(p, s)) continue;
    struct shunt_plan* q = shunt_plan_rotate(p, s);
    CHECK(q != NULL);
    if (!q) continue;
    unsigned nrefs = 0;
    CHECK_MSG(moved(p, q, s, &nrefs) == 0, "%s renamed by %u: a rank reference did not move", name, s);
    CHECK_MSG(nrefs > 0, "%s names no rank", name);
    struct shunt_plan_errors e = {0};
    struct shunt_check_opts co = {0};
    shunt_plan_check(q, &co, &e);
    char buf[1200];
    CHECK_MSG(e.n == 0, "%s renamed by %u fails the checks: %s", name, s,
              e.n ? shunt_plan_error_format(&e.v[0], buf, sizeof(buf)) : "");
    shunt_plan_errors_free(&e);
    shunt_plan_free(q);
  }
  shunt_plan_free(p);
}

static const struct shunt_plan_entry* bcast(const struct shunt_planset* ps, uint32_t n, uint32_t rpn,
                                            uint32_t root, uint64_t bytes, const char** why) {
  struct shunt_select_query q = {.coll = SHUNT_COLL_BROADCAST,
                                 .nranks = n,
                                 .ranks_per_node = rpn,
                                 .inplace = root % 2 == 0, /* ignored: either mode finds the plan */
                                 .dtype = SHUNT_DT_INT8,
                                 .op = SHUNT_REDOP_SUM,
                                 .bytes = bytes,
                                 .root = root};
  struct shunt_selection s = shunt_planset_select(ps, &q);
  *why = s.why_not ? s.why_not : "";
  return s.entry;
}

int main(void) {
  rotate_all("broadcast_8r_ll");
  rotate_all("broadcast_4r_simple");
  rotate_all("allreduce_2x4_hier_outofplace");

  /* Placement: one host or none renames by any shift, groups of M only by multiples of M. */
  struct shunt_plan* h = load("allreduce_2x4_hier_outofplace");
  if (h) {
    CHECK(shunt_plan_rotatable(h, 4) && !shunt_plan_rotatable(h, 1) && !shunt_plan_rotatable(h, 6));
    shunt_plan_free(h);
  }
  struct shunt_plan* o = load("broadcast_8r_simple");
  if (o) {
    for (uint32_t s = 0; s < 8; s++) CHECK(shunt_plan_rotatable(o, s));
    shunt_plan_free(o);
  }

  /* Selection: the entry for each root runs a plan whose root it is; the modes are one. */
  struct shunt_planset* ps = NULL;
  struct shunt_plan_errors e = {0};
  struct shunt_planset_opts po = {.nranks = 4};
  CHECK(shunt_planset_load(PLAN_DIR, &po, &ps, &e) == 0 && ps);
  const char* why;
  for (uint32_t r = 0; ps && r < 4; r++) {
    const struct shunt_plan_entry* x = bcast(ps, 4, 0, r, 100, &why);
    CHECK_MSG(x && x->plan->root == r && !strcmp(x->plan->name, "broadcast_4r_ll"), "root %u: %s", r, why);
    x = bcast(ps, 4, 0, r, 64u << 20, &why);
    CHECK_MSG(x && x->plan->root == r && !strcmp(x->plan->name, "broadcast_4r_simple"), "root %u: %s", r,
              why);
  }
  if (ps) CHECK(bcast(ps, 4, 0, 4, 100, &why) == NULL);
  shunt_planset_free(ps);
  shunt_plan_errors_free(&e);

  /* A broadcast plan whose memory channels join hosts of 4 ranks (a multi-node plan's layout
   * under another collective's name, with "root": 5): roots 1 and 5 are served (shifts 4 and
   * 0), root 2 is not. */
  char path[1024];
  snprintf(path, sizeof(path), "%s/allreduce_2x4_hier_outofplace.json", PLAN_DIR);
  FILE* f = fopen(path, "rb");
  CHECK(f != NULL);
  if (!f) CHECK_DONE();
  char* text = malloc(8u << 20);
  size_t len = fread(text, 1, (8u << 20) - 1, f);
  fclose(f);
  text[len] = 0;
  char* at = strstr(text, "\"allreduce\"");
  CHECK(at != NULL);
  char dir[] = "/tmp/shunt_rotate_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char out[1100];
  snprintf(out, sizeof(out), "%s/b.json", dir);
  FILE* w = fopen(out, "wb");
  CHECK(w != NULL);
  if (at && w) {
    fwrite(text, 1, (size_t)(at - text), w);
    fputs("\"broadcast\", \"root\": 5", w);
    fputs(at + strlen("\"allreduce\""), w);
  }
  if (w) fclose(w);
  free(text);
  ps = NULL;
  CHECK(shunt_planset_load(dir, NULL, &ps, &e) == 0 && ps);
  if (ps) {
    CHECK_MSG(shunt_planset_usable(ps) == 1, "the renamed hierarchical plan does not load");
    const struct shunt_plan_entry* x = bcast(ps, 8, 4, 5, 4096, &why);
    CHECK_MSG(x && x->plan->root == 5 && x->plan == shunt_planset_entry(ps, 0)->plan, "root 5: %s", why);
    x = bcast(ps, 8, 4, 1, 4096, &why);
    CHECK_MSG(x && x->plan->root == 1, "root 1: %s", why);
    CHECK(bcast(ps, 8, 4, 2, 4096, &why) == NULL);
    CHECK_STR_CONTAINS(why, "no broadcast plan for root 2 on this placement");
  }
  shunt_planset_free(ps);
  shunt_plan_errors_free(&e);
  remove(out);
  rmdir(dir);
  CHECK_DONE();
}
