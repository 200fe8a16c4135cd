/* A grow-only allocator owning every allocation of one parsed plan, so a plan is freed in
 * one call however it was built (or abandoned half-way by a parse error).
 *
 * Promises: allocations are zero-filled and 16-byte aligned; NULL only when out of memory or
 * when the request overflows. Not thread-safe; one arena belongs to one parse. */
#ifndef SHUNT_PLAN_ARENA_H
#define SHUNT_PLAN_ARENA_H

#include <stddef.h>

struct shunt_arena;

struct shunt_arena* shunt_arena_new(void);
void shunt_arena_free(struct shunt_arena* a);
/* n elements of size bytes each, zero-filled; n == 0 gives a valid unique pointer. */
void* shunt_arena_calloc(struct shunt_arena* a, size_t n, size_t size);
char* shunt_arena_strdup(struct shunt_arena* a, const char* s);

#endif
