/* POSIX shared memory: shm_open + ftruncate + mmap. */
#include "transport/shm.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "util/status.h"

static atomic_uint shm_counter;

static int map_fd(struct shunt_shm* s, int fd, size_t bytes, char* err, size_t len) {
  void* p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    int e = errno;
    snprintf(err, len, "mmap of %zu bytes (%s) failed: %s", bytes, s->name, strerror(e));
    return shunt_errno_status(e);
  }
  s->base = p;
  s->bytes = bytes;
  return 0;
}

int shunt_shm_create(struct shunt_shm* s, size_t bytes, char* err, size_t len) {
  memset(s, 0, sizeof(*s));
  snprintf(s->name, sizeof(s->name), "/shunt-%d-%lx-%u", (int)getpid(), (unsigned long)(uintptr_t)s,
           atomic_fetch_add(&shm_counter, 1));
  int fd = shm_open(s->name, O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) {
    int e = errno;
    snprintf(err, len, "shm_open(%s) failed: %s", s->name, strerror(e));
    return shunt_errno_status(e);
  }
  if (ftruncate(fd, (off_t)bytes) != 0) {
    int e = errno;
    snprintf(err, len, "ftruncate(%s, %zu) failed: %s", s->name, bytes, strerror(e));
    close(fd);
    shm_unlink(s->name);
    return shunt_errno_status(e);
  }
  int rc = map_fd(s, fd, bytes, err, len);
  if (rc != SHUNT_OK) shm_unlink(s->name);
  return rc;
}

int shunt_shm_open(struct shunt_shm* s, const char* name, size_t bytes, char* err, size_t len) {
  memset(s, 0, sizeof(*s));
  snprintf(s->name, sizeof(s->name), "%s", name);
  int fd = shm_open(name, O_RDWR, 0600);
  if (fd < 0) {
    int e = errno;
    snprintf(err, len, "shm_open(%s) failed: %s", name, strerror(e));
    return shunt_errno_status(e);
  }
  return map_fd(s, fd, bytes, err, len);
}

void shunt_shm_unlink(const char* name) {
  shm_unlink(name);
}

void shunt_shm_close(struct shunt_shm* s) {
  if (s->base) munmap(s->base, s->bytes);
  s->base = NULL;
}
