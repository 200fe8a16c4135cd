/* Reading a caller's ncclCollConfig_t (the per-call configuration of NCCL 2.32's *Config
 * collectives) without writing it or reading past its end.
 *
 * Promises: only fields inside the caller's `size` are read, so a struct from older headers
 * (smaller) or newer ones (larger, fields appended) is read correctly; the caller's struct
 * is never changed and is what NCCL receives. */
#ifndef SHUNT_API_COLL_CONFIG_H
#define SHUNT_API_COLL_CONFIG_H

#include <nccl.h>

#include "fallback/nccl_compat.h"

struct shunt_coll_opts {
  const char* to_nccl;    /* non-NULL: the config sends the call to NCCL; the reason */
  const char* only_plan;  /* non-NULL: only the plan of this name may serve the call */
  void* completion_event; /* cudaEvent_t recorded once shunt's work for the call is launched */
};

/* Reads config (NULL: defaults) for the call named fn. Returns ncclSuccess, or
 * ncclInvalidArgument with a WARN when the struct is not initialised or one of shunt's own
 * options is not valid. */
ncclResult_t shunt_coll_opts_read(const char* fn, const ncclCollConfig_t* config,
                                  struct shunt_coll_opts* out);

#endif
