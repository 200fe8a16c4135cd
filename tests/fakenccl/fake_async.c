/* Nonblocking communicators in the double, as NCCL runs them: init, split and shrink of a
 * communicator whose config says blocking = 0 return ncclInProgress and go on in a thread of
 * their own; ncclCommGetAsyncError answers ncclInProgress until they end, and a split's or
 * shrink's *newcomm is written only then. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "fakenccl/fake_internal.h"

int fake_config_blocking(const ncclConfig_t* config) {
  if (!config || config->magic != 0xcafebeef || config->blocking == NCCL_CONFIG_UNDEF_INT) return 1;
  return config->blocking != 0;
}

struct job {
  struct ncclComm* c;
  int kind, color, key, nexclude;
  int* exclude;
  ncclComm_t* newcomm;
};

static void* run(void* arg) {
  struct job* j = arg;
  ncclResult_t rc;
  ncclComm_t child = NULL;
  if (j->kind == FAKE_ASYNC_INIT)
    rc = fake_comm_connect(j->c);
  else if (j->kind == FAKE_ASYNC_SPLIT)
    rc = fake_comm_split(j->c, j->color, j->key, &child);
  else
    rc = fake_comm_shrink(j->c, j->exclude, j->nexclude, &child);
  if (j->newcomm) __atomic_store_n(j->newcomm, child, __ATOMIC_RELEASE);
  atomic_store(&j->c->async, rc);
  free(j->exclude);
  free(j);
  return NULL;
}

ncclResult_t fake_async_start(struct ncclComm* c, int kind, int color, int key, const int* exclude,
                              int nexclude, ncclComm_t* newcomm) {
  struct job* j = calloc(1, sizeof(*j));
  if (!j) return ncclSystemError;
  *j = (struct job){c, kind, color, key, nexclude, NULL, newcomm};
  if (nexclude > 0) {
    j->exclude = malloc((size_t)nexclude * sizeof(int));
    if (!j->exclude) {
      free(j);
      return ncclSystemError;
    }
    memcpy(j->exclude, exclude, (size_t)nexclude * sizeof(int));
  }
  if (newcomm) *newcomm = NULL;
  atomic_store(&c->async, ncclInProgress);
  pthread_t t;
  if (pthread_create(&t, NULL, run, j) != 0) {
    atomic_store(&c->async, ncclSuccess);
    free(j->exclude);
    free(j);
    return ncclSystemError;
  }
  pthread_detach(t);
  return ncclInProgress;
}
