/* Group semantics for the double: the depth is per thread, as in NCCL, and work issued
 * inside a group is queued and run at the outermost ncclGroupEnd. When one thread drives
 * several communicators (one per rank), running their work one after the other would wait
 * forever at the first barrier, so each communicator's work runs on a thread of its own,
 * in the order it was issued. */
#include <pthread.h>
#include <stdlib.h>

#include "fakenccl/fake_internal.h"

enum item_kind { ITEM_COLL, ITEM_INIT, ITEM_SPLIT };

struct item {
  enum item_kind kind;
  struct ncclComm* comm;
  struct fake_coll coll;
  int color, key;
  ncclComm_t* newcomm;
};

static _Thread_local int depth;
static _Thread_local struct item* queue;
static _Thread_local size_t qlen, qcap;

int fake_group_depth(void) {
  return depth;
}
void fake_group_start(void) {
  depth++;
}

static ncclResult_t add(struct item it) {
  if (qlen == qcap) {
    size_t cap = qcap ? 2 * qcap : 16;
    struct item* q = realloc(queue, cap * sizeof(*q));
    if (!q) return ncclSystemError;
    queue = q;
    qcap = cap;
  }
  queue[qlen++] = it;
  return ncclSuccess;
}

ncclResult_t fake_group_add_coll(struct ncclComm* c, const struct fake_coll* a) {
  return add((struct item){.kind = ITEM_COLL, .comm = c, .coll = *a});
}
ncclResult_t fake_group_add_init(struct ncclComm* c) {
  return add((struct item){.kind = ITEM_INIT, .comm = c});
}
ncclResult_t fake_group_add_split(struct ncclComm* c, int color, int key, ncclComm_t* newcomm) {
  return add((struct item){.kind = ITEM_SPLIT, .comm = c, .color = color, .key = key, .newcomm = newcomm});
}

static ncclResult_t run_item(const struct item* it) {
  switch (it->kind) {
    case ITEM_COLL:
      return fake_coll_run(it->comm, &it->coll);
    case ITEM_INIT:
      return fake_comm_connect(it->comm);
    default:
      return fake_comm_split(it->comm, it->color, it->key, it->newcomm);
  }
}

struct lane {
  struct ncclComm* comm;
  const struct item* items;
  size_t n;
  ncclResult_t rc;
  pthread_t thread;
  int started;
};

static void* lane_main(void* arg) {
  struct lane* l = arg;
  l->rc = ncclSuccess;
  for (size_t i = 0; i < l->n && l->rc == ncclSuccess; i++)
    if (l->items[i].comm == l->comm) l->rc = run_item(&l->items[i]);
  return NULL;
}

ncclResult_t fake_group_end(void) {
  if (depth == 0) return ncclInvalidUsage;
  if (--depth > 0) return ncclSuccess;
  struct item* items = queue;
  size_t n = qlen;
  queue = NULL;
  qlen = qcap = 0;
  struct lane* lanes = calloc(n ? n : 1, sizeof(*lanes));
  size_t nl = 0;
  ncclResult_t rc = lanes ? ncclSuccess : ncclSystemError;
  for (size_t i = 0; lanes && i < n; i++) {
    size_t l = 0;
    while (l < nl && lanes[l].comm != items[i].comm) l++;
    if (l == nl) lanes[nl++] = (struct lane){.comm = items[i].comm, .items = items, .n = n};
  }
  if (nl == 1) {
    lane_main(&lanes[0]);
  } else {
    for (size_t l = 0; l < nl; l++)
      lanes[l].started = pthread_create(&lanes[l].thread, NULL, lane_main, &lanes[l]) == 0;
    for (size_t l = 0; l < nl; l++) {
      if (lanes[l].started)
        pthread_join(lanes[l].thread, NULL);
      else
        lanes[l].rc = ncclSystemError;
    }
  }
  for (size_t l = 0; l < nl; l++)
    if (rc == ncclSuccess) rc = lanes[l].rc;
  free(lanes);
  free(items);
  return rc;
}
