/* VMM memory is reached zero-copy between processes where pidfd_getfd(2) is refused, as Docker's
 * default seccomp profile and Yama's ptrace_scope=1 (Ubuntu's default) refuse it between
 * sibling ranks: each rank installs a seccomp filter that fails pidfd_getfd with EPERM.
 *
 * Usage: test_zc_fdpass run (two ranks as processes, SHUNT_ZERO_COPY=1, a tuning that gives
 * 256 KiB allreduces to the Simple plans, which reach peers' buffers in place)
 *   rank 0 registers ncclMemAlloc memory (VMM, shareable by file descriptor), rank 1 cuMemAlloc
 *   memory (CUDA IPC): the in-place allreduce on them is exact and reached in place. Neither
 *   rank has a listening socket of its own before its first export; rank 1, which exports no
 *   VMM memory, has none after either. */
#include <dirent.h>
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <nccl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/check.h"
#include "common/fork_ranks.h"
#include "fakecuda/fake_cuda_api.h"
#include "shunt/shunt.h"

#define NRANKS 2
#define COUNT ((size_t)64 << 10) /* floats: 256 KiB, served by the Simple plans here */
#define GRAN ((size_t)2 << 20)
#define NR_PIDFD_OPEN 434
#define NR_PIDFD_GETFD 438 /* the same number on every architecture */

/* pidfd_getfd fails with EPERM in this process from now on (and in its children). */
static void refuse_pidfd_getfd(void) {
  struct sock_filter f[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, NR_PIDFD_GETFD, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = {(unsigned short)(sizeof(f) / sizeof(f[0])), f};
  CHECK_EQ_INT(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
  CHECK_EQ_INT(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog), 0);
  int pfd = (int)syscall(NR_PIDFD_OPEN, getpid(), 0);
  errno = 0;
  long got = pfd >= 0 ? syscall(NR_PIDFD_GETFD, pfd, 0, 0) : -1;
  CHECK_MSG(got < 0 && errno == EPERM, "pidfd_getfd is not refused here (%ld, %s)", got, strerror(errno));
  if (got >= 0) close((int)got);
  if (pfd >= 0) close(pfd);
}

/* Unix sockets of this process bound to a name (listening ones, not a connection's end). */
static int named_unix_sockets(void) {
  char inodes[64][32];
  int n = 0, named = 0;
  DIR* d = opendir("/proc/self/fd");
  for (struct dirent* e; d && (e = readdir(d)) && n < 64;) {
    char path[300], link[64];
    snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
    ssize_t k = readlink(path, link, sizeof(link) - 1);
    if (k <= 0) continue;
    link[k] = 0;
    if (!strncmp(link, "socket:[", 8))
      snprintf(inodes[n++], sizeof(inodes[0]), "%.*s", (int)(k - 9), link + 8);
  }
  if (d) closedir(d);
  FILE* f = fopen("/proc/net/unix", "r");
  char line[512];
  while (f && fgets(line, sizeof(line), f)) {
    char ino[32] = "", name[256] = "";
    /* Num RefCount Protocol Flags Type St Inode [Path] */
    if (sscanf(line, "%*s %*s %*s %*s %*s %*s %31s %255s", ino, name) != 2) continue;
    for (int i = 0; i < n; i++) named += !strcmp(ino, inodes[i]);
  }
  if (f) fclose(f);
  return named;
}

static int run_rank(int rank, const ncclUniqueId* ids) {
  refuse_pidfd_getfd();
  fc_handle ctx = NULL, st = NULL;
  CHECK_EQ_INT(cuInit(0), 0);
  CHECK_EQ_INT(cuDevicePrimaryCtxRetain(&ctx, 0), 0);
  CHECK_EQ_INT(cuCtxSetCurrent(ctx), 0);
  ncclComm_t comm = NULL;
  CHECK_EQ_INT(ncclCommInitRank(&comm, NRANKS, ids[0], rank), ncclSuccess);
  if (!comm) CHECK_DONE();
  CHECK_EQ_INT(cuStreamCreate(&st, 1), 0);
  unsigned long long buf = 0;
  void* p = NULL;
  if (rank == 0) {
    CHECK_EQ_INT(ncclMemAlloc(&p, GRAN), ncclSuccess);
    buf = (uintptr_t)p;
  } else {
    CHECK_EQ_INT(cuMemAlloc_v2(&buf, GRAN), 0);
  }
  CHECK_MSG(named_unix_sockets() == 0, "rank %d: a named socket before any export", rank);
  void* h = NULL;
  CHECK_EQ_INT(ncclCommRegister(comm, (void*)(uintptr_t)buf, GRAN, &h), ncclSuccess);

  float* v = malloc(COUNT * sizeof(float));
  for (size_t i = 0; i < COUNT; i++) v[i] = (float)((rank + 1) * (int)(i % 19));
  CHECK_EQ_INT(cuMemcpyHtoD_v2(buf, v, COUNT * sizeof(float)), 0);
  long long before = fakecuda_copied_bytes();
  CHECK_EQ_INT(
      ncclAllReduce((void*)(uintptr_t)buf, (void*)(uintptr_t)buf, COUNT, ncclFloat, ncclSum, comm, st),
      ncclSuccess);
  CHECK_EQ_INT(cuStreamSynchronize(st), 0);
  long long moved = fakecuda_copied_bytes() - before;
  CHECK_EQ_INT(cuMemcpyDtoH_v2(v, buf, COUNT * sizeof(float)), 0);
  size_t bad = 0;
  for (size_t i = 0; i < COUNT; i++) bad += v[i] != (float)(3 * (int)(i % 19));
  CHECK_MSG(bad == 0, "rank %d: %zu of %zu wrong", rank, bad, COUNT);
  CHECK_MSG(moved < (long long)(COUNT * sizeof(float)),
            "rank %d: %lld bytes copied: the VMM buffer was staged, not reached in place", rank, moved);
  if (rank == 1)
    CHECK_MSG(named_unix_sockets() == 0, "rank 1 exports no VMM memory, yet listens on a socket");
  free(v);

  CHECK_EQ_INT(ncclCommDeregister(comm, h), ncclSuccess);
  CHECK_EQ_INT(ncclCommDestroy(comm), ncclSuccess);
  if (rank == 0)
    CHECK_EQ_INT(ncclMemFree(p), ncclSuccess);
  else
    CHECK_EQ_INT(cuMemFree_v2(buf), 0);
  cuStreamDestroy_v2(st);
  CHECK_DONE();
}

int main(int argc, char** argv) {
  (void)argc;
  (void)argv;
  return fork_ranks(NRANKS, 1, 1, run_rank);
}
