/* The vote over an exchange (exchange.h). */
#include "transport/exchange.h"

#include <stdio.h>
#include <string.h>

int shunt_world_agree(const struct shunt_oob* oob, uint32_t rank, uint32_t nranks, bool local_ok,
                      uint8_t* ok, char* err, size_t len) {
  memset(ok, 0, nranks);
  ok[rank] = local_ok ? 1 : 0;
  int rc = local_ok ? 0 : -1;
  if (oob->allgather(oob->ctx, ok, 1) != 0) {
    if (rc == 0 && err && len) snprintf(err, len, "bootstrap allgather failed");
    rc = -1;
  }
  for (uint32_t r = 0; r < nranks && rc == 0; r++)
    if (!ok[r]) {
      if (err && len) snprintf(err, len, "rank %u failed to set up its world", r);
      rc = -1;
    }
  return rc;
}
