/* A build without rdma-core's headers: no verbs endpoint. No rank then has one, so a world
 * never uses it (ib_ep.h); SHUNT_NET=ib fails with this reason. */
#include <stdio.h>
#include <stdlib.h>

#include "transport/ib_ep.h"
#include "transport/exchange.h"
#include "util/status.h"

int shunt_ib_open(const struct shunt_ib_config* cfg, struct shunt_ib** out, struct shunt_ib_card* card,
                  char* err, size_t len) {
  (void)cfg;
  (void)card;
  *out = NULL;
  snprintf(err, len,
           "this build has no verbs transport (rdma-core's headers were not found when it was built)");
  return SHUNT_E_NET;
}

int shunt_ib_connect(struct shunt_ib* ib, uint32_t rank, uint32_t nranks,
                     const struct shunt_oob* oob, const bool* remote,
                     const struct shunt_ib_card* cards, char* err, size_t len) {
  (void)ib;
  (void)remote;
  (void)cards;
  /* Never called (no rank has an endpoint), but collective all the same. */
  snprintf(err, len, "this build has no verbs transport");
  uint8_t* v = calloc(nranks, 1);
  if (v) shunt_world_agree(oob, rank, nranks, false, v, NULL, 0);
  free(v);
  return SHUNT_E_NET;
}

uint64_t* shunt_ib_signals(struct shunt_ib* ib) {
  (void)ib;
  return NULL;
}

int shunt_ib_write(struct shunt_ib* ib, uint32_t peer, const void* src, uint64_t bytes, uint64_t dst_off,
                   uint64_t* id) {
  (void)ib;
  (void)peer;
  (void)src;
  (void)bytes;
  (void)dst_off;
  *id = 0;
  return SHUNT_E_NET;
}

int shunt_ib_wait(struct shunt_ib* ib, uint32_t peer, uint64_t id) {
  (void)ib;
  (void)peer;
  (void)id;
  return SHUNT_E_NET;
}

void shunt_ib_card_where(const struct shunt_ib_card* c, char* out, size_t len) {
  (void)c;
  snprintf(out, len, "?");
}

void shunt_ib_close(struct shunt_ib* ib) {
  (void)ib;
}
