/* The CUDA driver stand-in's memory rules (tests/fakecuda/README.md), each case in a child
 * process of its own, its crash expected or not:
 *   host        the host reads a cuMemAlloc allocation: the process dies saying so, before
 *               any copy touched it and after copies did; the driver's copies move its bytes
 *   guard       a copy reaches the guard page after an allocation: a device fault
 *   freed       a copy reads freed memory: a device fault
 *   ipc         a handle opened twice in one context is one mapping, counted; its own process
 *               cannot open it; the exporter's free while the peer maps it keeps the pages
 *               (the peer still reads them) and counts them until the peer closes; under
 *               FAKECUDA_STRICT_IPC that free aborts, saying so
 *   pinned      pinned host memory is host memory of the allocating context's device
 *   vmm         VMM memory is reached by a device once cuMemSetAccess granted that device
 *               (before: a device fault, another device of the process included), which only
 *               a device that can reach the owner as a peer gets; cuMemGetAccess tells;
 *               cuIpcGetMemHandle refuses it and pool memory; its file descriptor exports; a
 *               release while an exported descriptor is open keeps and counts it
 *   managed     managed memory is reachable from the host
 *   dmabuf      cuMemGetHandleForAddressRange only where the device reports dma-buf support
 *   copy        a copy's bytes land in no order, not as whole words (a watcher sees it torn)
 * Usage: test_memory_rules [CASE] (every case when none is named). */
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fakecuda/fake_cuda_api.h"

/* Driver calls beyond fake_cuda_api.h, as cuda.h declares them (plain types). */
typedef struct {
  char reserved[64];
} ipc_handle;
int cuIpcGetMemHandle(ipc_handle* h, unsigned long long dptr);
int cuIpcOpenMemHandle_v2(unsigned long long* dptr, ipc_handle h, unsigned flags);
int cuIpcCloseMemHandle(unsigned long long dptr);
int cuMemcpyDtoDAsync_v2(unsigned long long dst, unsigned long long src, size_t n, fc_handle stream);
int cuMemHostAlloc(void** p, size_t bytes, unsigned flags);
int cuMemFreeHost(void* p);
int cuPointerGetAttribute(void* data, int attribute, unsigned long long ptr);
int cuMemcpyDtoHAsync_v2(void* dst, unsigned long long src, size_t n, fc_handle stream);
int cuMemAllocManaged(unsigned long long* dptr, size_t bytes, unsigned flags);
int cuMemGetHandleForAddressRange(void* handle, unsigned long long dptr, size_t size, int type,
                                  unsigned long long flags);
int cuDeviceGetAttribute(int* v, int attr, int dev);
struct location {
  int type, id;
};
int cuMemGetAccess(unsigned long long* flags, const struct location* loc, unsigned long long ptr);

static int failures;
#define EXPECT(cond, ...)                                        \
  do {                                                           \
    if (!(cond)) {                                               \
      fprintf(stderr, "%s:%d: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                              \
      fprintf(stderr, "\n");                                     \
      failures++;                                                \
    }                                                            \
  } while (0)

static void setup(void) {
  fc_handle ctx = NULL;
  if (cuInit(0) || cuDevicePrimaryCtxRetain(&ctx, 0) || cuCtxSetCurrent(ctx)) {
    fprintf(stderr, "no context\n");
    _exit(3);
  }
}

static unsigned long long dalloc(size_t bytes) {
  unsigned long long d = 0;
  if (cuMemAlloc_v2(&d, bytes) != 0) _exit(3);
  return d;
}

/* Runs fn in a child with its stderr captured: its wait status; its stderr in out. */
static int in_child(void (*fn)(void), char* out, size_t len) {
  int p[2];
  if (pipe(p) != 0) return -1;
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    close(p[0]);
    dup2(p[1], 2);
    failures = 0;
    fn();
    _exit(failures ? 1 : 0);
  }
  close(p[1]);
  size_t n = 0;
  ssize_t r;
  while (n + 1 < len && (r = read(p[0], out + n, len - 1 - n)) > 0) n += (size_t)r;
  out[n] = 0;
  close(p[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  return st;
}

static bool aborted(int st) {
  return WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT;
}

/* ---- host ---- */
static volatile int sink;
static void host_fresh(void) {
  setup();
  unsigned long long d = dalloc(64);
  sink = *(volatile int*)(uintptr_t)d; /* before anything touched it */
}
static void host_after_copies(void) {
  setup();
  unsigned long long d = dalloc(8192), e = dalloc(8192);
  int v = 1234, w = 0;
  EXPECT(cuMemcpyHtoD_v2(d, &v, sizeof(v)) == 0, "HtoD");
  EXPECT(cuMemcpyDtoDAsync_v2(e, d, sizeof(v), NULL) == 0, "DtoD");
  EXPECT(cuStreamSynchronize(NULL) == 0, "sync");
  EXPECT(cuMemcpyDtoH_v2(&w, e, sizeof(w)) == 0 && w == 1234, "the copies move the bytes: %d", w);
  if (failures) _exit(1);
  sink = *(volatile int*)(uintptr_t)e; /* the copies are over: closed again */
}
static void host_write(void) {
  setup();
  unsigned long long d = dalloc(64);
  *(volatile int*)(uintptr_t)(d + 8) = 1;
}

/* ---- guard, freed ---- */
static void guard_after(void) {
  setup();
  unsigned long long d = dalloc(4096), e = dalloc(4096);
  cuMemcpyDtoDAsync_v2(e, d + 4096, 16, NULL); /* the page after d: its guard */
  cuStreamSynchronize(NULL);
}
static void guard_before(void) {
  setup();
  unsigned long long d = dalloc(4096), e = dalloc(4096);
  cuMemcpyDtoDAsync_v2(d - 16, e, 16, NULL);
  cuStreamSynchronize(NULL);
}
static void freed(void) {
  setup();
  cuStreamSynchronize(NULL); /* its worker thread's stack is mapped before d goes */
  unsigned long long d = dalloc(1 << 20), e = dalloc(4096);
  cuMemFree_v2(d);
  cuMemcpyDtoDAsync_v2(e, d + (1 << 19), 16, NULL);
  cuStreamSynchronize(NULL);
}

/* ---- ipc ---- */
static ipc_handle handle;
static int go[2], done[2], closed[2];
static void ipc_peer(void) {
  setup();
  unsigned long long a = 0, b = 0;
  EXPECT(cuIpcOpenMemHandle_v2(&a, handle, 1) == 0, "open");
  EXPECT(cuIpcOpenMemHandle_v2(&b, handle, 1) == 0 && a == b, "opened twice: one mapping (%llx, %llx)", a, b);
  EXPECT(cuIpcCloseMemHandle(a) == 0, "close once");
  int v = 0;
  EXPECT(cuMemcpyDtoH_v2(&v, b, sizeof(v)) == 0 && v == 77, "still mapped after one close: %d", v);
  EXPECT(cuIpcCloseMemHandle(b) == 0, "close twice");
  EXPECT(cuIpcCloseMemHandle(b) != 0, "a third close: not mapped");
  EXPECT(cuIpcOpenMemHandle_v2(&a, handle, 1) == 0, "open again");
  if (failures) _exit(1);
  char c = 1;
  if (write(go[1], &c, 1) != 1 || read(done[0], &c, 1) != 1) _exit(3);
  v = 0;
  EXPECT(cuMemcpyDtoH_v2(&v, a, sizeof(v)) == 0 && v == 77, "the pages kept after the exporter's free: %d",
         v);
  EXPECT(cuIpcCloseMemHandle(a) == 0, "close after the exporter's free");
  if (write(closed[1], &c, 1) != 1) _exit(3);
}
static void ipc_case(void) {
  setup();
  unsigned long long d = dalloc(4096), x = 0;
  int v = 77;
  cuMemcpyHtoD_v2(d, &v, sizeof(v));
  EXPECT(cuIpcGetMemHandle(&handle, d) == 0, "handle");
  EXPECT(cuIpcOpenMemHandle_v2(&x, handle, 1) == 201, "its own process's handle: CUDA_ERROR_INVALID_CONTEXT");
  if (pipe(go) != 0 || pipe(done) != 0 || pipe(closed) != 0) _exit(3);
  char out[4096];
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    close(done[1]); /* an exporter that dies early ends the peer's wait */
    int st = in_child(ipc_peer, out, sizeof(out));
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) fprintf(stderr, "the peer's end:\n%s\n", out);
    _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 1);
  }
  close(go[1]); /* a peer that dies early ends the reads */
  close(closed[1]);
  char c;
  if (read(go[0], &c, 1) == 1) {
    EXPECT(fakecuda_pinned_bytes() == 0, "nothing kept before the free");
    cuMemFree_v2(d); /* undefined on a GPU while the peer maps it; counted here */
    EXPECT(fakecuda_pinned_bytes() >= 4096, "the free while imported is not counted: %lld",
           fakecuda_pinned_bytes());
    if (write(done[1], &c, 1) != 1) _exit(3);
    EXPECT(read(closed[0], &c, 1) == 1, "the peer closed");
    EXPECT(fakecuda_pinned_bytes() == 0, "still counted once the peer closed: %lld", fakecuda_pinned_bytes());
  }
  int st = 0;
  waitpid(pid, &st, 0);
  EXPECT(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the peer failed");
}
/* Under FAKECUDA_STRICT_IPC the exporter's free while a peer maps the memory aborts. */
static void ipc_strict_peer(void) {
  setup();
  unsigned long long a = 0;
  char c = 1;
  if (cuIpcOpenMemHandle_v2(&a, handle, 1) != 0 || write(go[1], &c, 1) != 1 || read(done[0], &c, 1) != 1)
    _exit(3);
}
static void ipc_strict(void) {
  setenv("FAKECUDA_STRICT_IPC", "1", 1);
  setup();
  unsigned long long d = dalloc(4096);
  EXPECT(cuIpcGetMemHandle(&handle, d) == 0, "handle");
  if (pipe(go) != 0 || pipe(done) != 0) _exit(3);
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    close(done[1]); /* the exporter's abort ends the peer's wait */
    ipc_strict_peer();
    _exit(0);
  }
  close(go[1]);
  char c;
  if (read(go[0], &c, 1) == 1) cuMemFree_v2(d); /* aborts */
  _exit(3);
}

/* ---- pinned ---- */
static void pinned(void) {
  setup();
  void* p = NULL;
  EXPECT(cuMemHostAlloc(&p, 4096, 3) == 0, "cuMemHostAlloc");
  unsigned type = 0;
  int dev = -1;
  EXPECT(cuPointerGetAttribute(&type, 2, (uintptr_t)p) == 0 && type == 1, "memory type host: %u", type);
  EXPECT(cuPointerGetAttribute(&dev, 9, (uintptr_t)p) == 0 && dev == 0, "device ordinal: %d", dev);
  ((volatile char*)p)[100] = 5; /* host memory: the host reaches it */
  cuMemFreeHost(p);
}

/* ---- vmm, managed, dmabuf ---- */
#define GRAN ((size_t)2 << 20)
static unsigned long long vmm_map(int types, int grant) {
  struct prop p = {1, types, 1, 0, NULL, {0}};
  unsigned long long h = 0, ptr = 0;
  EXPECT(cuMemCreate(&h, GRAN, &p, 0) == 0, "cuMemCreate");
  EXPECT(cuMemAddressReserve(&ptr, GRAN, 0, 0, 0) == 0, "reserve");
  EXPECT(cuMemMap(ptr, GRAN, 0, h, 0) == 0, "map");
  int fd = -1;
  EXPECT((cuMemExportToShareableHandle(&fd, h, 1, 0) == 0) == (types == 1),
         "fd export as the handle types say");
  if (fd >= 0) close(fd);
  cuMemRelease(h);
  struct access_desc d = {1, 0, 3};
  if (grant) EXPECT(cuMemSetAccess(ptr, GRAN, &d, 1) == 0, "access");
  return ptr;
}
static void vmm_rules(void) {
  setup();
  unsigned long long v = vmm_map(1, 1), pool = 0;
  ipc_handle h;
  int x = 5, y = 0;
  EXPECT(
      cuMemcpyHtoD_v2(v + 100, &x, sizeof(x)) == 0 && cuMemcpyDtoH_v2(&y, v + 100, sizeof(y)) == 0 && y == 5,
      "granted VMM memory copies");
  EXPECT(cuIpcGetMemHandle(&h, v) == 1, "cuIpcGetMemHandle refuses VMM memory");
  EXPECT(cuMemAllocAsync(&pool, 4096, NULL) == 0, "pool allocation");
  EXPECT(cuIpcGetMemHandle(&h, pool) == 1, "cuIpcGetMemHandle refuses pool memory");
  int legacy = -1;
  EXPECT(cuPointerGetAttribute(&legacy, 10, pool) == 0 && legacy == 0,
         "pool memory is not legacy IPC memory");
}
static void vmm_ungranted(void) {
  setup();
  unsigned long long v = vmm_map(0, 0);
  int x = 5;
  cuMemcpyHtoD_v2(v, &x, sizeof(x)); /* mapped, never granted: a device fault */
}
/* Two devices: memory of device 0 granted to device 0 only. */
static unsigned long long on_two_devices(fc_handle* st1) {
  setenv("FAKECUDA_DEVICES", "2", 1);
  setup();
  unsigned long long v = vmm_map(1, 1);
  fc_handle c1 = NULL;
  if (cuDevicePrimaryCtxRetain(&c1, 1) || cuCtxSetCurrent(c1) || cuStreamCreate(st1, 1)) _exit(3);
  return v;
}
static void vmm_devices(void) {
  fc_handle st1 = NULL;
  unsigned long long v = on_two_devices(&st1), f0 = 9, f1 = 9, d1 = dalloc(4096);
  struct location l0 = {1, 0}, l1 = {1, 1};
  EXPECT(cuMemGetAccess(&f0, &l0, v) == 0 && f0 == 3 && cuMemGetAccess(&f1, &l1, v + 64) == 0 && f1 == 0,
         "cuMemGetAccess: device 0 %llu, device 1 %llu", f0, f1);
  EXPECT(cuMemGetAccess(&f1, &l1, d1) != 0, "cuMemGetAccess of cuMemAlloc memory");
  struct access_desc both[2] = {{1, 0, 3}, {1, 1, 3}};
  EXPECT(cuMemSetAccess(v, GRAN, both, 2) == 0 && cuMemGetAccess(&f1, &l1, v) == 0 && f1 == 3,
         "device 1 granted: %llu", f1);
  EXPECT(cuMemcpyDtoDAsync_v2(d1, v, 16, st1) == 0 && cuStreamSynchronize(st1) == 0,
         "device 1's copy of memory granted to it");
}
static void vmm_other_device(void) {
  fc_handle st1 = NULL;
  unsigned long long v = on_two_devices(&st1), d1 = dalloc(4096);
  cuMemcpyDtoDAsync_v2(d1, v, 16, st1); /* device 1 was never granted: a device fault */
  cuStreamSynchronize(st1);
}
static void vmm_no_peer(void) {
  setenv("FAKECUDA_PEER_ACCESS", "0-1:0", 1);
  fc_handle st1 = NULL;
  unsigned long long v = on_two_devices(&st1);
  struct access_desc d = {1, 1, 3};
  EXPECT(cuMemSetAccess(v, GRAN, &d, 1) == 101, "access for a device that is no peer of the owner");
}
/* A release while an exported descriptor is open keeps the memory, counted until it closes. */
static void vmm_kept(void) {
  setup();
  struct prop p = {1, 1, 1, 0, NULL, {0}};
  unsigned long long h = 0;
  int fd = -1;
  EXPECT(cuMemCreate(&h, GRAN, &p, 0) == 0 && cuMemExportToShareableHandle(&fd, h, 1, 0) == 0, "export");
  EXPECT(cuMemRelease(h) == 0, "release");
  EXPECT(fakecuda_pinned_bytes() == (long long)GRAN, "kept by the open descriptor: %lld",
         fakecuda_pinned_bytes());
  close(fd);
  EXPECT(fakecuda_pinned_bytes() == 0, "the descriptor closed: %lld", fakecuda_pinned_bytes());
}
static void vmm_kept_strict(void) {
  setenv("FAKECUDA_STRICT_IPC", "1", 1);
  setup();
  struct prop p = {1, 1, 1, 0, NULL, {0}};
  unsigned long long h = 0;
  int fd = -1;
  EXPECT(cuMemCreate(&h, GRAN, &p, 0) == 0 && cuMemExportToShareableHandle(&fd, h, 1, 0) == 0, "export");
  cuMemRelease(h); /* aborts */
}
static void managed(void) {
  setup();
  unsigned long long m = 0;
  int managed = 0;
  EXPECT(cuMemAllocManaged(&m, 4096, 1) == 0, "cuMemAllocManaged");
  EXPECT(cuPointerGetAttribute(&managed, 8, m) == 0 && managed == 1, "is managed");
  ((volatile int*)(uintptr_t)m)[3] = 9; /* the host reaches managed memory */
  EXPECT(cuMemFree_v2(m) == 0, "cuMemFree of managed memory");
}
static void dmabuf(void) {
  setup();
  int on = -1, fd = -1;
  unsigned long long d = dalloc(4096);
  EXPECT(cuDeviceGetAttribute(&on, 124, 0) == 0, "DMA_BUF_SUPPORTED");
  int e = cuMemGetHandleForAddressRange(&fd, d, 4096, 1, 0);
  EXPECT(on ? e == 0 && fd >= 0 : e == 801, "dma-buf %s: %d", on ? "supported" : "not supported", e);
}
static void dmabuf_off(void) {
  setenv("FAKECUDA_DMA_BUF", "0", 1);
  dmabuf();
}

/* ---- copy ---- */
static void copy_torn(void) {
  setup();
  void* host = NULL;
  EXPECT(cuMemHostAlloc(&host, 4096, 3) == 0, "pinned");
  volatile uint64_t* word = host;
  unsigned long long src = dalloc(4096);
  const uint64_t a = 0, b = ~0ull;
  fc_handle st = NULL;
  EXPECT(cuStreamCreate(&st, 1) == 0, "stream");
  long torn = 0;
  for (int it = 0; it < 200 && !torn; it++) {
    uint64_t v = it % 2 ? a : b, old = it % 2 ? b : a;
    cuMemcpyHtoD_v2(src, &v, sizeof(v));
    cuMemcpyDtoHAsync_v2(host, src, sizeof(v), st);
    for (int k = 0; k < 1000000; k++) {
      uint64_t seen = *word;
      if (seen != old && seen != v) torn++;
      if (seen == v) break;
    }
    cuStreamSynchronize(st);
  }
  EXPECT(torn > 0, "an 8-byte copy never seen half done in 200 copies");
}

struct expect_crash {
  const char* name;
  void (*fn)(void);
  const char* says; /* NULL: must exit 0 */
};

static const struct expect_crash cases[] = {
    {"host", host_fresh, "host access to device memory"},
    {"host", host_after_copies, "host access to device memory"},
    {"host", host_write, "host access to device memory"},
    {"guard", guard_after, "device fault"},
    {"guard", guard_before, "device fault"},
    {"freed", freed, "device fault"},
    {"ipc", ipc_case, NULL},
    {"ipc", ipc_strict, "UB: freed while imported"},
    {"pinned", pinned, NULL},
    {"vmm", vmm_rules, NULL},
    {"vmm", vmm_ungranted, "device fault"},
    {"vmm", vmm_devices, NULL},
    {"vmm", vmm_other_device, "device fault: a kernel or copy of device 1"},
    {"vmm", vmm_no_peer, NULL},
    {"vmm", vmm_kept, NULL},
    {"vmm", vmm_kept_strict, "UB: freed while imported"},
    {"managed", managed, NULL},
    {"dmabuf", dmabuf, NULL},
    {"dmabuf", dmabuf_off, NULL},
    {"copy", copy_torn, NULL},
};

int main(int argc, char** argv) {
  int ran = 0;
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    const struct expect_crash* c = &cases[i];
    if (argc > 1 && strcmp(argv[1], c->name) != 0) continue;
    ran++;
    char out[8192];
    int st = in_child(c->fn, out, sizeof(out));
    bool ok = c->says ? aborted(st) && strstr(out, c->says) : WIFEXITED(st) && WEXITSTATUS(st) == 0;
    printf("%-7s case %zu: %s\n", c->name, i, ok ? "as expected" : "NOT as expected");
    if (!ok) {
      printf("  wait status %#x; its stderr:\n%s\n", st, out);
      failures++;
    }
  }
  if (!ran) {
    fprintf(stderr, "no case named %s\n", argv[1]);
    return 2;
  }
  return failures ? 1 : 0;
}
