/* Finding and loading the real libnccl.so.2 without ever picking shunt itself. */
#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fallback/real_nccl.h"
#include "util/env.h"
#include "util/log.h"
#include "util/status.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SHUNT_DEEPBIND 0 /* the sanitizers' runtimes refuse RTLD_DEEPBIND */
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SHUNT_DEEPBIND 0
#endif
#endif
#ifndef SHUNT_DEEPBIND
#define SHUNT_DEEPBIND RTLD_DEEPBIND
#endif

/* Written once under load_once, then only read: the table pointer is published last. */
const struct shunt_real_nccl* _Atomic shunt_real_nccl_table;
static struct shunt_real_nccl real;
static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static char load_error[4096];
static char real_path[PATH_MAX];

/* Accumulates "path: reason" for every candidate, for the final WARN. */
struct tries {
  char text[3072];
  size_t len;
};

static void tried(struct tries* t, const char* path, const char* why) {
  if (t->len >= sizeof(t->text)) return;
  int n = snprintf(t->text + t->len, sizeof(t->text) - t->len, "%s%s: %s", t->len ? "; " : "", path, why);
  if (n > 0) t->len += (size_t)n;
  if (t->len > sizeof(t->text)) t->len = sizeof(t->text);
}

/* The file shunt itself was loaded from, identified by device and inode (names can lie:
 * shunt's soname is libnccl.so.2 and it may be reached through a link of that name). */
static int self_identity(dev_t* dev, ino_t* ino) {
  Dl_info info;
  struct stat st;
  if (!dladdr((void*)&shunt_real_nccl_load_slow, &info) || !info.dli_fname || stat(info.dli_fname, &st) != 0)
    return -1;
  *dev = st.st_dev;
  *ino = st.st_ino;
  return 0;
}

static int is_self(const char* path) {
  dev_t d;
  ino_t i;
  struct stat st;
  if (self_identity(&d, &i) != 0 || stat(path, &st) != 0) return 0;
  return st.st_dev == d && st.st_ino == i;
}

/* Opens one candidate; on success fills `real` and returns 0, else SHUNT_E_INVALID (not an NCCL
 * shunt may use) or SHUNT_E_SYSTEM (dlopen failed), the reason added to t. */
static int try_open(const char* path, struct tries* t) {
  struct stat st;
  if (stat(path, &st) != 0) {
    tried(t, path, "not found");
    return SHUNT_E_INVALID;
  }
  if (is_self(path)) {
    tried(t, path, "is shunt itself");
    return SHUNT_E_INVALID;
  }
  dlerror();
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL | SHUNT_DEEPBIND);
  if (!h) {
    const char* e = dlerror();
    tried(t, path, e ? e : "dlopen failed");
    return SHUNT_E_SYSTEM;
  }
  ncclResult_t (*getver)(int*) = (ncclResult_t(*)(int*))dlsym(h, "ncclGetVersion");
  Dl_info info;
  if (!getver) {
    tried(t, path, "does not define ncclGetVersion");
    dlclose(h);
    return SHUNT_E_INVALID;
  }
  if (dladdr((void*)getver, &info) && info.dli_fname && is_self(info.dli_fname)) {
    tried(t, path, "resolves to shunt itself");
    dlclose(h);
    return SHUNT_E_INVALID;
  }
  int version = 0;
  if (getver(&version) != ncclSuccess) {
    tried(t, path, "ncclGetVersion failed");
    dlclose(h);
    return SHUNT_E_INVALID;
  }
#define SHUNT_BIND_R(who, name, params, args) real.name = (ncclResult_t(*) params)dlsym(h, #name);
#define SHUNT_BIND_S(who, ret, name, params, args, fail) real.name = (ret(*) params)dlsym(h, #name);
#define SHUNT_BIND_V(who, name, params, args) real.name = (void(*) params)dlsym(h, #name);
  SHUNT_NCCL_ALL_FUNCS(SHUNT_BIND_R, SHUNT_BIND_S, SHUNT_BIND_V)
#undef SHUNT_BIND_R
#undef SHUNT_BIND_S
#undef SHUNT_BIND_V
  if (!realpath(path, real_path)) snprintf(real_path, sizeof(real_path), "%s", path);
  real.path = real_path;
  real.version = version;
  return 0;
}

/* An NCCL already in the process (e.g. shunt preloaded under another name while the
 * application linked the real one): reuse that file. */
struct find_loaded {
  struct tries* t;
  int found;
};

static int visit_loaded(struct dl_phdr_info* info, size_t size, void* data) {
  (void)size;
  struct find_loaded* f = data;
  const char* name = info->dlpi_name;
  if (f->found || !name || !*name || !strstr(name, "libnccl")) return 0;
  if (is_self(name)) return 0;
  if (try_open(name, f->t) == 0) f->found = 1;
  return 0;
}

static void append_dir_candidates(const char* dir, struct tries* t, int* ok) {
  static const char* const names[] = {"libnccl.so.2", "libnccl.so"};
  for (int i = 0; i < 2 && !*ok; i++) {
    char p[PATH_MAX];
    if (snprintf(p, sizeof(p), "%s/%s", dir, names[i]) >= (int)sizeof(p)) continue;
    struct stat st;
    if (stat(p, &st) != 0) continue; /* absent names are not worth listing */
    if (try_open(p, t) == 0) *ok = 1;
  }
}

static int search(struct tries* t) {
  struct find_loaded f = {t, 0};
  dl_iterate_phdr(visit_loaded, &f);
  if (f.found) return 0;
  int ok = 0;
  const char* ldp = getenv("LD_LIBRARY_PATH");
  if (ldp) {
    char buf[8192];
    snprintf(buf, sizeof(buf), "%s", ldp);
    char* save = NULL;
    for (char* d = strtok_r(buf, ":", &save); d && !ok; d = strtok_r(NULL, ":", &save)) append_dir_candidates(d, t, &ok);
  }
  const char* cuda_home = getenv("CUDA_HOME");
  char ch[2][PATH_MAX] = {"", ""};
  if (cuda_home) {
    snprintf(ch[0], sizeof(ch[0]), "%s/lib64", cuda_home);
    snprintf(ch[1], sizeof(ch[1]), "%s/lib", cuda_home);
  }
  const char* const dirs[] = {ch[0], ch[1], "/usr/local/cuda/lib64", "/usr/local/cuda/lib",
                              "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64",
                              "/usr/local/lib", "/usr/lib"};
  for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]) && !ok; i++)
    if (dirs[i][0]) append_dir_candidates(dirs[i], t, &ok);
  if (!ok && t->len == 0) tried(t, "(search of LD_LIBRARY_PATH, CUDA_HOME and system folders)", "no libnccl.so.2 found");
  return ok ? 0 : -1;
}

static void load(void) {
  struct tries t = {.len = 0};
  t.text[0] = '\0';
  const char* explicit_path = shunt_env_str("SHUNT_NCCL_LIB", "MSCCLPP_NCCL_LIB_PATH");
  int rc;
  if (explicit_path) {
    rc = try_open(explicit_path, &t);
  } else {
    rc = search(&t);
  }
  if (rc != 0) {
    snprintf(load_error, sizeof(load_error), "no usable real NCCL library (%s%s)",
             explicit_path ? "SHUNT_NCCL_LIB: " : "searched: ", t.text);
    SHUNT_WARN("%s", load_error);
    return;
  }
  SHUNT_INFO(SHUNT_INIT, "shunt %s; real NCCL %s version %d%s", SHUNT_VERSION, real.path, real.version,
             SHUNT_DEEPBIND ? "" : " (opened without RTLD_DEEPBIND)");
  shunt_real_nccl_table = &real;
}

const struct shunt_real_nccl* shunt_real_nccl_load_slow(void) {
  pthread_once(&load_once, load);
  return shunt_real_nccl_table;
}

const char* shunt_real_nccl_error(void) {
  pthread_once(&load_once, load);
  return load_error;
}

int shunt_real_nccl_deepbind(void) { return SHUNT_DEEPBIND != 0; }
