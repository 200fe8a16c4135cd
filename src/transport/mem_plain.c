/* The plain row of the memory table (mem.h): ranks are threads of one process, so a peer's
 * region is the address its card gives. */
#include <stdint.h>
#include <string.h>

#include "transport/mem.h"

static int plain_open(const struct shunt_mem_env* env, char** base, uint64_t bytes, void* card, char* err,
                      size_t len) {
  (void)env, (void)bytes, (void)err, (void)len;
  uint64_t a = (uint64_t)(uintptr_t)*base;
  memcpy(card, &a, sizeof(a));
  return 0;
}

static int plain_map(const struct shunt_mem_env* env, uint32_t rank, const void* mine, uint32_t r,
                     const void* theirs, char** base, uint32_t* how, char* err, size_t len) {
  (void)env, (void)rank, (void)mine, (void)r, (void)err, (void)len;
  uint64_t a;
  memcpy(&a, theirs, sizeof(a));
  *base = (char*)(uintptr_t)a;
  *how = 0;
  return 0;
}

static void plain_unmap(const struct shunt_mem_env* env, char* base, uint32_t how, const void* theirs) {
  (void)env, (void)base, (void)how, (void)theirs;
}

static void plain_sealed(const struct shunt_mem_env* env, const void* mine) {
  (void)env, (void)mine;
}

/* The region is its world's allocation: freed by it. */
static void plain_close(const struct shunt_mem_env* env, char* base, const void* mine) {
  (void)env, (void)base, (void)mine;
}

const struct shunt_mem_ops shunt_mem_plain = {"plain",     sizeof(uint64_t), plain_open, plain_map,
                                              plain_unmap, plain_sealed,     plain_close};
