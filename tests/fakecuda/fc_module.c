/* The stand-in's modules and kernel launches (fake_cuda.h): any image loads (nothing in it is
 * read); shunt's kernels are found by name and run by their CPU build (exec/kcpu); loading is
 * lazy unless CUDA_MODULE_LOADING=EAGER (README.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/gpu/gpu_abi.h"
#include "exec/kcpu/kcpu_kernel.h"
#include "exec/ops/dtype.h"
#include "fake_cuda.h"

/* A loaded module: its kernels, each loaded into the context at module load (EAGER) or when
 * first fetched or launched (LAZY, the default since CUDA 12.2). Function handles are the
 * addresses of funcs[k]. Modules are never freed: a handle stays recognisable. */
static const char* const names[] = {NULL,
                                    "shunt_gpu_exec_kernel",
                                    "shunt_gpu_pre_kernel",
                                    "shunt_gpu_post_kernel",
                                    "shunt_bench_empty",
                                    "shunt_gpu_check_kernel"};
struct fc_module {
  int device;
  char funcs[6];
  bool loaded[6];
  struct fc_module* next;
};
static pthread_mutex_t mod_mu = PTHREAD_MUTEX_INITIALIZER;
static struct fc_module* modules;
static long exec_launches;

/* The module holding function handle f and its kernel, or NULL. */
static struct fc_module* module_of(const void* f, enum fc_kernel* k) {
  pthread_mutex_lock(&mod_mu);
  struct fc_module* m = modules;
  for (; m; m = m->next)
    if ((const char*)f >= m->funcs + FC_K_EXEC && (const char*)f <= m->funcs + FC_K_CHECK) break;
  pthread_mutex_unlock(&mod_mu);
  if (m && k) *k = (enum fc_kernel)((const char*)f - m->funcs);
  return m;
}

static enum fc_kernel kind_of(const void* f) {
  enum fc_kernel k = 0;
  return module_of(f, &k) ? k : 0;
}

static bool eager(void) {
  const char* v = getenv("CUDA_MODULE_LOADING");
  return v && !strcmp(v, "EAGER");
}

/* Loading a kernel into the context: the context lock, held until the work already queued in
 * the context has run, as the driver does (the deadlock lazy loading is known for). */
static void load(struct fc_module* m, int k) {
  pthread_mutex_lock(&mod_mu);
  bool done = m->loaded[k];
  pthread_mutex_unlock(&mod_mu);
  if (done) return;
  fc_ctx_enter(m->device, true);
  pthread_mutex_lock(&mod_mu);
  m->loaded[k] = true;
  pthread_mutex_unlock(&mod_mu);
  fc_ctx_leave(m->device);
}

void fc_func_load(void* f) {
  enum fc_kernel k = 0;
  struct fc_module* m = module_of(f, &k);
  if (m) load(m, k);
}

FC_EXPORT int cuModuleLoadData(void** mod, const void* image) {
  struct fc_ctx* c = fc_current();
  if (!c) return FC_ERROR_INVALID_CONTEXT;
  if (!image) return FC_ERROR_INVALID_IMAGE;
  struct fc_module* m = calloc(1, sizeof(*m));
  if (!m) return FC_ERROR_OUT_OF_MEMORY;
  m->device = c->device;
  /* A module load takes the context lock; an eager one loads every kernel now. */
  fc_ctx_enter(c->device, false);
  pthread_mutex_lock(&mod_mu);
  m->next = modules;
  modules = m;
  pthread_mutex_unlock(&mod_mu);
  if (eager())
    for (int k = FC_K_EXEC; k <= FC_K_CHECK; k++) load(m, k);
  fc_ctx_leave(c->device);
  *mod = m;
  return FC_SUCCESS;
}

/* Under lazy loading, fetching a kernel loads it (as the driver's cuModuleGetFunction does). */
FC_EXPORT int cuModuleGetFunction(void** f, void* mod, const char* name) {
  pthread_mutex_lock(&mod_mu);
  struct fc_module* m = modules;
  while (m && m != mod) m = m->next;
  pthread_mutex_unlock(&mod_mu);
  if (!m) return FC_ERROR_INVALID_HANDLE;
  for (int k = FC_K_EXEC; k <= FC_K_CHECK; k++)
    if (!strcmp(name, names[k])) {
      load(m, k);
      *f = &m->funcs[k];
      return FC_SUCCESS;
    }
  return FC_ERROR_NOT_FOUND;
}

FC_EXPORT int cuFuncGetAttribute(int* v, int attr, void* f) {
  if (!kind_of(f)) return FC_ERROR_INVALID_HANDLE;
  if (attr != 0 /* max threads per block */) return FC_ERROR_INVALID_VALUE;
  *v = (int)SHUNT_GPU_MAX_THREADS;
  return FC_SUCCESS;
}

/* 16 blocks per multiprocessor of at most FAKECUDA_MAX_THREADS threads; none larger. */
FC_EXPORT int cuOccupancyMaxActiveBlocksPerMultiprocessor(int* n, void* f, int threads, size_t smem) {
  (void)smem;
  if (!kind_of(f)) return FC_ERROR_INVALID_HANDLE;
  *n = threads > 0 && threads <= fc_max_threads() ? 16 : 0;
  return FC_SUCCESS;
}

int fc_launch_pack(void* f, unsigned blocks, unsigned threads, unsigned smem, void** params,
                   struct fc_launch* out) {
  enum fc_kernel k = kind_of(f);
  if (k == FC_K_EMPTY) {
    memset(out, 0, sizeof(*out));
    out->kind = k;
    return FC_SUCCESS;
  }
  if (!k || !params || blocks == 0 || threads == 0 || threads > SHUNT_GPU_MAX_THREADS)
    return FC_ERROR_INVALID_VALUE;
  memset(out, 0, sizeof(*out));
  out->kind = k;
  out->blocks = blocks;
  out->threads = threads;
  out->smem = smem;
  unsigned char* a = out->args;
  switch (k) {
    case FC_K_EXEC:
      memcpy(a, params[0], sizeof(struct shunt_gpu_kargs));
      break;
    case FC_K_PRE: /* (char* dst, const char* src, uint64_t n, struct shunt_red red) */
      memcpy(a, params[0], sizeof(char*));
      memcpy(a + 8, params[1], sizeof(char*));
      memcpy(a + 16, params[2], sizeof(uint64_t));
      memcpy(a + 24, params[3], sizeof(struct shunt_red));
      break;
    case FC_K_POST: /* (char* buf, uint64_t n, struct shunt_red red) */
      memcpy(a, params[0], sizeof(char*));
      memcpy(a + 16, params[1], sizeof(uint64_t));
      memcpy(a + 24, params[2], sizeof(struct shunt_red));
      break;
    case FC_K_EMPTY:
      break;
    case FC_K_CHECK: /* (const float* out, uint64_t n, uint64_t per, uint32_t nranks, uint32_t ag, u64* first)
                      */
      memcpy(a, params[0], sizeof(char*));
      memcpy(a + 8, params[1], sizeof(uint64_t));
      memcpy(a + 16, params[2], sizeof(uint64_t));
      memcpy(a + 24, params[3], sizeof(uint32_t));
      memcpy(a + 28, params[4], sizeof(uint32_t));
      memcpy(a + 32, params[5], sizeof(void*));
      break;
  }
  return FC_SUCCESS;
}

int fc_launch_run(void** runner, const struct fc_launch* l, char* err, size_t len) {
  if (l->kind == FC_K_EMPTY) return 0;
  if (l->kind == FC_K_CHECK) {
    if (!*runner && shunt_kcpu_device_create((struct shunt_kcpu_device**)runner, err, len) != 0) return -1;
    const float* out;
    uint64_t n, per;
    uint32_t nr, ag;
    unsigned long long* first;
    memcpy(&out, l->args, sizeof(out));
    memcpy(&n, l->args + 8, sizeof(n));
    memcpy(&per, l->args + 16, sizeof(per));
    memcpy(&nr, l->args + 24, sizeof(nr));
    memcpy(&ag, l->args + 28, sizeof(ag));
    memcpy(&first, l->args + 32, sizeof(first));
    struct shunt_kcpu_grid small = {1, 4, 0, 0};
    return shunt_kcpu_check(*runner, out, n, per, nr, ag, first, &small, err, len);
  }
  if (!*runner && shunt_kcpu_device_create((struct shunt_kcpu_device**)runner, err, len) != 0) return -1;
  struct shunt_kcpu_device* d = *runner;
  const unsigned char* a = l->args;
  char *dst, *src;
  uint64_t n;
  struct shunt_red red;
  memcpy(&dst, a, sizeof(dst));
  memcpy(&src, a + 8, sizeof(src));
  memcpy(&n, a + 16, sizeof(n));
  memcpy(&red, a + 24, sizeof(red));
  /* The scaling kernels stride over the grid: a small one computes the same. */
  struct shunt_kcpu_grid small = {1, 4, 0, 0};
  if (l->kind == FC_K_PRE) return shunt_kcpu_pre(d, dst, src, n, red, &small, err, len);
  if (l->kind == FC_K_POST) return shunt_kcpu_post(d, dst, n, red, &small, err, len);
  struct shunt_gpu_kargs k;
  memcpy(&k, a, sizeof(k));
  long nth = __atomic_add_fetch(&exec_launches, 1, __ATOMIC_RELAXED);
  int fault = fc_fault_for(nth);
  if (fault == 's') return 0; /* the launch that never ran: its signals never come */
  unsigned t = l->threads < (unsigned)fc_run_threads() ? l->threads : (unsigned)fc_run_threads();
  struct shunt_kcpu_grid g = {l->blocks, t, 0, l->smem};
  int rc = shunt_kcpu_exec(d, &k, &g, err, len);
  if (rc == 0 && fault == 'c' && k.out && k.prog) {
    /* One byte of this rank's result, flipped once the kernel is done. */
    k.out[0] ^= 0x5a;
  }
  return rc;
}

void fc_runner_free(void* runner) {
  if (runner) shunt_kcpu_device_destroy(runner);
}

/* Device reads of mapped host memory by the executor kernels run so far (each a PCIe round trip
 * on a GPU), and executor launches: what a test or a measurement divides per call. */
FC_EXPORT long long fakecuda_pcie_reads(void) {
  return shunt_kcpu_pcie_reads();
}
FC_EXPORT long fakecuda_exec_launches(void) {
  return __atomic_load_n(&exec_launches, __ATOMIC_RELAXED);
}

/* FAKECUDA_STATS=1: both counts on stderr when the process ends, for measurements of programs
 * that do not ask (shunt-perf). */
static void stats_at_exit(void) {
  fprintf(stderr, "fakecuda: %lld device reads of mapped host memory in %ld executor launches\n",
          fakecuda_pcie_reads(), fakecuda_exec_launches());
}
__attribute__((constructor)) static void stats_init(void) {
  const char* v = getenv("FAKECUDA_STATS");
  if (v && *v == '1') atexit(stats_at_exit);
}
