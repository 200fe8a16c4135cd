#include "api/launch.h"

#include <stdlib.h>
#include <string.h>

#include "comm/bootstrap.h"
#include "exec/backend.h"
#include "util/status.h"
#include "exec/lower.h"
#include "util/log.h"

static int world_allgather(void* ctx, void* buf, size_t bytes) {
  char err[256];
  return shunt_bootstrap_allgather(ctx, buf, bytes, err, sizeof(err));
}

static int world_barrier(void* ctx) {
  char err[256];
  return shunt_bootstrap_barrier(ctx, err, sizeof(err));
}

struct shunt_backend* shunt_launch_backend(struct shunt_comm* c, bool gpu, int device) {
  _Atomic(struct shunt_backend*)* slot = gpu ? &c->gpu : &c->host;
  struct shunt_backend* b = atomic_load(slot);
  if (b) return b;
  struct shunt_world_exchange ex = {.oob = {c->boot, world_allgather, world_barrier},
                                    .at = {.node = (uint32_t)c->node, .nnodes = (uint32_t)c->nnodes}};
  /* Port channels to other hosts listen on the bootstrap's interface. */
  struct shunt_wire_addr boot_addr;
  shunt_bootstrap_listen_addr(c->boot, &boot_addr);
  if (c->nnodes > 1 && shunt_wire_to_sockaddr(&boot_addr, &ex.at.net_addr) != 0) ex.at.net_addr.ss_family = 0;
  b = shunt_backend_new(gpu ? SHUNT_BACKEND_GPU : SHUNT_BACKEND_HOST, (uint32_t)c->rank, (uint32_t)c->nranks,
                        &ex, device);
  if (b) atomic_store(slot, b);
  return b;
}

ncclResult_t shunt_nccl_result(int code) {
  switch (code) {
    case SHUNT_OK:
      return ncclSuccess;
    case SHUNT_E_TIMEOUT:
    case SHUNT_E_NOMEM:
    case SHUNT_E_SYSTEM:
    case SHUNT_E_PEER:
    case SHUNT_E_NET:
    case SHUNT_E_ABORTED:
      return ncclSystemError;
    default: /* SHUNT_E_INVALID, SHUNT_E_UNFIT, SHUNT_E_CUDA */
      return ncclInternalError;
  }
}

static ncclResult_t failed(struct shunt_comm* c, const struct shunt_plan* plan, int r, const char* msg) {
  SHUNT_WARN("rank %d: plan %s failed: %s", c->rank, plan->name, msg);
  ncclResult_t err = shunt_nccl_result(r);
  atomic_store(&c->async_error, (int)err);
  return err;
}

ncclResult_t shunt_launch(struct shunt_comm* c, const struct shunt_call* call,
                          const struct shunt_split* split) {
  const struct shunt_plan* plan = call->entry->plan;
  struct shunt_backend* b = shunt_launch_backend(c, call->on_gpu, call->device);
  if (!b) {
    SHUNT_WARN("out of memory for the %s backend", call->on_gpu ? "GPU" : "host");
    return shunt_nccl_result(SHUNT_E_NOMEM);
  }
  struct shunt_backend_call bc = {.plan = plan,
                                  .split = split,
                                  .in = call->send,
                                  .out = call->recv,
                                  .stream = (void*)call->stream,
                                  .scalar = call->scalar_ptr ? call->scalar_ptr : call->scalar,
                                  .scalar_on_device = call->scalar_ptr != NULL};
  char msg[4096];
  /* Collective: every rank split the call the same way at selection and grows at the same
   * call. */
  int r = shunt_backend_prepare(b, plan, split, msg, sizeof(msg));
  if (r == SHUNT_OK) r = shunt_backend_run(b, &bc, msg, sizeof(msg));
  return r == SHUNT_OK ? ncclSuccess : failed(c, plan, r, msg);
}

ncclResult_t shunt_launch_poll(struct shunt_comm* c) {
  struct shunt_backend* b = atomic_load(&c->gpu);
  if (!b || atomic_load(&c->async_error) != ncclSuccess) return (ncclResult_t)atomic_load(&c->async_error);
  char msg[2048];
  int r = shunt_backend_check(b, msg, sizeof(msg));
  if (r != SHUNT_OK) {
    int expected = ncclSuccess;
    if (atomic_compare_exchange_strong(&c->async_error, &expected, (int)shunt_nccl_result(r)))
      SHUNT_WARN("rank %d: a plan on the GPU failed: %s", c->rank, msg);
  }
  return (ncclResult_t)atomic_load(&c->async_error);
}

void shunt_launch_abort(struct shunt_comm* c, bool gpu) {
  shunt_backend_abort(atomic_load(&c->host));
  if (gpu) shunt_backend_abort(atomic_load(&c->gpu));
}

void shunt_launch_release(struct shunt_comm* c) {
  shunt_backend_release(atomic_exchange(&c->host, NULL));
  shunt_backend_release(atomic_exchange(&c->gpu, NULL));
}
