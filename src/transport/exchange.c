/* The vote over an exchange (exchange.h). */
#include "transport/exchange.h"

#include <stdio.h>
#include <string.h>

#include "util/status.h"

int shunt_world_agree(const struct shunt_oob* oob, uint32_t rank, uint32_t nranks, bool local_ok,
                      uint8_t* ok, char* err, size_t len) {
  memset(ok, 0, nranks);
  ok[rank] = local_ok ? 1 : 0;
  int rc = local_ok ? SHUNT_OK : SHUNT_E_INVALID;
  int ag = oob->allgather(oob->ctx, ok, 1);
  if (ag != 0) {
    if (rc == 0 && err && len) snprintf(err, len, "bootstrap allgather failed");
    if (rc == 0) rc = ag < 0 ? ag : SHUNT_E_PEER;
  }
  for (uint32_t r = 0; r < nranks && rc == 0; r++)
    if (!ok[r]) {
      if (err && len) snprintf(err, len, "rank %u failed to set up its world", r);
      rc = SHUNT_E_PEER;
    }
  return rc;
}
