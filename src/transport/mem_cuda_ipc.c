/* The CUDA IPC row of the memory table (mem.h) over transport/cuda_ipc.h: a rank's device
 * region, made by its world, described by its card; a peer of the same process by its
 * pointer, of another process by an IPC mapping. Called in the device's context. */
#include "transport/cuda_ipc.h"
#include "transport/mem.h"

static int ipc_open(const struct shunt_mem_env* env, char** base, uint64_t bytes, void* card, char* err,
                    size_t len) {
  (void)bytes, (void)err, (void)len;
  shunt_cuda_peer_describe(env->cu, env->device, *base, card);
  return 0;
}

static int ipc_map(const struct shunt_mem_env* env, uint32_t rank, const void* mine, uint32_t r,
                   const void* theirs, char** base, uint32_t* how, char* err, size_t len) {
  bool ipc = false;
  int rc = shunt_cuda_peer_map(env->cu, rank, mine, r, theirs, base, &ipc, err, len);
  *how = ipc;
  return rc;
}

static void ipc_unmap(const struct shunt_mem_env* env, char* base, uint32_t how, const void* theirs) {
  (void)theirs;
  shunt_cuda_peer_unmap(env->cu, base, how != 0);
}

static void ipc_sealed(const struct shunt_mem_env* env, const void* mine) {
  (void)env, (void)mine;
}

/* The region is its world's allocation: freed by it. */
static void ipc_close(const struct shunt_mem_env* env, char* base, const void* mine) {
  (void)env, (void)base, (void)mine;
}

const struct shunt_mem_ops shunt_mem_cuda_ipc = {
    "cuda_ipc", sizeof(struct shunt_cuda_peer), ipc_open, ipc_map, ipc_unmap, ipc_sealed, ipc_close};
