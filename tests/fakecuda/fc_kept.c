/* Memory its owner freed while others still hold it (fake_cuda.h): the driver keeps a device
 * allocation's pages while an importer maps them (cuIpcOpenMemHandle, or an imported VMM handle)
 * or a shareable descriptor of it is open, so that memory is not returned to the device; after
 * cuMemFree of exported memory it is even undefined behaviour. Each memfd here ends with a
 * trailer page counting the importers of every process; an owner's free or last release that
 * finds importers (or, for VMM memory, another descriptor of the allocation open in its process)
 * keeps the pages and counts them until the last holder lets go: fakecuda_pinned_bytes(), printed
 * at exit; FAKECUDA_STRICT_IPC=1 aborts at such a free instead, with the reason. */
#include <dirent.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fake_cuda.h"

struct trailer {
  _Atomic int imports; /* importers' mappings and handles, in every process */
};

/* An allocation freed by its owner while held. */
struct kept {
  struct trailer* t; /* its trailer page, mapped here */
  dev_t dev;
  ino_t ino;
  size_t bytes;
  struct kept* next;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct kept* kept;
static _Atomic long imports_here; /* this process's importer mappings and handles */

static size_t page(void) {
  return (size_t)sysconf(_SC_PAGESIZE);
}

size_t fc_kept_trailer_at(size_t bytes) {
  return (bytes + page() - 1) / page() * page();
}

int fc_kept_size(int fd, size_t bytes) {
  return ftruncate(fd, (off_t)(fc_kept_trailer_at(bytes) + page()));
}

static struct trailer* map_trailer(int fd, size_t bytes) {
  void* p = mmap(NULL, page(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)fc_kept_trailer_at(bytes));
  return p == MAP_FAILED ? NULL : p;
}

void* fc_kept_import(int fd, size_t bytes) {
  struct trailer* t = map_trailer(fd, bytes);
  if (t) {
    atomic_fetch_add(&t->imports, 1);
    atomic_fetch_add(&imports_here, 1);
  }
  return t;
}

void fc_kept_unimport(void* t) {
  if (!t) return;
  atomic_fetch_sub(&((struct trailer*)t)->imports, 1);
  atomic_fetch_sub(&imports_here, 1);
  munmap(t, page());
}

/* Other processes' allocations this process maps or holds a handle of (a test counts what a
 * library keeps). */
FC_EXPORT long fakecuda_imports(void) {
  return atomic_load(&imports_here);
}

/* Descriptors of this process (but `except`) open on the file dev:ino. */
static int open_here(dev_t dev, ino_t ino, int except) {
  DIR* d = opendir("/proc/self/fd");
  if (!d) return 0;
  int n = 0;
  for (struct dirent* e; (e = readdir(d));) {
    int fd = atoi(e->d_name);
    struct stat st;
    if (e->d_name[0] == '.' || fd == except || fd == dirfd(d) || fstat(fd, &st) != 0) continue;
    n += st.st_dev == dev && st.st_ino == ino;
  }
  closedir(d);
  return n;
}

static bool held(const struct kept* k) {
  return atomic_load(&k->t->imports) > 0 || open_here(k->dev, k->ino, -1) > 0;
}

long long fakecuda_pinned_bytes(void);
static void at_exit(void) {
  long long n = fakecuda_pinned_bytes();
  if (n)
    fprintf(stderr,
            "fakecuda: %lld bytes of device memory freed by their owner are still held by importers or "
            "descriptors: the device never got them back\n",
            n);
}

bool fc_kept_on_release(int fd, size_t bytes, bool descriptors, const char* what) {
  struct stat st;
  struct trailer* t = map_trailer(fd, bytes);
  if (!t || fstat(fd, &st) != 0) {
    if (t) munmap(t, page());
    return false;
  }
  int imports = atomic_load(&t->imports), fds = descriptors ? open_here(st.st_dev, st.st_ino, fd) : 0;
  if (imports == 0 && fds == 0) {
    munmap(t, page());
    return false;
  }
  const char* v = getenv("FAKECUDA_STRICT_IPC");
  if (v && *v && strcmp(v, "0") != 0) {
    fprintf(stderr,
            "fakecuda: UB: freed while imported: %s of %zu bytes while %d importer mapping(s) and %d other "
            "descriptor(s) of this process still hold it (FAKECUDA_STRICT_IPC); aborting\n",
            what, bytes, imports, fds);
    abort();
  }
  struct kept* k = malloc(sizeof(*k));
  if (!k) {
    munmap(t, page());
    return true;
  }
  *k = (struct kept){t, st.st_dev, st.st_ino, bytes, NULL};
  pthread_mutex_lock(&mu);
  static bool registered;
  if (!registered) registered = atexit(at_exit) == 0;
  k->next = kept;
  kept = k;
  pthread_mutex_unlock(&mu);
  return true;
}

/* Bytes freed by their owner and still held; those no longer held are forgotten. */
FC_EXPORT long long fakecuda_pinned_bytes(void) {
  long long n = 0;
  pthread_mutex_lock(&mu);
  for (struct kept** pp = &kept; *pp;) {
    struct kept* k = *pp;
    if (held(k)) {
      n += (long long)k->bytes;
      pp = &k->next;
      continue;
    }
    *pp = k->next;
    munmap(k->t, page());
    free(k);
  }
  pthread_mutex_unlock(&mu);
  return n;
}
