/* The CUDA driver stand-in's memory rules (tests/fakecuda/README.md), each case in a child
 * process of its own, its crash expected or not:
 *   host        the host reads a cuMemAlloc allocation: the process dies saying so, before
 *               any copy touched it and after copies did; the driver's copies move its bytes
 *   guard       a copy reaches the guard page after an allocation: a device fault
 *   freed       a copy reads freed memory: a device fault
 *   ipc         a handle opened twice in one context is one mapping, counted; its own process
 *               cannot open it; once the exporter frees, the peer's access is a device fault
 *   pinned      pinned host memory is host memory of the allocating context's device
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
static int go[2], done[2];
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
  cuMemcpyDtoH_v2(&v, a, sizeof(v)); /* the exporter freed it */
}
static void ipc_case(void) {
  setup();
  unsigned long long d = dalloc(4096), x = 0;
  int v = 77;
  cuMemcpyHtoD_v2(d, &v, sizeof(v));
  EXPECT(cuIpcGetMemHandle(&handle, d) == 0, "handle");
  EXPECT(cuIpcOpenMemHandle_v2(&x, handle, 1) == 201, "its own process's handle: CUDA_ERROR_INVALID_CONTEXT");
  if (pipe(go) != 0 || pipe(done) != 0) _exit(3);
  char out[4096];
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    int st = in_child(ipc_peer, out, sizeof(out));
    if (!(aborted(st) && strstr(out, "exporter freed"))) fprintf(stderr, "the peer's end:\n%s\n", out);
    _exit(aborted(st) && strstr(out, "exporter freed") ? 0 : 1);
  }
  close(go[1]); /* a peer that dies early ends the read */
  char c;
  if (read(go[0], &c, 1) == 1) {
    cuMemFree_v2(d);
    if (write(done[1], &c, 1) != 1) _exit(3);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  EXPECT(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the peer did not die of the exporter's free");
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
    {"pinned", pinned, NULL},
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
