/* The stand-in's user objects (fake_cuda.h): resources a graph keeps alive, as CUDA's
 * cuUserObjectCreate / cuGraphRetainUserObject. An object's destructor runs when its last
 * reference goes: the creator's, and those of every graph and instantiated graph that retained
 * it (instantiating copies the graph's references; destroying a graph or an instantiated graph
 * drops them). The destructor runs on the thread that drops the last reference; like CUDA's, it
 * must not call the driver. */
#include <pthread.h>
#include <stdlib.h>

#include "fake_cuda.h"

#define FC_USER_OBJECT_NO_DESTRUCTOR_SYNC 1
#define FC_GRAPH_USER_OBJECT_MOVE 1

struct fc_uobj {
  void* ptr;
  void (*destroy)(void*);
  unsigned refs; /* under mu */
};

/* Which graph holds how many references to which object. */
struct held {
  const void* graph;
  struct fc_uobj* obj;
  unsigned count;
  struct held* next;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct held* helds;

/* Drops n references; the object when none is left (returned, for its destructor to run
 * outside the lock). Caller holds mu. */
static struct fc_uobj* drop(struct fc_uobj* o, unsigned n) {
  o->refs = n >= o->refs ? 0 : o->refs - n;
  return o->refs == 0 ? o : NULL;
}

static void finish(struct fc_uobj* o) {
  if (!o) return;
  if (o->destroy) o->destroy(o->ptr);
  free(o);
}

FC_EXPORT int cuUserObjectCreate(struct fc_uobj** out, void* ptr, void (*destroy)(void*), unsigned initial,
                                 unsigned flags) {
  /* CUDA accepts only this flag: destructors are not synchronized with the driver's work. */
  if (!out || !destroy || initial == 0 || flags != FC_USER_OBJECT_NO_DESTRUCTOR_SYNC)
    return FC_ERROR_INVALID_VALUE;
  struct fc_uobj* o = calloc(1, sizeof(*o));
  if (!o) return FC_ERROR_OUT_OF_MEMORY;
  o->ptr = ptr;
  o->destroy = destroy;
  o->refs = initial;
  *out = o;
  return FC_SUCCESS;
}

FC_EXPORT int cuUserObjectRetain(struct fc_uobj* o, unsigned n) {
  if (!o || n == 0) return FC_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&mu);
  o->refs += n;
  pthread_mutex_unlock(&mu);
  return FC_SUCCESS;
}

FC_EXPORT int cuUserObjectRelease(struct fc_uobj* o, unsigned n) {
  if (!o || n == 0) return FC_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&mu);
  struct fc_uobj* gone = drop(o, n);
  pthread_mutex_unlock(&mu);
  finish(gone);
  return FC_SUCCESS;
}

/* Adds n references of g to o. Caller holds mu. */
static int hold(const void* g, struct fc_uobj* o, unsigned n) {
  for (struct held* h = helds; h; h = h->next)
    if (h->graph == g && h->obj == o) {
      h->count += n;
      return FC_SUCCESS;
    }
  struct held* h = calloc(1, sizeof(*h));
  if (!h) return FC_ERROR_OUT_OF_MEMORY;
  *h = (struct held){g, o, n, helds};
  helds = h;
  return FC_SUCCESS;
}

FC_EXPORT int cuGraphRetainUserObject(void* g, struct fc_uobj* o, unsigned n, unsigned flags) {
  if (!g || !o || n == 0 || (flags & ~FC_GRAPH_USER_OBJECT_MOVE)) return FC_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&mu);
  int rc = hold(g, o, n);
  /* MOVE: the caller's references become the graph's; otherwise the graph takes new ones. */
  if (rc == FC_SUCCESS && !(flags & FC_GRAPH_USER_OBJECT_MOVE)) o->refs += n;
  pthread_mutex_unlock(&mu);
  return rc;
}

FC_EXPORT int cuGraphReleaseUserObject(void* g, struct fc_uobj* o, unsigned n) {
  if (!g || !o || n == 0) return FC_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&mu);
  struct fc_uobj* gone = NULL;
  int rc = FC_ERROR_INVALID_VALUE;
  for (struct held** pp = &helds; *pp; pp = &(*pp)->next)
    if ((*pp)->graph == g && (*pp)->obj == o && (*pp)->count >= n) {
      struct held* h = *pp;
      h->count -= n;
      if (h->count == 0) {
        *pp = h->next;
        free(h);
      }
      gone = drop(o, n);
      rc = FC_SUCCESS;
      break;
    }
  pthread_mutex_unlock(&mu);
  finish(gone);
  return rc;
}

void fc_graph_objs_copy(const void* from, const void* to) {
  pthread_mutex_lock(&mu);
  for (struct held* h = helds; h; h = h->next)
    if (h->graph == from && hold(to, h->obj, h->count) == FC_SUCCESS) h->obj->refs += h->count;
  pthread_mutex_unlock(&mu);
}

void fc_graph_objs_drop(const void* g) {
  for (;;) {
    pthread_mutex_lock(&mu);
    struct held** pp = &helds;
    while (*pp && (*pp)->graph != g) pp = &(*pp)->next;
    struct held* h = *pp;
    struct fc_uobj* gone = NULL;
    if (h) {
      *pp = h->next;
      gone = drop(h->obj, h->count);
      free(h);
    }
    pthread_mutex_unlock(&mu);
    if (!h) return;
    finish(gone);
  }
}
