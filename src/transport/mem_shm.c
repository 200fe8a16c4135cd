/* The shared-memory row of the memory table (mem.h): a region is a POSIX shared memory object
 * (transport/shm.h), mapped by name; the name goes once every rank has mapped it. */
#include <stdio.h>
#include <string.h>

#include "transport/mem.h"
#include "transport/shm.h"
#include "util/status.h"

struct shm_card {
  char name[SHUNT_SHM_NAME_MAX];
  uint64_t bytes;
};

static int shm_row_open(const struct shunt_mem_env* env, char** base, uint64_t bytes, void* card, char* err,
                        size_t len) {
  (void)env;
  struct shunt_shm s;
  SHUNT_TRY(shunt_shm_create(&s, (size_t)bytes, err, len));
  struct shm_card* c = card;
  snprintf(c->name, sizeof(c->name), "%s", s.name);
  c->bytes = bytes;
  *base = s.base;
  return 0;
}

static int shm_row_map(const struct shunt_mem_env* env, uint32_t rank, const void* mine, uint32_t r,
                       const void* theirs, char** base, uint32_t* how, char* err, size_t len) {
  (void)env, (void)rank, (void)mine, (void)r;
  const struct shm_card* c = theirs;
  struct shunt_shm s;
  *how = 0;
  SHUNT_TRY(shunt_shm_open(&s, c->name, (size_t)c->bytes, err, len));
  *base = s.base;
  return 0;
}

static void shm_row_unmap(const struct shunt_mem_env* env, char* base, uint32_t how, const void* theirs) {
  (void)env, (void)how;
  struct shunt_shm s = {.base = base, .bytes = (size_t)((const struct shm_card*)theirs)->bytes};
  shunt_shm_close(&s);
}

/* Every rank has mapped it: a crash from now on leaves nothing in /dev/shm. */
static void shm_row_sealed(const struct shunt_mem_env* env, const void* mine) {
  (void)env;
  shunt_shm_unlink(((const struct shm_card*)mine)->name);
}

static void shm_row_close(const struct shunt_mem_env* env, char* base, const void* mine) {
  shm_row_unmap(env, base, 0, mine);
}

const struct shunt_mem_ops shunt_mem_shm = {"shm",         sizeof(struct shm_card), shm_row_open, shm_row_map,
                                            shm_row_unmap, shm_row_sealed,          shm_row_close};
