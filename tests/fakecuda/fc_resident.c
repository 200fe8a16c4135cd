/* Co-residency (README.md): a device holds FAKECUDA_SMS x FC_BLOCKS_PER_SM blocks at once, across
 * every kernel running on it, from any stream; a launch whose blocks do not fit waits before it
 * runs. A GPU admits a grid's blocks one by one as slots free up; the kernels' CPU build runs a
 * grid only whole, so a launch here is admitted whole: stricter for a grid that would partly fit. */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "fake_cuda.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static unsigned used[FC_MAX_DEVICES]; /* slots held by running kernels (and fakecuda_occupy) */

static unsigned capacity(void) {
  return (unsigned)fc_sms() * FC_BLOCKS_PER_SM;
}

/* The slots a launch of `blocks` takes: a grid larger than the device cannot be held whole, and
 * waits for all of it (the stand-in cannot run a grid in waves). */
static unsigned want(unsigned blocks) {
  return blocks > capacity() ? capacity() : blocks;
}

void fc_resident_enter(int device, unsigned blocks) {
  if (device < 0 || device >= FC_MAX_DEVICES || blocks == 0 || fc_lenient("residency")) return;
  unsigned w = want(blocks);
  pthread_mutex_lock(&mu);
  while (used[device] + w > capacity()) pthread_cond_wait(&cv, &mu);
  used[device] += w;
  pthread_mutex_unlock(&mu);
}

void fc_resident_leave(int device, unsigned blocks) {
  if (device < 0 || device >= FC_MAX_DEVICES || blocks == 0 || fc_lenient("residency")) return;
  unsigned w = want(blocks);
  pthread_mutex_lock(&mu);
  used[device] -= w;
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);
}

struct hold {
  int device;
  unsigned slots;
  int ms;
};

static void* release_later(void* arg) {
  struct hold* h = arg;
  struct timespec ts = {h->ms / 1000, (long)(h->ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
  fc_resident_leave(h->device, h->slots);
  free(h);
  return NULL;
}

/* Test export: another application's resident kernel holds `slots` of device's block slots for
 * `ms` milliseconds from now (taken at once, waiting until they are free). 0, or -1. */
FC_EXPORT int fakecuda_occupy(int device, int slots, int ms) {
  if (device < 0 || device >= FC_MAX_DEVICES || slots <= 0 || ms < 0) return -1;
  struct hold* h = malloc(sizeof(*h));
  if (!h) return -1;
  *h = (struct hold){device, (unsigned)slots, ms};
  fc_resident_enter(device, h->slots);
  pthread_t t;
  if (pthread_create(&t, NULL, release_later, h) != 0) {
    fc_resident_leave(device, h->slots);
    free(h);
    return -1;
  }
  pthread_detach(t);
  return 0;
}

/* Test export: block slots of the device held now. */
FC_EXPORT int fakecuda_resident_slots(int device) {
  if (device < 0 || device >= FC_MAX_DEVICES) return -1;
  pthread_mutex_lock(&mu);
  int n = (int)used[device];
  pthread_mutex_unlock(&mu);
  return n;
}
