/* Chunked arena: blocks of at least 64 KiB, each a separate malloc so large requests (a
 * long ops array) get a block of their own. */
#include "plan/arena.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ARENA_BLOCK (64u * 1024u)
#define ARENA_ALIGN 16u

struct block {
  struct block* next;
  size_t used, cap;
  _Alignas(16) unsigned char data[];
};

struct shunt_arena {
  struct block* head;
};

struct shunt_arena* shunt_arena_new(void) {
  return calloc(1, sizeof(struct shunt_arena));
}

void shunt_arena_free(struct shunt_arena* a) {
  if (!a) return;
  struct block* b = a->head;
  while (b) {
    struct block* n = b->next;
    free(b);
    b = n;
  }
  free(a);
}

void* shunt_arena_calloc(struct shunt_arena* a, size_t n, size_t size) {
  if (size && n > SIZE_MAX / size) return NULL;
  size_t bytes = n * size;
  if (bytes == 0) bytes = 1;
  if (bytes > SIZE_MAX - ARENA_ALIGN - sizeof(struct block)) return NULL;
  bytes = (bytes + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
  struct block* b = a->head;
  if (!b || b->cap - b->used < bytes) {
    size_t cap = bytes > ARENA_BLOCK ? bytes : ARENA_BLOCK;
    struct block* nb = malloc(sizeof(struct block) + cap);
    if (!nb) return NULL;
    nb->used = 0;
    nb->cap = cap;
    if (b && bytes > ARENA_BLOCK) {
      /* Keep filling the current block: put the big one behind it. */
      nb->next = b->next;
      b->next = nb;
    } else {
      nb->next = b;
      a->head = nb;
    }
    b = nb;
  }
  void* p = b->data + b->used;
  b->used += bytes;
  memset(p, 0, bytes);
  return p;
}

char* shunt_arena_strdup(struct shunt_arena* a, const char* s) {
  size_t n = strlen(s) + 1;
  char* d = shunt_arena_calloc(a, n, 1);
  if (d) memcpy(d, s, n);
  return d;
}
