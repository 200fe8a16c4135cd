// Completion queues: a ring of ibv_wc per CQ, filled by the service thread and the posting path.
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fakeibv_internal.h"

FIB_EXPORT struct ibv_cq* ibv_create_cq(struct ibv_context* context, int cqe, void* cq_context,
                                        struct ibv_comp_channel* channel, int comp_vector) {
  if (!context || cqe < 1 || cqe > (1 << 22) || comp_vector < 0 || comp_vector >= context->num_comp_vectors) {
    errno = EINVAL;
    return NULL;
  }
  struct fib_context* ctx = fib_ctx(context);
  struct fib_cq* c = calloc(1, sizeof(*c));
  if (c) c->ring = calloc((size_t)cqe, sizeof(*c->ring));
  if (!c || !c->ring) {
    free(c);
    errno = ENOMEM;
    return NULL;
  }
  c->cap = (size_t)cqe;
  c->cq.context = context;
  c->cq.channel = channel;
  c->cq.cq_context = cq_context;
  c->cq.cqe = cqe;
  pthread_mutex_init(&c->cq.mutex, NULL);
  pthread_cond_init(&c->cq.cond, NULL);
  pthread_mutex_init(&c->lock, NULL);
  pthread_mutex_lock(&ctx->lock);
  c->next = ctx->cqs;
  ctx->cqs = c;
  pthread_mutex_unlock(&ctx->lock);
  return &c->cq;
}

static void cq_free(struct fib_cq* c) {
  pthread_mutex_destroy(&c->lock);
  pthread_mutex_destroy(&c->cq.mutex);
  pthread_cond_destroy(&c->cq.cond);
  free(c->ring);
  free(c);
}

FIB_EXPORT int ibv_destroy_cq(struct ibv_cq* cq) {
  if (!cq) return EINVAL;
  struct fib_context* ctx = fib_ctx(cq->context);
  struct fib_cq* c = fib_cq(cq);
  pthread_mutex_lock(&ctx->lock);
  if (c->refs > 0) {
    pthread_mutex_unlock(&ctx->lock);
    return EBUSY;
  }
  for (struct fib_cq** pp = &ctx->cqs; *pp; pp = &(*pp)->next) {
    if (*pp == c) {
      *pp = c->next;
      break;
    }
  }
  pthread_mutex_unlock(&ctx->lock);
  cq_free(c);
  return 0;
}

void fib_cq_push(struct fib_cq* c, const struct ibv_wc* wc) {
  pthread_mutex_lock(&c->lock);
  if (c->count == c->cap) {
    // Hardware would overrun the CQ and fail the QP; growing keeps every completion instead,
    // which a test can still notice through the count it polls.
    size_t ncap = c->cap * 2;
    struct ibv_wc* nring = malloc(ncap * sizeof(*nring));
    if (!nring) {
      pthread_mutex_unlock(&c->lock);
      fib_log("CQ %p overflowed and could not grow: a completion (wr_id %llu) is lost", (void*)c,
              (unsigned long long)wc->wr_id);
      return;
    }
    for (size_t i = 0; i < c->count; i++) nring[i] = c->ring[(c->head + i) % c->cap];
    free(c->ring);
    c->ring = nring;
    c->cap = ncap;
    c->head = 0;
  }
  c->ring[(c->head + c->count) % c->cap] = *wc;
  c->count++;
  pthread_mutex_unlock(&c->lock);
}

int fib_poll_cq(struct ibv_cq* ibcq, int num_entries, struct ibv_wc* wc) {
  if (num_entries < 0) return -1;
  struct fib_cq* c = fib_cq(ibcq);
  pthread_mutex_lock(&c->lock);
  int n = 0;
  while (n < num_entries && c->count > 0) {
    wc[n++] = c->ring[c->head];
    c->head = (c->head + 1) % c->cap;
    c->count--;
  }
  pthread_mutex_unlock(&c->lock);
  return n;
}

int fib_req_notify_cq(struct ibv_cq* ibcq, int solicited_only) {
  // Completion channels are not simulated; a consumer polls.
  (void)ibcq, (void)solicited_only;
  return EOPNOTSUPP;
}

void fib_cq_free_all(struct fib_context* ctx) {
  while (ctx->cqs) {
    struct fib_cq* c = ctx->cqs;
    ctx->cqs = c->next;
    cq_free(c);
  }
}
