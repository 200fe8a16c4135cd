/* The shared-memory segment where a communicator's ranks meet, and the barrier inside it.
 *
 * Ranks may be processes or threads of one process; each maps the segment itself, so the
 * barrier waits on a futex keyed by the shared page, not by an address. A barrier gives up
 * after FAKE_NCCL_TIMEOUT seconds (default 60) so that a peer that died fails the test
 * instead of hanging it. */
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "fakenccl/fake_internal.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double timeout_s(void) {
  const char* s = getenv("FAKE_NCCL_TIMEOUT");
  double t = s ? atof(s) : 0;
  return t > 0 ? t : 60;
}

ncclResult_t fake_barrier_wait(struct fake_barrier* b) {
  uint32_t gen = atomic_load(&b->gen);
  if (atomic_fetch_add(&b->count, 1) + 1 == b->n) {
    atomic_store(&b->count, 0); /* before the release: nobody arrives again until then */
    atomic_fetch_add(&b->gen, 1);
    syscall(SYS_futex, &b->gen, FUTEX_WAKE, 0x7fffffff, NULL, NULL, 0);
    return ncclSuccess;
  }
  double deadline = now_s() + timeout_s();
  for (int spins = 0; atomic_load(&b->gen) == gen; spins++) {
    if (spins < 200) continue;
    struct timespec ts = {0, 100 * 1000 * 1000};
    syscall(SYS_futex, &b->gen, FUTEX_WAIT, gen, &ts, NULL, 0);
    if (now_s() > deadline) {
      fprintf(stderr, "fake nccl: barrier timed out (a peer is missing)\n");
      return ncclSystemError;
    }
  }
  return ncclSuccess;
}

static size_t info_bytes(int nranks) {
  size_t n = sizeof(struct fake_segment) + (size_t)nranks * sizeof(struct fake_rank_info);
  return (n + 63) & ~(size_t)63;
}

unsigned char* fake_slot(struct ncclComm* c, int rank) {
  return (unsigned char*)c->seg + info_bytes(c->nranks) + (size_t)rank * FAKE_SLOT_BYTES;
}

struct fake_rank_info* fake_info(struct ncclComm* c, int rank) {
  return (struct fake_rank_info*)(c->seg + 1) + rank;
}

/* Creates the segment, or opens the one a peer created and waits until it is set up. */
static ncclResult_t open_segment(struct ncclComm* c) {
  size_t bytes = info_bytes(c->nranks) + (size_t)c->nranks * FAKE_SLOT_BYTES;
  double deadline = now_s() + timeout_s();
  for (;;) {
    int creator = 1;
    int fd = shm_open(c->name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0 && errno == EEXIST) {
      creator = 0;
      fd = shm_open(c->name, O_RDWR, 0600);
    }
    if (fd < 0 && errno != ENOENT) {
      perror("fake nccl: shm_open");
      return ncclSystemError;
    }
    struct stat st;
    if (fd >= 0 && creator && ftruncate(fd, (off_t)bytes) != 0) {
      perror("fake nccl: ftruncate");
      close(fd);
      shm_unlink(c->name);
      return ncclSystemError;
    }
    /* a peer's segment may not have its size yet: retry until it has */
    if (fd >= 0 && fstat(fd, &st) == 0 && (size_t)st.st_size >= bytes) {
      void* p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      close(fd);
      if (p == MAP_FAILED) {
        perror("fake nccl: mmap");
        return ncclSystemError;
      }
      c->seg = p;
      c->seg_bytes = bytes;
      if (creator) {
        c->seg->nranks = c->nranks;
        c->seg->barrier.n = (uint32_t)c->nranks;
        atomic_store(&c->seg->ready, FAKE_SEGMENT_READY);
      }
      return ncclSuccess;
    }
    if (fd >= 0) close(fd);
    if (now_s() > deadline) {
      fprintf(stderr, "fake nccl: segment %s never became usable\n", c->name);
      return ncclSystemError;
    }
    usleep(1000);
  }
}

ncclResult_t fake_comm_connect(struct ncclComm* c) {
  ncclResult_t rc = open_segment(c);
  if (rc != ncclSuccess) return rc;
  double deadline = now_s() + timeout_s();
  while (atomic_load(&c->seg->ready) != FAKE_SEGMENT_READY) {
    if (now_s() > deadline) return ncclSystemError;
    usleep(1000);
  }
  if (c->seg->nranks != c->nranks) {
    fprintf(stderr, "fake nccl: rank %d joined with nranks %d, the segment has %d\n", c->rank, c->nranks,
            c->seg->nranks);
    return ncclInvalidArgument;
  }
  /* the last to join removes the name; the mappings live on until each rank unmaps */
  if (atomic_fetch_add(&c->seg->joined, 1) + 1 == c->nranks) shm_unlink(c->name);
  rc = fake_barrier_wait(&c->seg->barrier);
  if (rc == ncclSuccess)
    c->ready = 1;
  else
    shm_unlink(c->name); /* a peer never came: leave no name behind */
  return rc;
}

void fake_segment_unmap(struct ncclComm* c) {
  if (c->seg) munmap(c->seg, c->seg_bytes);
  c->seg = NULL;
}
