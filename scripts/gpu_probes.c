/* Driver facts the GPU executor's design rests on, read off the machine's own CUDA driver
 * (scripts/gpu-check.sh stage 1 builds this with gcc -lcuda and runs each probe under its own
 * timeout). Each probe prints one line "PROBE name: FINDING (detail)" and exits 0 when it could
 * ask the driver, 1 when it could not (a driver call failed: the line says which).
 *
 *   gpu_probes queue         a copy on one stream, behind an event recorded on another stream
 *                            right after a kernel that has not finished: does it start?
 *                            (run with CUDA_DEVICE_MAX_CONNECTIONS=1 and unset)
 *   gpu_probes pageable      an asynchronous copy from pageable memory onto a stream whose
 *                            kernel has not finished: does the call wait on the host?
 *   gpu_probes capture       a pageable copy on another stream while a stream holds a
 *                            global-mode capture: what do the copy and the capture's end say?
 *   gpu_probes remap         a VMM buffer's id and range, before and after its memory is
 *                            unmapped, released and another mapped at the same address
 *   gpu_probes fdpass        a VMM descriptor from one forked process to another, by
 *                            pidfd_getfd and by SCM_RIGHTS, imported and read (ptrace_scope shown)
 *   gpu_probes release       device memory given back after a VMM release while an exported
 *                            descriptor of it is still open, and after it is closed
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <cuda.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

static const char* probe = "?";

static const char* cu_name(CUresult r) {
  const char* s = NULL;
  cuGetErrorName(r, &s);
  return s ? s : "unknown";
}

#define CU(call)                                                                        \
  do {                                                                                  \
    CUresult r_ = (call);                                                               \
    if (r_ != CUDA_SUCCESS) {                                                           \
      printf("PROBE %s: NOT ASKED (%s returned %s)\n", probe, #call, cu_name(r_));     \
      exit(1);                                                                          \
    }                                                                                   \
  } while (0)

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* A kernel that spins until the host writes a non-zero word into mapped memory. */
static const char spin_ptx[] =
    ".version 6.0\n.target sm_50\n.address_size 64\n"
    ".visible .entry spin(.param .u64 flag)\n{\n"
    "  .reg .u64 %rd<2>;\n  .reg .b32 %r<2>;\n  .reg .pred %p<2>;\n"
    "  ld.param.u64 %rd0, [flag];\n"
    "LOOP:\n  ld.volatile.global.u32 %r0, [%rd0];\n  setp.eq.u32 %p0, %r0, 0;\n  @%p0 bra LOOP;\n  ret;\n}\n";

struct spinner {
  CUfunction fn;
  volatile unsigned* flag; /* host side */
  CUdeviceptr dflag;
};

static void context(CUcontext* ctx) {
  CUdevice dev;
  CU(cuInit(0));
  CU(cuDeviceGet(&dev, 0));
  CU(cuDevicePrimaryCtxRetain(ctx, dev));
  CU(cuCtxSetCurrent(*ctx));
}

static void spinner_make(struct spinner* s) {
  CUmodule m;
  CU(cuModuleLoadData(&m, spin_ptx));
  CU(cuModuleGetFunction(&s->fn, m, "spin"));
  void* p;
  CU(cuMemHostAlloc(&p, 4096, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
  s->flag = p;
  *s->flag = 0;
  CU(cuMemHostGetDevicePointer(&s->dflag, p, 0));
}

static void spin_on(struct spinner* s, CUstream st) {
  void* args[] = {&s->dflag};
  CU(cuLaunchKernel(s->fn, 1, 1, 1, 1, 1, 1, 0, st, args, NULL));
}

/* Whether the stream finishes its work within `seconds` (polled, never waited on). */
static int drains(CUstream st, double seconds) {
  double end = now() + seconds;
  while (now() < end) {
    CUresult r = cuStreamQuery(st);
    if (r == CUDA_SUCCESS) return 1;
    if (r != CUDA_ERROR_NOT_READY) return -1;
    usleep(1000);
  }
  return 0;
}

static int probe_queue(void) {
  CUcontext ctx;
  context(&ctx);
  struct spinner s;
  spinner_make(&s);
  CUstream user, proxy;
  CUevent ev;
  CU(cuStreamCreate(&user, CU_STREAM_NON_BLOCKING));
  CU(cuStreamCreate(&proxy, CU_STREAM_NON_BLOCKING));
  CU(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
  CUdeviceptr d;
  CU(cuMemAlloc(&d, 1 << 20));
  void* h;
  CU(cuMemAllocHost(&h, 1 << 20));
  spin_on(&s, user);
  CU(cuEventRecord(ev, user)); /* as the library and PyTorch record after each call */
  CU(cuMemcpyDtoHAsync(h, d, 1 << 20, proxy));
  int ran = drains(proxy, 2.0);
  *s.flag = 1;
  CU(cuCtxSynchronize());
  const char* conn = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  printf("PROBE queue (CUDA_DEVICE_MAX_CONNECTIONS=%s): %s\n", conn ? conn : "unset (8)",
         ran == 1 ? "the copy ran while the kernel spun (no false dependency)"
         : ran == 0
             ? "the copy WAITED behind the other stream's kernel and event (a shared hardware queue: a proxy copy "
               "there deadlocks against a kernel that waits for it)"
             : "cuStreamQuery failed");
  return ran < 0;
}

struct watch {
  volatile unsigned* flag;
  volatile int done;
  int fired;
};

static void* watchdog(void* arg) {
  struct watch* w = arg;
  double end = now() + 2.0;
  while (!w->done && now() < end) usleep(1000);
  if (!w->done) {
    w->fired = 1;
    *w->flag = 1; /* release the kernel so that the waiting call can return */
  }
  return NULL;
}

static int probe_pageable(void) {
  CUcontext ctx;
  context(&ctx);
  struct spinner s;
  spinner_make(&s);
  CUstream st;
  CU(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
  size_t n = 4 << 20;
  CUdeviceptr d;
  CU(cuMemAlloc(&d, n));
  char* host = malloc(n); /* pageable */
  memset(host, 1, n);
  spin_on(&s, st);
  struct watch w = {s.flag, 0, 0};
  pthread_t t;
  pthread_create(&t, NULL, watchdog, &w);
  double t0 = now();
  CUresult r = cuMemcpyHtoDAsync(d, host, n, st);
  double took = now() - t0;
  w.done = 1;
  pthread_join(t, NULL);
  *s.flag = 1;
  CU(cuCtxSynchronize());
  printf("PROBE pageable: %s (the call took %.3f s, returned %s)\n",
         w.fired ? "the asynchronous copy from pageable memory WAITED on the host for the stream's kernel"
                 : "the asynchronous copy from pageable memory returned while the stream was blocked",
         took, cu_name(r));
  free(host);
  return 0;
}

static int probe_capture(void) {
  CUcontext ctx;
  context(&ctx);
  CUstream cap, other;
  CU(cuStreamCreate(&cap, CU_STREAM_NON_BLOCKING));
  CU(cuStreamCreate(&other, CU_STREAM_NON_BLOCKING));
  size_t n = 1 << 20;
  CUdeviceptr d;
  CU(cuMemAlloc(&d, n));
  char* host = calloc(1, n);
  CU(cuStreamBeginCapture(cap, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU(cuMemsetD8Async(d, 0, n, cap));
  CUresult async = cuMemcpyHtoDAsync(d, host, n, other);
  CUresult sync = cuMemcpyHtoD(d, host, n);
  CUgraph g = NULL;
  CUresult end = cuStreamEndCapture(cap, &g);
  printf("PROBE capture: during a global-mode capture on another stream, a pageable async copy returned %s, "
         "a pageable synchronous copy %s, and the capture's end %s\n",
         cu_name(async), cu_name(sync), cu_name(end));
  if (g) cuGraphDestroy(g);
  free(host);
  return 0;
}

static CUmemAllocationProp vmm_prop(int fd_handles) {
  CUmemAllocationProp p;
  memset(&p, 0, sizeof(p));
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = 0;
  if (fd_handles) p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return p;
}

static void grant(CUdeviceptr va, size_t n) {
  CUmemAccessDesc a;
  memset(&a, 0, sizeof(a));
  a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  a.location.id = 0;
  a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CU(cuMemSetAccess(va, n, &a, 1));
}

static int probe_remap(void) {
  CUcontext ctx;
  context(&ctx);
  CUmemAllocationProp p = vmm_prop(0);
  size_t gran = 0;
  CU(cuMemGetAllocationGranularity(&gran, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  CUdeviceptr va;
  CU(cuMemAddressReserve(&va, 2 * gran, 0, 0, 0));
  unsigned long long id[2] = {0, 0};
  CUdeviceptr base[2];
  size_t size[2];
  for (int k = 0; k < 2; k++) {
    CUmemGenericAllocationHandle h;
    CU(cuMemCreate(&h, gran, &p, 0));
    CU(cuMemMap(va, gran, 0, h, 0));
    grant(va, gran);
    CU(cuPointerGetAttribute(&id[k], CU_POINTER_ATTRIBUTE_BUFFER_ID, va + 64));
    CU(cuMemGetAddressRange(&base[k], &size[k], va + 64));
    CU(cuMemUnmap(va, gran));
    CU(cuMemRelease(h));
  }
  printf("PROBE remap: buffer id %llu then %llu (%s); range %#llx+%zu then %#llx+%zu (%s)\n", id[0], id[1],
         id[0] == id[1] ? "the SAME id: a peer cannot tell the memory changed" : "a new id",
         (unsigned long long)base[0], size[0], (unsigned long long)base[1], size[1],
         base[0] == base[1] && size[0] == size[1] ? "the same" : "different");
  return 0;
}

static int send_fd(int sock, int fd) {
  char byte = 'f';
  struct iovec iov = {&byte, 1};
  char ctl[CMSG_SPACE(sizeof(int))];
  memset(ctl, 0, sizeof(ctl));
  struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof(ctl)};
  struct cmsghdr* c = CMSG_FIRSTHDR(&m);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &fd, sizeof(int));
  return sendmsg(sock, &m, 0) == 1 ? 0 : -1;
}

static int recv_fd(int sock) {
  char byte;
  struct iovec iov = {&byte, 1};
  char ctl[CMSG_SPACE(sizeof(int))];
  struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof(ctl)};
  if (recvmsg(sock, &m, 0) != 1) return -1;
  struct cmsghdr* c = CMSG_FIRSTHDR(&m);
  if (!c || c->cmsg_type != SCM_RIGHTS) return -1;
  int fd;
  memcpy(&fd, CMSG_DATA(c), sizeof(int));
  return fd;
}

/* In the child: imports fd, maps it, reads the first word; the word, or -1. */
static long long import_and_read(int fd, size_t n) {
  CUmemGenericAllocationHandle h;
  if (cuMemImportFromShareableHandle(&h, (void*)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) !=
      CUDA_SUCCESS)
    return -1;
  CUdeviceptr va;
  if (cuMemAddressReserve(&va, n, 0, 0, 0) != CUDA_SUCCESS || cuMemMap(va, n, 0, h, 0) != CUDA_SUCCESS) return -1;
  grant(va, n);
  unsigned v = 0;
  if (cuMemcpyDtoH(&v, va, sizeof(v)) != CUDA_SUCCESS) return -1;
  cuMemUnmap(va, n);
  cuMemRelease(h);
  return v;
}

static int probe_fdpass(void) {
  char scope[16] = "none";
  FILE* f = fopen("/proc/sys/kernel/yama/ptrace_scope", "r");
  if (f) {
    if (!fgets(scope, sizeof(scope), f)) snprintf(scope, sizeof(scope), "?");
    scope[strcspn(scope, "\n")] = '\0';
    fclose(f);
  }
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) {
    printf("PROBE fdpass: NOT ASKED (socketpair: %s)\n", strerror(errno));
    return 1;
  }
  pid_t child = fork(); /* before any CUDA call: a forked child cannot use its parent's driver state */
  if (child == 0) {
    close(sv[0]);
    CUcontext ctx;
    context(&ctx);
    struct {
      pid_t pid;
      int fd;
      size_t n;
    } info;
    if (read(sv[1], &info, sizeof(info)) != (ssize_t)sizeof(info)) _exit(1);
    int pfd = (int)syscall(SYS_pidfd_open, info.pid, 0);
    int got = pfd >= 0 ? (int)syscall(SYS_pidfd_getfd, pfd, info.fd, 0) : -1;
    int why = errno;
    long long via_pidfd = got >= 0 ? import_and_read(got, info.n) : -2;
    int passed = recv_fd(sv[1]);
    long long via_scm = passed >= 0 ? import_and_read(passed, info.n) : -2;
    printf("PROBE fdpass (ptrace_scope %s): pidfd_getfd %s; SCM_RIGHTS %s\n", scope,
           got >= 0 ? (via_pidfd == 0x5eed ? "passed, imported, read back" : "passed but the import or read failed")
                    : strerror(why),
           passed >= 0 ? (via_scm == 0x5eed ? "passed, imported, read back" : "passed but the import or read failed")
                       : "failed");
    fflush(stdout);
    char done = 1;
    if (write(sv[1], &done, 1) != 1) _exit(1);
    _exit(via_scm == 0x5eed ? 0 : 1);
  }
  close(sv[1]);
  CUcontext ctx;
  context(&ctx);
  CUmemAllocationProp p = vmm_prop(1);
  size_t gran = 0;
  CU(cuMemGetAllocationGranularity(&gran, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  CUmemGenericAllocationHandle h;
  CU(cuMemCreate(&h, gran, &p, 0));
  CUdeviceptr va;
  CU(cuMemAddressReserve(&va, gran, 0, 0, 0));
  CU(cuMemMap(va, gran, 0, h, 0));
  grant(va, gran);
  CU(cuMemsetD32(va, 0x5eed, gran / 4));
  int fd = -1;
  CU(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  struct {
    pid_t pid;
    int fd;
    size_t n;
  } info = {getpid(), fd, gran};
  int ok = write(sv[0], &info, sizeof(info)) == (ssize_t)sizeof(info) && send_fd(sv[0], fd) == 0;
  char done;
  if (ok && read(sv[0], &done, 1) != 1) ok = 0; /* the child has read the memory */
  int status = 0;
  waitpid(child, &status, 0);
  close(fd);
  cuMemUnmap(va, gran);
  cuMemRelease(h);
  return ok && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}

static int probe_release(void) {
  CUcontext ctx;
  context(&ctx);
  CUmemAllocationProp p = vmm_prop(1);
  size_t gran = 0, n = 512u << 20;
  CU(cuMemGetAllocationGranularity(&gran, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  n = (n + gran - 1) / gran * gran;
  size_t free0, free1, free2, free3, total;
  CU(cuMemGetInfo(&free0, &total));
  CUmemGenericAllocationHandle h;
  CU(cuMemCreate(&h, n, &p, 0));
  CU(cuMemGetInfo(&free1, &total));
  int fd = -1;
  CU(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  CU(cuMemRelease(h));
  CU(cuMemGetInfo(&free2, &total));
  close(fd);
  CU(cuMemGetInfo(&free3, &total));
  double mib = 1024.0 * 1024.0;
  printf("PROBE release: %zu MiB made (%.0f MiB fewer free); after the release with a descriptor open %.0f MiB "
         "back; after the descriptor closed %.0f MiB back (%s)\n",
         n >> 20, ((double)free0 - (double)free1) / mib, ((double)free2 - (double)free1) / mib,
         ((double)free3 - (double)free1) / mib,
         free2 < free0 - n / 2 ? "an open descriptor KEEPS the memory until it is closed"
                               : "the memory came back at the release");
  return 0;
}

int main(int argc, char** argv) {
  static const struct {
    const char* name;
    int (*fn)(void);
  } probes[] = {{"queue", probe_queue},     {"pageable", probe_pageable}, {"capture", probe_capture},
                {"remap", probe_remap},     {"fdpass", probe_fdpass},     {"release", probe_release}};
  if (argc != 2) {
    fprintf(stderr, "usage: gpu_probes queue|pageable|capture|remap|fdpass|release\n");
    return 2;
  }
  for (size_t i = 0; i < sizeof(probes) / sizeof(probes[0]); i++)
    if (!strcmp(argv[1], probes[i].name)) {
      probe = probes[i].name;
      setvbuf(stdout, NULL, _IOLBF, 0);
      return probes[i].fn();
    }
  fprintf(stderr, "gpu_probes: no probe '%s'\n", argv[1]);
  return 2;
}
