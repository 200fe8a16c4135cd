#include "api/coll_config.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "shunt/shunt.h"
#include "util/log.h"

/* The layout of NCCL 2.32's ncclCollConfig_t (2.31's is the same without the last field).
 * Read through this mirror rather than the build's type, which older headers lack or have
 * shorter; the struct only ever grows at its end. */
struct coll_config_v23200 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  ncclConfigExt_t* ext;
  int minCTAs, maxCTAs, nvlsCTAs, cgaClusterSize;
  const char* algSelection;
  int forceAlgSelection;
  int CTAPolicy;
  uint64_t userProfilerTag;
  void* launchCompletionEvent;
};
#if !SHUNT_NCCL_HEADERS_BEFORE(2, 32, 0) || SHUNT_NCCL_HEADERS_BEFORE(2, 31, 0)
_Static_assert(offsetof(struct coll_config_v23200, launchCompletionEvent) ==
                   offsetof(ncclCollConfig_t, launchCompletionEvent),
               "ncclCollConfig_t's layout");
#endif
_Static_assert(offsetof(struct coll_config_v23200, algSelection) == offsetof(ncclCollConfig_t, algSelection),
               "ncclCollConfig_t's layout");

/* The caller's struct reaches the whole of `field`. */
#define HAS(cfg, field) ((cfg)->size >= offsetof(struct coll_config_v23200, field) + sizeof((cfg)->field))

/* A list longer than this is taken to be circular (NCCL requires it not to be). */
#define MAX_EXT 256

/* algSelection in NCCL_ALGO's syntax: a comma list of algorithm names, all excluded when it
 * starts with '^'. "shunt" names shunt's plans. A list that includes only NCCL algorithms,
 * or excludes shunt, sends the call to NCCL. */
static const char* selection_verdict(const char* sel) {
  if (!sel || !*sel) return NULL;
  const char* p = sel;
  while (*p == ' ') p++;
  int exclude = *p == '^';
  if (exclude) p++;
  int names_shunt = 0;
  while (*p) {
    while (*p == ',' || *p == ' ') p++;
    size_t n = strcspn(p, ", ");
    if (n == 5 && strncasecmp(p, "shunt", 5) == 0) names_shunt = 1;
    p += n;
  }
  if (exclude) return names_shunt ? "algSelection excludes shunt" : NULL;
  return names_shunt ? NULL : "algSelection names only NCCL algorithms";
}

ncclResult_t shunt_coll_opts_read(const char* fn, const ncclCollConfig_t* config,
                                  struct shunt_coll_opts* out) {
  memset(out, 0, sizeof(*out));
  if (!config) return ncclSuccess;
  const struct coll_config_v23200* cfg = (const struct coll_config_v23200*)(const void*)config;
  if (cfg->size < offsetof(struct coll_config_v23200, ext) || cfg->magic != 0xcafebeef) {
    SHUNT_WARN("%s: the ncclCollConfig_t is not initialised (use NCCL_COLLCONFIG_INITIALIZER)", fn);
    return ncclInvalidArgument;
  }
  if (HAS(cfg, algSelection)) out->to_nccl = selection_verdict(cfg->algSelection);
  if (HAS(cfg, launchCompletionEvent)) out->completion_event = cfg->launchCompletionEvent;
  if (!HAS(cfg, ext)) return ncclSuccess;
  int n = 0;
  for (const ncclConfigExt_t* e = cfg->ext; e; e = e->next) {
    if (++n > MAX_EXT) {
      SHUNT_WARN("%s: the ncclCollConfig_t's extension list has more than %d entries (circular?)", fn,
                 MAX_EXT);
      return ncclInvalidArgument;
    }
    if (e->key.vendorId != SHUNT_CONFIG_VENDOR_ID) continue; /* another vendor's */
    switch (e->key.optionId) {
      case SHUNT_CONFIG_PLAN:
        if (!e->val.s || !*e->val.s) {
          SHUNT_WARN("%s: shunt's plan option (SHUNT_CONFIG_PLAN) needs a plan name in val.s", fn);
          return ncclInvalidArgument;
        }
        out->only_plan = e->val.s;
        break;
      case SHUNT_CONFIG_NO_PLANS:
        if (e->val.i) out->to_nccl = "the call's config forbids plans";
        break;
      default:
        SHUNT_WARN(
            "%s: unknown shunt option %d in the ncclCollConfig_t's extensions (known: %d plan name, %d no "
            "plans)",
            fn, e->key.optionId, SHUNT_CONFIG_PLAN, SHUNT_CONFIG_NO_PLANS);
        return ncclInvalidArgument;
    }
  }
  return ncclSuccess;
}
