/* Reading the caller's ncclConfig_t without ever writing it or reading past its end. */
#ifndef SHUNT_API_CONFIG_H
#define SHUNT_API_CONFIG_H

#include <nccl.h>
#include <stddef.h>

/* config->blocking when the caller's struct is initialised and reaches that field and the
 * field is set; otherwise dflt. */
static inline int shunt_config_blocking(const ncclConfig_t* config, int dflt) {
  if (!config || config->magic != 0xcafebeef || config->size < offsetof(ncclConfig_t, blocking) + sizeof(int) ||
      config->blocking == NCCL_CONFIG_UNDEF_INT)
    return dflt;
  return config->blocking != 0;
}

#endif
