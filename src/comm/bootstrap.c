/* Joining a rendezvous (start, finish), the point-to-point calls, abort and destroy; see
 * bootstrap.h. The root is in bootstrap_root.c, connections in bootstrap_link.c, the
 * collectives and split in bootstrap_coll.c. */
#include "comm/bootstrap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "comm/bootstrap_internal.h"
#include "util/log.h"
#include "util/status.h"

#define ROOT_SLACK_MS 10000 /* the root answers at its own deadline: wait a little longer */
#define MAX_FAIL_TEXT 4096
#define ROOT_CONNECT_S 30 /* longest wait to reach the root */

int shunt_bootstrap_init_start(const struct shunt_bootstrap_id* id, int rank, int nranks,
                               struct shunt_bootstrap** out, char* err, size_t errlen) {
  *out = NULL;
  if (!shunt_bootstrap_id_valid(id)) {
    snprintf(err, errlen, "the id carries no shunt rendezvous");
    SHUNT_WARN("bootstrap: %s", err);
    return SHUNT_E_INVALID;
  }
  if (nranks < 1 || nranks > SHUNT_BOOTSTRAP_MAX_RANKS || rank < 0 || rank >= nranks) {
    snprintf(err, errlen, "rank %d of %d is not valid", rank, nranks);
    SHUNT_WARN("bootstrap: %s", err);
    return SHUNT_E_INVALID;
  }
  struct sockaddr_storage self, root;
  shunt_wire_to_sockaddr(&id->root, &root);
  int lfd = shunt_sock_pick_addr(&self, err, errlen);
  if (lfd == SHUNT_OK) lfd = shunt_sock_listen(&self, err, errlen);
  if (lfd < 0) {
    SHUNT_WARN("bootstrap: rank %d of %d: %s", rank, nranks, err);
    return lfd;
  }
  struct shunt_bootstrap* b =
      shunt_boot_new(rank, nranks, id->key, (int)id->timeout_s, lfd, &self, err, errlen);
  if (!b) {
    SHUNT_WARN("bootstrap: rank %d of %d: %s", rank, nranks, err);
    return SHUNT_E_NOMEM;
  }
  /* The root's listener is up before the id exists, so connecting waits for nobody. */
  int64_t deadline = shunt_boot_deadline(b);
  char why[256], a[80];
  /* The root listens before the id exists: a refusal means it is gone, so retry only briefly. */
  int connect_s = b->timeout_s < ROOT_CONNECT_S ? b->timeout_s : ROOT_CONNECT_S;
  int fd = shunt_sock_connect(&root, shunt_sock_now_ms() + connect_s * 1000, why, sizeof(why));
  struct {
    struct shunt_boot_hdr h;
    struct shunt_wire_addr addr;
  } hello = {{SHUNT_BOOT_WIRE_MAGIC, SHUNT_BOOT_ROOT_HELLO, b->key, rank, nranks, sizeof(b->self)}, b->self};
  int rc = fd < 0 ? fd : shunt_sock_send(fd, &hello, sizeof(hello), deadline, why, sizeof(why));
  if (rc != SHUNT_OK) {
    if (fd >= 0) close(fd);
    shunt_boot_fail(b, rc, err, errlen, "cannot reach the bootstrap root at %s: %s",
                    shunt_sock_str(&root, a, sizeof(a)), why);
    shunt_bootstrap_destroy(b);
    return rc;
  }
  b->root_fd = fd; /* b is not shared yet: abort cannot run */
  b->root_deadline = deadline + ROOT_SLACK_MS;
  SHUNT_INFO(SHUNT_BOOTSTRAP, "bootstrap: rank %d of %d listens on %s, registered with the root at %s", rank,
             nranks, shunt_sock_str(&self, why, sizeof(why)), shunt_sock_str(&root, a, sizeof(a)));
  *out = b;
  return 0;
}

/* The root connection is done with (answered, or failed): abort must not touch it again. */
static void drop_root(struct shunt_bootstrap* b) {
  pthread_mutex_lock(&b->lock);
  int fd = b->root_fd;
  b->root_fd = -1;
  pthread_mutex_unlock(&b->lock);
  if (fd >= 0) close(fd);
}

int shunt_bootstrap_init_finish(struct shunt_bootstrap* b, char* err, size_t errlen) {
  if (b->table) return 0;
  if (b->root_fd < 0)
    return shunt_boot_fail(b, SHUNT_E_INVALID, err, errlen, "the rendezvous already failed");
  char why[256];
  struct shunt_boot_hdr h;
  int fd = b->root_fd;
  int rc = shunt_sock_recv(fd, &h, sizeof(h), b->root_deadline, why, sizeof(why));
  if (rc != SHUNT_OK) {
    if (atomic_load(&b->aborted))
      return shunt_boot_fail(b, SHUNT_E_ABORTED, err, errlen, "the communicator was aborted");
    return shunt_boot_fail(b, rc, err, errlen, "no answer from the bootstrap root: %s%s", why,
                           strstr(why, "closed") ? " (did the process that made the id exit?)" : "");
  }
  size_t table_len = (size_t)b->nranks * sizeof(*b->table);
  if (h.magic != SHUNT_BOOT_WIRE_MAGIC || h.key != b->key ||
      (h.type == SHUNT_BOOT_TABLE ? h.len != table_len : h.type != SHUNT_BOOT_FAIL || h.len > MAX_FAIL_TEXT))
    return shunt_boot_fail(b, SHUNT_E_INVALID, err, errlen, "malformed answer from the bootstrap root");
  if (h.type == SHUNT_BOOT_FAIL) {
    char text[MAX_FAIL_TEXT + 1] = "";
    if (shunt_sock_recv(fd, text, h.len, b->root_deadline, why, sizeof(why)) != 0)
      snprintf(text, sizeof(text), "the bootstrap root failed the rendezvous (%s)", why);
    drop_root(b);
    return shunt_boot_fail(b, SHUNT_E_PEER, err, errlen, "%s", text);
  }
  struct shunt_wire_addr* table = malloc(table_len);
  if (!table)
    return shunt_boot_fail(b, SHUNT_E_NOMEM, err, errlen, "out of memory for %d addresses", b->nranks);
  rc = shunt_sock_recv(fd, table, table_len, b->root_deadline, why, sizeof(why));
  if (rc != SHUNT_OK) {
    free(table);
    return shunt_boot_fail(b, rc, err, errlen, "reading the table from the bootstrap root: %s", why);
  }
  if (memcmp(&table[b->rank], &b->self, sizeof(b->self)) != 0) {
    free(table);
    return shunt_boot_fail(b, SHUNT_E_INVALID, err, errlen,
                           "the bootstrap root's table does not hold this rank's address");
  }
  drop_root(b);
  b->table = table;
  SHUNT_INFO(SHUNT_BOOTSTRAP, "bootstrap: rank %d of %d joined", b->rank, b->nranks);
  return 0;
}

int shunt_bootstrap_init(const struct shunt_bootstrap_id* id, int rank, int nranks,
                         struct shunt_bootstrap** out, char* err, size_t errlen) {
  struct shunt_bootstrap* b = NULL;
  SHUNT_TRY(shunt_bootstrap_init_start(id, rank, nranks, &b, err, errlen));
  int rc = shunt_bootstrap_init_finish(b, err, errlen);
  if (rc != SHUNT_OK) {
    shunt_bootstrap_destroy(b);
    return rc;
  }
  *out = b;
  return 0;
}

int shunt_bootstrap_rank(const struct shunt_bootstrap* b) {
  return b->rank;
}
int shunt_bootstrap_nranks(const struct shunt_bootstrap* b) {
  return b->nranks;
}
void shunt_bootstrap_listen_addr(const struct shunt_bootstrap* b, struct shunt_wire_addr* out) {
  *out = b->self;
}

int shunt_bootstrap_send(struct shunt_bootstrap* b, int peer, int tag, const void* data, size_t bytes,
                         char* err, size_t errlen) {
  return shunt_boot_send(b, peer, SHUNT_BOOT_USER, tag, data, bytes, shunt_boot_deadline(b), err, errlen);
}

int shunt_bootstrap_recv(struct shunt_bootstrap* b, int peer, int tag, void* data, size_t bytes, char* err,
                         size_t errlen) {
  return shunt_boot_recv(b, peer, SHUNT_BOOT_USER, tag, data, bytes, shunt_boot_deadline(b), err, errlen);
}

void shunt_bootstrap_abort(struct shunt_bootstrap* b) {
  if (!b) return;
  pthread_mutex_lock(&b->lock);
  atomic_store(&b->aborted, 1);
  /* shutdown, not close: the owning thread may be polling these fds; destroy closes them. */
  if (b->lfd >= 0) shutdown(b->lfd, SHUT_RDWR);
  if (b->root_fd >= 0) shutdown(b->root_fd, SHUT_RDWR);
  for (int i = 0; i < BOOT_PENDING; i++)
    if (b->pending[i].fd >= 0) shutdown(b->pending[i].fd, SHUT_RDWR);
  for (int p = 0; p < b->nranks; p++) {
    if (b->peers[p].out >= 0) shutdown(b->peers[p].out, SHUT_RDWR);
    if (b->peers[p].in.fd >= 0) shutdown(b->peers[p].in.fd, SHUT_RDWR);
  }
  pthread_mutex_unlock(&b->lock);
  SHUNT_INFO(SHUNT_BOOTSTRAP, "bootstrap: rank %d of %d aborted", b->rank, b->nranks);
}

void shunt_bootstrap_destroy(struct shunt_bootstrap* b) {
  if (!b) return;
  shunt_boot_close_links(b);
  pthread_mutex_destroy(&b->lock);
  free(b->table);
  free(b->peers);
  free(b->pfd);
  free(b->pfd_who);
  free(b);
}
