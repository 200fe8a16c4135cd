/* The side channel: process-shared memory with a barrier, or NCCL when ranks are spread
 * over machines. */
#include "channel.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "device.h"

struct shm_area {
  pthread_barrier_t barrier;
  int nranks;
};

struct perf_chan {
  int nranks;
  struct shm_area* shm; /* NULL for the NCCL channel */
  size_t shm_bytes;
  unsigned char* slots;          /* shm: nranks * PERF_CHAN_BYTES */
  struct perf_verdict* verdicts; /* shm: nranks */
  ncclComm_t comm;
  struct perf_dev* dev;
  unsigned char *dev_send, *dev_recv;
};

struct perf_chan* perf_chan_shm(int nranks, int nthreads) {
  size_t head = (sizeof(struct shm_area) + 63) & ~(size_t)63;
  size_t bytes = head + (size_t)nranks * (PERF_CHAN_BYTES + sizeof(struct perf_verdict));
  void* p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  struct perf_chan* ch = calloc(1, sizeof(*ch));
  if (p == MAP_FAILED || !ch) {
    if (p != MAP_FAILED) munmap(p, bytes);
    free(ch);
    return NULL;
  }
  ch->nranks = nranks;
  ch->shm = p;
  ch->shm_bytes = bytes;
  ch->slots = (unsigned char*)p + head;
  ch->verdicts = (struct perf_verdict*)(ch->slots + (size_t)nranks * PERF_CHAN_BYTES);
  pthread_barrierattr_t attr;
  pthread_barrierattr_init(&attr);
  pthread_barrierattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_barrier_init(&ch->shm->barrier, &attr, (unsigned)nthreads);
  pthread_barrierattr_destroy(&attr);
  ch->shm->nranks = nranks;
  return ch;
}

struct perf_chan* perf_chan_nccl(ncclComm_t comm, struct perf_dev* dev, int nranks) {
  struct perf_chan* ch = calloc(1, sizeof(*ch));
  if (!ch) return NULL;
  ch->nranks = nranks;
  ch->comm = comm;
  ch->dev = dev;
  ch->dev_send = perf_dev_alloc(dev, PERF_CHAN_BYTES);
  ch->dev_recv = perf_dev_alloc(dev, (size_t)nranks * PERF_CHAN_BYTES);
  if (!ch->dev_send || !ch->dev_recv) {
    perf_chan_close(ch);
    return NULL;
  }
  return ch;
}

int perf_chan_allgather(struct perf_chan* ch, int first, int nlocal, const void* mine, size_t bytes,
                        void* all) {
  if (bytes > PERF_CHAN_BYTES) return -1;
  if (!ch->shm) {
    if (nlocal != 1) return -1;
    perf_dev_upload(ch->dev, ch->dev_send, mine, bytes);
    if (ncclAllGather(ch->dev_send, ch->dev_recv, bytes, ncclUint8, ch->comm, perf_dev_stream(ch->dev)) !=
            ncclSuccess ||
        perf_dev_sync(ch->dev) != 0)
      return -1;
    perf_dev_download(ch->dev, all, ch->dev_recv, bytes * (size_t)ch->nranks);
    return 0;
  }
  for (int k = 0; k < nlocal; k++)
    memcpy(ch->slots + (size_t)(first + k) * PERF_CHAN_BYTES, (const unsigned char*)mine + (size_t)k * bytes,
           bytes);
  pthread_barrier_wait(&ch->shm->barrier);
  for (int r = 0; r < ch->nranks; r++)
    memcpy((unsigned char*)all + (size_t)r * bytes, ch->slots + (size_t)r * PERF_CHAN_BYTES, bytes);
  pthread_barrier_wait(&ch->shm->barrier); /* nobody writes its slot again before all have read */
  return 0;
}

int perf_chan_barrier(struct perf_chan* ch, int first, int nlocal) {
  unsigned char zeros[64] = {0}, *all = malloc((size_t)ch->nranks);
  int rc = all && nlocal <= 64 ? perf_chan_allgather(ch, first, nlocal, zeros, 1, all) : -1;
  free(all);
  return rc;
}

void perf_chan_set_verdict(struct perf_chan* ch, int rank, const struct perf_verdict* v) {
  if (ch && ch->verdicts) ch->verdicts[rank] = *v;
}

const struct perf_verdict* perf_chan_verdict(struct perf_chan* ch, int rank) {
  return ch && ch->verdicts ? &ch->verdicts[rank] : NULL;
}

void perf_chan_close(struct perf_chan* ch) {
  if (!ch) return;
  if (ch->shm) {
    munmap(ch->shm, ch->shm_bytes); /* the other processes keep their own mappings */
  } else {
    perf_dev_free(ch->dev, ch->dev_send);
    perf_dev_free(ch->dev, ch->dev_recv);
  }
  free(ch);
}
