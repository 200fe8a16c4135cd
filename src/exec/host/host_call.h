/* One call of any size on the host backend: the head and tail runs of exec/split.h.
 *
 * Promises: every rank that calls with the same plan and sizes runs the same parts in the
 * same order (each a collective host run, exec/host/host_run.h); the head runs on the user's
 * buffers, the tail through the staging buffer in `reuse`, so the remainder never costs a copy
 * of the whole buffer. The world must already hold both parts (the sizes in struct
 * shunt_split). */
#ifndef SHUNT_EXEC_HOST_CALL_H
#define SHUNT_EXEC_HOST_CALL_H

#include <stddef.h>
#include <stdint.h>

#include "exec/host/host_run.h"
#include "exec/lower.h"
#include "exec/split.h"
#include "exec/steps.h"

/* What a caller keeps between calls, whatever world they run on: the tail's staging buffer and
 * the runs' fibers and arrays (host_run.h), grown as needed, freed by shunt_host_reuse_free. */
struct shunt_host_reuse {
  char* buf;
  uint64_t cap;
  struct shunt_host_keep* keep;
};

/* Runs a call of `plan` on rank `rank`, its shape `s` (its real sizes, split as shunt_split_call
 * split it: the split the world was sized for): programs come from `cache`. Returns SHUNT_OK or
 * a SHUNT_E_* code with a message in err. */
int shunt_host_run_call(struct shunt_world* w, struct shunt_lower_cache* cache, const struct shunt_plan* plan,
                        uint32_t rank, const struct shunt_split* s, const void* in, void* out,
                        const struct shunt_host_run_opts* opts, struct shunt_host_reuse* reuse, char* err,
                        size_t len);

void shunt_host_reuse_free(struct shunt_host_reuse* t);

#endif
