/* World setup: one shared region per rank, exchanged by name over the caller's bootstrap. */
#include "transport/world.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/proxy.h"
#include "util/log.h"

struct announce {
  char name[SHUNT_SHM_NAME_MAX];
  uint64_t bytes;
  struct shunt_world_config cfg;
};

static size_t page_up(uint64_t x) {
  return (size_t)((x + 4095) & ~(uint64_t)4095);
}

static size_t sem_bytes(uint32_t nranks) {
  return page_up((uint64_t)2 * nranks * SHUNT_WORLD_MAX_ORDINAL * sizeof(uint64_t));
}

static void layout(struct shunt_world* w, uint32_t r) {
  char* b = w->regions[r].base;
  size_t off = sem_bytes(w->nranks);
  w->peers[r].inbound = (_Atomic uint64_t*)b;
  w->peers[r].scratch = b + off;
  off += page_up(w->cfg.scratch_bytes);
  w->peers[r].input = b + off;
  off += page_up(w->cfg.input_bytes);
  w->peers[r].output = b + off;
}

static void release(struct shunt_world* w) {
  if (w->proxy) shunt_proxy_stop(w->proxy);
  if (w->backend && w->backend_free) w->backend_free(w->backend);
  if (w->regions)
    for (uint32_t r = 0; r < w->nranks; r++) shunt_shm_close(&w->regions[r]);
  free(w->regions);
  free(w->peers);
  free(w->expected);
  free(w);
}

int shunt_world_create(uint32_t rank, uint32_t nranks, const struct shunt_world_config* cfg,
                       const struct shunt_world_exchange* bs, struct shunt_world** out, char* err,
                       size_t len) {
  *out = NULL;
  if (nranks == 0 || rank >= nranks || nranks > 65535) {
    snprintf(err, len, "rank %u of %u is not valid", rank, nranks);
    return -1;
  }
  struct shunt_world* w = calloc(1, sizeof(*w));
  if (!w) {
    snprintf(err, len, "out of memory");
    return -1;
  }
  w->rank = rank;
  w->nranks = nranks;
  w->cfg = *cfg;
  w->bs = *bs;
  atomic_init(&w->epoch, 0);
  atomic_init(&w->broken, false);
  size_t nsem = sem_bytes(nranks) / sizeof(uint64_t);
  w->regions = calloc(nranks, sizeof(*w->regions));
  w->peers = calloc(nranks, sizeof(*w->peers));
  w->expected = calloc(nsem, sizeof(*w->expected));
  struct announce* all = calloc(nranks, sizeof(*all));
  if (!w->regions || !w->peers || !w->expected || !all) {
    snprintf(err, len, "out of memory");
    free(all);
    release(w);
    return -1;
  }
  uint64_t bytes = sem_bytes(nranks) + page_up(cfg->scratch_bytes) + page_up(cfg->input_bytes) +
                   page_up(cfg->output_bytes);
  int rc = shunt_shm_create(&w->regions[rank], bytes, err, len);
  struct announce* me = &all[rank];
  if (rc == 0) {
    snprintf(me->name, sizeof(me->name), "%s", w->regions[rank].name);
    me->bytes = bytes;
    me->cfg = *cfg;
  }
  /* Everyone takes part in the exchange even after a local failure, so no peer hangs. */
  if (bs->allgather(bs->ctx, all, sizeof(*all)) != 0) {
    if (rc == 0) snprintf(err, len, "bootstrap allgather failed");
    rc = -1;
  }
  for (uint32_t r = 0; r < nranks && rc == 0; r++) {
    if (!all[r].name[0]) {
      snprintf(err, len, "rank %u could not create its shared region", r);
      rc = -1;
    } else if (memcmp(&all[r].cfg, cfg, sizeof(*cfg)) != 0) {
      snprintf(err, len, "rank %u asked for different world sizes than rank %u", r, rank);
      rc = -1;
    } else if (r != rank) {
      rc = shunt_shm_open(&w->regions[r], all[r].name, all[r].bytes, err, len);
    }
    if (rc == 0) layout(w, r);
  }
  if (bs->barrier(bs->ctx) != 0 && rc == 0) {
    snprintf(err, len, "bootstrap barrier failed");
    rc = -1;
  }
  if (w->regions[rank].base) shunt_shm_unlink(w->regions[rank].name);
  free(all);
  if (rc == 0 && shunt_proxy_start(w, &w->proxy, err, len) != 0) rc = -1;
  if (rc != 0) {
    release(w);
    return -1;
  }
  SHUNT_INFO(SHUNT_ALLOC, "world rank %u/%u: shared region %llu bytes (scratch %llu, staging %llu + %llu)",
             rank, nranks, (unsigned long long)bytes, (unsigned long long)cfg->scratch_bytes,
             (unsigned long long)cfg->input_bytes, (unsigned long long)cfg->output_bytes);
  *out = w;
  return 0;
}

void shunt_world_release(struct shunt_world* w) {
  if (w) release(w);
}

void shunt_world_destroy(struct shunt_world* w) {
  if (!w) return;
  if (w->proxy) shunt_proxy_stop(w->proxy);
  w->proxy = NULL;
  /* No peer may still touch our region when it goes away. */
  w->bs.barrier(w->bs.ctx);
  release(w);
}

int shunt_world_agree(const struct shunt_world_exchange* bs, uint32_t rank, uint32_t nranks, bool local_ok,
                      uint8_t* ok, char* err, size_t len) {
  memset(ok, 0, nranks);
  ok[rank] = local_ok ? 1 : 0;
  int rc = local_ok ? 0 : -1;
  if (bs->allgather(bs->ctx, ok, 1) != 0) {
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
