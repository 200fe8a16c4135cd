#include "comm/redop.h"

#include <pthread.h>
#include <stdlib.h>

struct entry {
  ncclRedOp_t op;
  struct shunt_redop_info info;
};

struct shunt_redop_table {
  pthread_mutex_t mu;
  struct entry* e;
  size_t n, cap;
};

struct shunt_redop_table* shunt_redop_table_new(void) {
  struct shunt_redop_table* t = calloc(1, sizeof(*t));
  if (t) pthread_mutex_init(&t->mu, NULL);
  return t;
}

void shunt_redop_table_free(struct shunt_redop_table* t) {
  if (!t) return;
  pthread_mutex_destroy(&t->mu);
  free(t->e);
  free(t);
}

int shunt_redop_add(struct shunt_redop_table* t, ncclRedOp_t op, const struct shunt_redop_info* info) {
  int rc = 0;
  pthread_mutex_lock(&t->mu);
  size_t i = 0;
  while (i < t->n && t->e[i].op != op) i++;
  if (i == t->n) {
    if (t->n == t->cap) {
      size_t ncap = t->cap ? t->cap * 2 : 4;
      struct entry* ne = realloc(t->e, ncap * sizeof(*ne));
      if (!ne) rc = -1;
      else {
        t->e = ne;
        t->cap = ncap;
      }
    }
    if (rc == 0) t->n++;
  }
  if (rc == 0) t->e[i] = (struct entry){op, *info};
  pthread_mutex_unlock(&t->mu);
  return rc;
}

int shunt_redop_find(struct shunt_redop_table* t, ncclRedOp_t op, struct shunt_redop_info* out) {
  int rc = -1;
  pthread_mutex_lock(&t->mu);
  for (size_t i = 0; i < t->n; i++)
    if (t->e[i].op == op) {
      *out = t->e[i].info;
      rc = 0;
      break;
    }
  pthread_mutex_unlock(&t->mu);
  return rc;
}

void shunt_redop_remove(struct shunt_redop_table* t, ncclRedOp_t op) {
  pthread_mutex_lock(&t->mu);
  for (size_t i = 0; i < t->n; i++)
    if (t->e[i].op == op) {
      t->e[i] = t->e[--t->n];
      break;
    }
  pthread_mutex_unlock(&t->mu);
}

ncclRedOp_t shunt_redop_fresh(struct shunt_redop_table* t) {
  pthread_mutex_lock(&t->mu);
  int v = ncclNumOps;
  for (;;) {
    size_t i = 0;
    while (i < t->n && (int)t->e[i].op != v) i++;
    if (i == t->n) break;
    v++;
  }
  pthread_mutex_unlock(&t->mu);
  return (ncclRedOp_t)v;
}
