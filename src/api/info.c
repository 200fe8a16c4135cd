/* shunt's own public calls (include/shunt/shunt.h). */
#include "shunt/shunt.h"

#include "api/export.h"
#include "api/handles.h"
#include "comm/comm.h"
#include "fallback/real_nccl.h"

SHUNT_EXPORT const char* shuntVersion(void) { return SHUNT_VERSION; }

SHUNT_EXPORT int shuntRealNccl(const char** path, int* version) {
  const struct shunt_real_nccl* real = shunt_real_nccl();
  if (!real) {
    if (path) *path = shunt_real_nccl_error();
    if (version) *version = 0;
    return -1;
  }
  if (path) *path = real->path;
  if (version) *version = real->version;
  return 0;
}

SHUNT_EXPORT int shuntLastPlan(struct ncclComm* comm, const char** name) {
  SHUNT_COMM_REF c = shunt_handles_get(comm);
  if (!c) return -1;
  if (name) *name = atomic_load(&c->last_plan);
  return 0;
}

SHUNT_EXPORT int shuntGpuExecutor(struct ncclComm* comm, int* on) {
  SHUNT_COMM_REF c = shunt_handles_get(comm);
  if (!c || !on) return -1;
  int v = atomic_load(&c->gpu_verdict);
  *on = v == SHUNT_GPU_USE ? 1 : v == SHUNT_GPU_NCCL ? 0 : -1;
  return 0;
}
