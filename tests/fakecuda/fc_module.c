/* The stand-in's modules and kernel launches (fake_cuda.h): an image loads when it is a fat
 * binary, an ELF cubin or PTX text, and holds a kernel when the kernel's name is in it (as the
 * symbol table and PTX name them); shunt's kernels are then run by their CPU build (exec/kcpu).
 * A launch passes each of the kernel's declared parameters. Loading is lazy unless
 * CUDA_MODULE_LOADING=EAGER, and takes the context lock (README.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exec/gpu/gpu_abi.h"
#include "exec/kcpu/kcpu_kernel.h"
#include "exec/ops/dtype.h"
#include "fake_cuda.h"

static const char* const names[] = {NULL,
                                    "shunt_gpu_exec_kernel",
                                    "shunt_gpu_pre_kernel",
                                    "shunt_gpu_post_kernel",
                                    "shunt_bench_empty",
                                    "shunt_gpu_check_kernel"};
static long exec_launches;

/* A module belongs to the context it was loaded in, and dies with it (a primary context
 * released by everyone, or reset, is a new context); function handles are the addresses of
 * its `funcs`, one per kernel. Modules are never unloaded here: handles stay valid memory. */
struct fc_module {
  struct fc_ctx* ctx;
  unsigned long long ctx_id; /* the context's identity when loaded */
  int device;
  bool loaded[6];    /* each kernel loaded into the context yet (lazy loading) */
  const char* image; /* the caller's image, as the driver reads it at load */
  size_t bytes;      /* 0: any name (the "image" leniency) */
  char funcs[6];
};

/* Each kernel's parameters, as declared (gpu_kernel.cuh, the benchmark's empty kernel). */
static const int nparams[] = {0, 1 /* struct shunt_gpu_kargs */, 5, 3, 0, 6};

/* The image's length when it is one the driver loads, else 0: a fat binary (magic 0xba55ed50,
 * its header and payload sizes), an ELF cubin (its section headers end it), NUL-terminated PTX. */
static size_t image_bytes(const unsigned char* p) {
  uint32_t magic;
  memcpy(&magic, p, 4);
  if (magic == 0xba55ed50u) {
    uint16_t header;
    uint64_t payload;
    memcpy(&header, p + 6, 2);
    memcpy(&payload, p + 8, 8);
    return header + payload;
  }
  if (!memcmp(p, "\177ELF", 4) && p[4] == 2 /* 64-bit */) {
    uint64_t shoff;
    uint16_t shentsize, shnum;
    memcpy(&shoff, p + 0x28, 8);
    memcpy(&shentsize, p + 0x3a, 2);
    memcpy(&shnum, p + 0x3c, 2);
    return shoff + (uint64_t)shentsize * shnum;
  }
  size_t n = strlen((const char*)p);
  return strstr((const char*)p, ".version") && strstr((const char*)p, ".entry") ? n : 0;
}
#define MAX_MODULES 256
static pthread_mutex_t mod_mu = PTHREAD_MUTEX_INITIALIZER;
static struct fc_module* modules[MAX_MODULES];
static int nmodules;

static struct fc_module* module_of_func(const void* f, enum fc_kernel* kind) {
  pthread_mutex_lock(&mod_mu);
  struct fc_module* m = NULL;
  for (int i = 0; i < nmodules && !m; i++)
    if ((const char*)f >= modules[i]->funcs + FC_K_EXEC && (const char*)f <= modules[i]->funcs + FC_K_CHECK) {
      m = modules[i];
      *kind = (enum fc_kernel)((const char*)f - m->funcs);
    }
  pthread_mutex_unlock(&mod_mu);
  return m;
}

static enum fc_kernel kind_of(const void* f) {
  enum fc_kernel k = 0;
  return module_of_func(f, &k) ? k : 0;
}

/* Whether m's context is still the one it was loaded in. */
static bool module_alive(const struct fc_module* m) {
  return __atomic_load_n(&m->ctx->id, __ATOMIC_RELAXED) == m->ctx_id;
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
  struct fc_module* m = module_of_func(f, &k);
  if (m) load(m, k);
}

FC_EXPORT int cuModuleLoadData(void** mod, const void* image) {
  FC_NEED_CTX();
  if (!image) return FC_ERROR_INVALID_IMAGE;
  /* A build without nvcc carries a placeholder no driver loads; its tests name the leniency. */
  size_t bytes = fc_lenient("image") ? 0 : image_bytes(image);
  if (!bytes && !fc_lenient("image")) return FC_ERROR_INVALID_IMAGE;
  struct fc_module* m = calloc(1, sizeof(*m));
  if (!m) return FC_ERROR_OUT_OF_MEMORY;
  m->image = image;
  m->bytes = bytes;
  m->ctx = fc_current();
  m->device = m->ctx->device;
  m->ctx_id = __atomic_load_n(&m->ctx->id, __ATOMIC_RELAXED);
  /* A module load takes the context lock; an eager one loads every kernel now. */
  fc_ctx_enter(m->device, false);
  pthread_mutex_lock(&mod_mu);
  int ok = nmodules < MAX_MODULES;
  if (ok) modules[nmodules++] = m;
  pthread_mutex_unlock(&mod_mu);
  if (ok && eager())
    for (int k = FC_K_EXEC; k <= FC_K_CHECK; k++) load(m, k);
  fc_ctx_leave(m->device);
  if (!ok) {
    free(m);
    return FC_ERROR_OUT_OF_MEMORY;
  }
  *mod = m;
  return FC_SUCCESS;
}

static bool module_known(const void* mod) {
  pthread_mutex_lock(&mod_mu);
  bool hit = false;
  for (int i = 0; i < nmodules && !hit; i++) hit = modules[i] == mod;
  pthread_mutex_unlock(&mod_mu);
  return hit;
}

/* Under lazy loading, fetching a kernel loads it (as the driver's cuModuleGetFunction does). */
FC_EXPORT int cuModuleGetFunction(void** f, void* mod, const char* name) {
  FC_NEED_CTX();
  if (!module_known(mod) || !module_alive(mod)) return FC_ERROR_INVALID_HANDLE;
  struct fc_module* m = mod;
  if (m->bytes && !memmem(m->image, m->bytes, name, strlen(name))) return FC_ERROR_NOT_FOUND;
  for (int k = FC_K_EXEC; k <= FC_K_CHECK; k++)
    if (!strcmp(name, names[k])) {
      load(m, k); /* under lazy loading, fetching a kernel loads it, as the driver does */
      *f = &m->funcs[k];
      return FC_SUCCESS;
    }
  return FC_ERROR_NOT_FOUND;
}

int fc_func_usable(const void* f) {
  enum fc_kernel k = 0;
  struct fc_module* m = module_of_func(f, &k);
  if (!m) return FC_ERROR_INVALID_HANDLE;
  /* A function of a context that is gone, or launched from another context. */
  if (!module_alive(m) || m->ctx != fc_current()) return FC_ERROR_INVALID_HANDLE;
  return FC_SUCCESS;
}

FC_EXPORT int cuFuncGetAttribute(int* v, int attr, void* f) {
  FC_NEED_INIT();
  if (!kind_of(f)) return FC_ERROR_INVALID_HANDLE;
  if (attr != 0 /* max threads per block */) return FC_ERROR_INVALID_VALUE;
  *v = (int)SHUNT_GPU_MAX_THREADS;
  return FC_SUCCESS;
}

/* FC_BLOCKS_PER_SM (16) blocks per multiprocessor of at most FAKECUDA_MAX_THREADS threads; none larger. */
FC_EXPORT int cuOccupancyMaxActiveBlocksPerMultiprocessor(int* n, void* f, int threads, size_t smem) {
  (void)smem;
  FC_NEED_INIT();
  if (!kind_of(f)) return FC_ERROR_INVALID_HANDLE;
  *n = threads > 0 && threads <= fc_max_threads() ? FC_BLOCKS_PER_SM : 0;
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
  if (!k || blocks == 0 || threads == 0 || threads > SHUNT_GPU_MAX_THREADS) return FC_ERROR_INVALID_VALUE;
  /* Every declared parameter is read through its pointer: none may be missing. */
  if (!params) return FC_ERROR_INVALID_VALUE;
  for (int i = 0; i < nparams[k]; i++)
    if (!params[i]) return FC_ERROR_INVALID_VALUE;
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
    case FC_K_PRE: /* (char* dst, const char* src, uint64_t n, struct shunt_red red, const void* scalar) */
      memcpy(a, params[0], sizeof(char*));
      memcpy(a + 8, params[1], sizeof(char*));
      memcpy(a + 16, params[2], sizeof(uint64_t));
      memcpy(a + 24, params[3], sizeof(struct shunt_red));
      memcpy(a + 24 + sizeof(struct shunt_red), params[4], sizeof(void*));
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

/* An execution that ended well (no error recorded, no abort) has had every port trigger it
 * pushed completed by the proxy: the stream's next operation (a copy-out, the next call's
 * staging, the application's kernel) may overwrite a trigger's source, which a proxy still
 * serving it would read. shunt's own invariant (gpu_kernel.cuh drains the FIFO at the end),
 * checked where the stand-in sees the kernel end. */
static void check_drained(const struct shunt_gpu_kargs* k) {
  if (!k->port_used || !k->prog) return;
  const struct shunt_gpu_ctrl* ctrl = (const struct shunt_gpu_ctrl*)(k->region + k->lay.ctrl);
  if (__atomic_load_n(&ctrl->abort, __ATOMIC_ACQUIRE) || __atomic_load_n(&k->fifo->abort, __ATOMIC_ACQUIRE) ||
      __atomic_load_n(&k->fifo->error.code, __ATOMIC_ACQUIRE))
    return;
  uint64_t pushed = __atomic_load_n(&ctrl->fifo_head, __ATOMIC_ACQUIRE);
  uint64_t done = __atomic_load_n(&k->fifo->done, __ATOMIC_ACQUIRE);
  if (done >= pushed) return;
  fprintf(stderr,
          "fakecuda: rank %u's executor kernel ended with port triggers its proxy has not completed (%llu "
          "pushed, %llu complete): the stream moves on while the proxy may still read their sources\n",
          k->rank, (unsigned long long)pushed, (unsigned long long)done);
  abort();
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
  const void* scalar;
  memcpy(&scalar, a + 24 + sizeof(struct shunt_red), sizeof(scalar));
  if (l->kind == FC_K_PRE) return shunt_kcpu_pre(d, dst, src, n, red, scalar, &small, err, len);
  if (l->kind == FC_K_POST) return shunt_kcpu_post(d, dst, n, red, &small, err, len);
  struct shunt_gpu_kargs k;
  memcpy(&k, a, sizeof(k));
  long nth = __atomic_add_fetch(&exec_launches, 1, __ATOMIC_RELAXED);
  int fault = fc_fault_for(nth);
  if (fault == 's') return 0; /* the launch that never ran: its signals never come */
  if (fault == 'l') {
    /* Not resident until its peers have given up: 60 s at most, then it runs as it is. */
    for (int ms = 0; ms < 60000 && !__atomic_load_n(k.abort, __ATOMIC_ACQUIRE); ms++) usleep(1000);
  }
  unsigned t = l->threads < (unsigned)fc_run_threads() ? l->threads : (unsigned)fc_run_threads();
  struct shunt_kcpu_grid g = {l->blocks, t, 0, l->smem};
  int rc = shunt_kcpu_exec(d, &k, &g, err, len);
  if (rc == 0) check_drained(&k);
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
