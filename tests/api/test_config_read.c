/* Growing structs: ncclConfig_t and ncclCollConfig_t are read only as far as the caller's
 * `size` reaches, from structs laid out by older headers (smaller), by these headers, and by
 * newer ones (larger, with fields appended that shunt does not know), never written. */
#include <nccl.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "api/coll_config.h"
#include "api/config.h"
#include "common/check.h"
#include "shunt/shunt.h"

/* 2.32's ncclCollConfig_t followed by fields a later release might append. */
struct future_coll_config {
  ncclCollConfig_t base;
  int newer[8];
};

static void init_coll(ncclCollConfig_t* c, size_t size) {
  memset(c, 0, sizeof(*c));
  c->size = size;
  c->magic = 0xcafebeef;
  c->version = NCCL_VERSION(2, 32, 3);
}

int main(void) {
  /* ncclConfig_t: blocking is read when the struct reaches it and it is set. */
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  CHECK_EQ_INT(shunt_config_blocking(&cfg, 1), 1); /* unset: the default */
  cfg.blocking = 0;
  CHECK_EQ_INT(shunt_config_blocking(&cfg, 1), 0);
  cfg.size = 48; /* NCCL 2.19's struct */
  CHECK_EQ_INT(shunt_config_blocking(&cfg, 1), 0);
  cfg.size = offsetof(ncclConfig_t, blocking); /* ends before the field */
  CHECK_EQ_INT(shunt_config_blocking(&cfg, 1), 1);
  cfg.size = sizeof(cfg) + 64; /* a newer, larger struct */
  CHECK_EQ_INT(shunt_config_blocking(&cfg, 1), 0);
  cfg.magic = 0;
  CHECK_EQ_INT(shunt_config_blocking(&cfg, 1), 1); /* not initialised: default */

  /* ncclCollConfig_t of 2.32, of 2.31 (no launchCompletionEvent) and of a future release. */
  struct shunt_coll_opts o;
  int ev;
  struct future_coll_config fut;
  init_coll(&fut.base, sizeof(fut));
  memset(fut.newer, 0x5a, sizeof(fut.newer));
  fut.base.launchCompletionEvent = (cudaEvent_t)&ev;
  fut.base.algSelection = "ring";
  unsigned char before[sizeof(fut)];
  memcpy(before, &fut, sizeof(fut));
  CHECK_EQ_INT(shunt_coll_opts_read("t", &fut.base, &o), ncclSuccess);
  CHECK(o.completion_event == (void*)&ev);
  CHECK(o.to_nccl != NULL);
  CHECK_MSG(memcmp(before, &fut, sizeof(fut)) == 0, "the caller's struct was written");

  fut.base.size = offsetof(ncclCollConfig_t, launchCompletionEvent); /* 2.31's size */
  CHECK_EQ_INT(shunt_coll_opts_read("t", &fut.base, &o), ncclSuccess);
  CHECK(o.completion_event == NULL);
  CHECK(o.to_nccl != NULL);

  fut.base.size = offsetof(ncclCollConfig_t, algSelection); /* ends before algSelection */
  CHECK_EQ_INT(shunt_coll_opts_read("t", &fut.base, &o), ncclSuccess);
  CHECK(o.to_nccl == NULL && o.completion_event == NULL);

  fut.base.size = offsetof(ncclCollConfig_t, ext) - 1; /* too short to be one */
  CHECK_EQ_INT(shunt_coll_opts_read("t", &fut.base, &o), ncclInvalidArgument);

  /* Extensions: another vendor's are skipped, shunt's read, a circular list refused. */
  ncclCollConfig_t c;
  init_coll(&c, sizeof(c));
  ncclConfigExt_t a = {NULL, {7, SHUNT_CONFIG_PLAN}, {.s = NULL}};
  ncclConfigExt_t b = {&a, {SHUNT_CONFIG_VENDOR_ID, SHUNT_CONFIG_PLAN}, {.s = "p1"}};
  c.ext = &b;
  CHECK_EQ_INT(shunt_coll_opts_read("t", &c, &o), ncclSuccess);
  CHECK(o.only_plan && !strcmp(o.only_plan, "p1"));
  b.val.s = "";
  CHECK_EQ_INT(shunt_coll_opts_read("t", &c, &o), ncclInvalidArgument);
  b.val.s = "p1";
  a.next = &b; /* circular */
  CHECK_EQ_INT(shunt_coll_opts_read("t", &c, &o), ncclInvalidArgument);
  a.next = NULL;
  CHECK_EQ_INT(shunt_coll_opts_read("t", NULL, &o), ncclSuccess);
  CHECK(!o.to_nccl && !o.only_plan && !o.completion_event);
  CHECK_DONE();
}
