/* The per-call configuration tests start from. */
#ifndef SHUNT_TESTS_COMMON_COLL_CONFIG_H
#define SHUNT_TESTS_COMMON_COLL_CONFIG_H

#include <string.h>

#include "fallback/nccl_compat.h"

/* A per-call configuration (ncclCollConfig_t) of this NCCL version with every field unset. */
static inline ncclCollConfig_t api_coll_config(void) {
  ncclCollConfig_t cfg;
  memset(&cfg, 0, sizeof(cfg));
  cfg.size = sizeof(cfg);
  cfg.magic = 0xcafebeef;
  cfg.version = NCCL_VERSION(2, 32, 3);
  cfg.minCTAs = cfg.maxCTAs = cfg.nvlsCTAs = cfg.cgaClusterSize = cfg.CTAPolicy = NCCL_CONFIG_UNDEF_INT;
  return cfg;
}

#endif
