/* Opening libibverbs (ibv.h). */
#include "transport/ibv.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "util/env.h"
#include "util/log.h"
#include "util/status.h"

/* One table per process, filled once under the lock: every communicator shares the library,
 * and dlopen's own reference counting would not make a half-filled table safe to read. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shunt_ibv g_ibv;
static int g_state; /* 0 not tried, 1 loaded, -1 failed */
static char g_why[256];

static int resolve(void* h, void** slot, const char* name) {
  *slot = dlsym(h, name);
  if (*slot) return 0;
  snprintf(g_why, sizeof(g_why), "%s has no %s", g_ibv.path, name);
  return -1;
}

static int load(void) {
  const char* path = shunt_env_str("SHUNT_IB_LIB", NULL);
  g_ibv.path = path ? path : "libibverbs.so.1";
  void* h = dlopen(g_ibv.path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(g_why, sizeof(g_why), "cannot open %s: %s", g_ibv.path, dlerror());
    return SHUNT_E_NET;
  }
  struct {
    void** slot;
    const char* name;
  } const syms[] = {
      {(void**)&g_ibv.get_device_list, "ibv_get_device_list"},
      {(void**)&g_ibv.free_device_list, "ibv_free_device_list"},
      {(void**)&g_ibv.get_device_name, "ibv_get_device_name"},
      {(void**)&g_ibv.open_device, "ibv_open_device"},
      {(void**)&g_ibv.close_device, "ibv_close_device"},
      {(void**)&g_ibv.query_device, "ibv_query_device"},
      {(void**)&g_ibv.query_port, "ibv_query_port"},
      {(void**)&g_ibv.query_gid, "ibv_query_gid"},
      {(void**)&g_ibv.alloc_pd, "ibv_alloc_pd"},
      {(void**)&g_ibv.dealloc_pd, "ibv_dealloc_pd"},
      {(void**)&g_ibv.reg_mr, "ibv_reg_mr"},
      {(void**)&g_ibv.dereg_mr, "ibv_dereg_mr"},
      {(void**)&g_ibv.create_cq, "ibv_create_cq"},
      {(void**)&g_ibv.destroy_cq, "ibv_destroy_cq"},
      {(void**)&g_ibv.create_qp, "ibv_create_qp"},
      {(void**)&g_ibv.modify_qp, "ibv_modify_qp"},
      {(void**)&g_ibv.destroy_qp, "ibv_destroy_qp"},
  };
  for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++)
    if (resolve(h, syms[i].slot, syms[i].name) != 0) {
      dlclose(h);
      return SHUNT_E_NET;
    }
  g_ibv.reg_dmabuf_mr = (struct ibv_mr * (*)(struct ibv_pd*, uint64_t, size_t, uint64_t, int, int))
      dlsym(h, "ibv_reg_dmabuf_mr");
  SHUNT_INFO(SHUNT_NET, "verbs: opened %s%s", g_ibv.path,
             g_ibv.reg_dmabuf_mr ? "" : " (no ibv_reg_dmabuf_mr)");
  return 0;
}

const struct shunt_ibv* shunt_ibv_get(char* err, size_t len) {
  pthread_mutex_lock(&g_lock);
  if (g_state == 0) g_state = load() == 0 ? 1 : -1;
  int state = g_state;
  if (state < 0 && err && len) snprintf(err, len, "%s", g_why);
  pthread_mutex_unlock(&g_lock);
  return state > 0 ? &g_ibv : NULL;
}

const char* shunt_ibv_status_str(int status) {
  /* The names of enum ibv_wc_status, in its order. */
  static const char* const names[] = {"success",
                                      "local length error",
                                      "local QP operation error",
                                      "local EEC operation error",
                                      "local protection error",
                                      "work request flushed",
                                      "memory window bind error",
                                      "bad response",
                                      "local access error",
                                      "remote invalid request",
                                      "remote access error",
                                      "remote operation error",
                                      "transport retry counter exceeded",
                                      "RNR retry counter exceeded",
                                      "local RDD violation",
                                      "remote invalid RD request",
                                      "remote aborted",
                                      "invalid EECN",
                                      "invalid EEC state",
                                      "fatal error",
                                      "response timeout",
                                      "general error",
                                      "tag matching error",
                                      "tag matching rendezvous error"};
  if (status >= 0 && (size_t)status < sizeof(names) / sizeof(names[0])) return names[status];
  return "unknown status";
}
