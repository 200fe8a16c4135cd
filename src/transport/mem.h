/* Memory reach: how a rank maps the region of a rank of its own host, so that its copies and
 * flags are plain loads and stores. A table, one row per kind of region: POSIX shared memory
 * (the host backend), CUDA IPC (the GPU backend), plain pointers (the CPU-built kernel, whose
 * ranks are threads of one process).
 *
 * Promises of every row: open makes or describes this rank's region and fills its card
 * (card_bytes, published through the exchange); map gives a peer's region as
 * this process sees it, from its card, or an error naming both ranks; unmap undoes one map;
 * sealed is told once every rank has mapped what it will (no later map comes); close undoes
 * open. Nothing is set up per call. */
#ifndef SHUNT_TRANSPORT_MEM_H
#define SHUNT_TRANSPORT_MEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What a row needs of its user: the CUDA driver table and device (cuda_ipc), NULL otherwise. */
struct shunt_mem_env {
  const struct shunt_cu* cu;
  int device;
};

struct shunt_mem_ops {
  const char* name;
  size_t card_bytes; /* what a rank publishes: its region as its peers map it */
  /* *base: the region of `bytes` when the caller made it (cuda_ipc, plain), NULL when the row
   * makes it (shm); the region on return. */
  int (*open)(const struct shunt_mem_env* env, char** base, uint64_t bytes, void* card, char* err,
              size_t len);
  /* Rank r's region from its card (mine: this rank's card). *how: what unmap needs to know. */
  int (*map)(const struct shunt_mem_env* env, uint32_t rank, const void* mine, uint32_t r, const void* theirs,
             char** base, uint32_t* how, char* err, size_t len);
  void (*unmap)(const struct shunt_mem_env* env, char* base, uint32_t how, const void* theirs);
  void (*sealed)(const struct shunt_mem_env* env, const void* mine);
  void (*close)(const struct shunt_mem_env* env, char* base, const void* mine);
};

extern const struct shunt_mem_ops shunt_mem_shm;      /* mem_shm.c */
extern const struct shunt_mem_ops shunt_mem_cuda_ipc; /* mem_cuda_ipc.c */
extern const struct shunt_mem_ops shunt_mem_plain;    /* mem_plain.c */

#endif
