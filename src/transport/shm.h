/* POSIX shared memory regions that every rank of a world maps.
 *
 * Promises: a created region is zero-filled and has a unique name (pid, address, counter);
 * names are unlinked once every rank has mapped them (shunt_shm_unlink), so nothing is left
 * in /dev/shm after a crash past setup. Errors are values with a message. */
#ifndef SHUNT_TRANSPORT_SHM_H
#define SHUNT_TRANSPORT_SHM_H

#include <stddef.h>

#define SHUNT_SHM_NAME_MAX 64

struct shunt_shm {
  void* base;
  size_t bytes;
  char name[SHUNT_SHM_NAME_MAX];
};

int shunt_shm_create(struct shunt_shm* s, size_t bytes, char* err, size_t len);
int shunt_shm_open(struct shunt_shm* s, const char* name, size_t bytes, char* err, size_t len);
void shunt_shm_unlink(const char* name);
void shunt_shm_close(struct shunt_shm* s);

#endif
