/* A build without rdma-core's headers: no verbs transport. Every rank then has none, so a
 * world never connects one (link_ib.h); SHUNT_NET=ib fails with this reason. */
#include <stdio.h>

#include "transport/link.h"
#include "transport/link_ib.h"

int shunt_ib_open(struct shunt_world* w, uint32_t spread, struct shunt_ib** out, struct shunt_ib_card* card,
                  char* err, size_t len) {
  (void)w;
  (void)spread;
  (void)card;
  *out = NULL;
  snprintf(err, len,
           "this build has no verbs transport (rdma-core's headers were not found when it was built)");
  return -1;
}

int shunt_ib_connect(struct shunt_world* w, struct shunt_ib* ib, const struct shunt_ib_card* cards, char* err,
                     size_t len) {
  (void)w;
  (void)ib;
  (void)cards;
  snprintf(err, len, "this build has no verbs transport");
  return -1;
}

void shunt_ib_card_where(const struct shunt_ib_card* c, char* out, size_t len) {
  (void)c;
  snprintf(out, len, "?");
}

void shunt_ib_close(struct shunt_ib* ib) {
  (void)ib;
}

static int no_trigger(struct shunt_world* w, const struct shunt_trigger* t, const char* src) {
  (void)w;
  (void)t;
  (void)src;
  return -1;
}

const struct shunt_link_ops shunt_link_ib = {"verbs", no_trigger};
