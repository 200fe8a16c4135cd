/* The socket transport's put rate between two ranks on two hosts, both directions at once:
 * each rank's proxy puts SIZE bytes into the peer's output, with a flag, ITERS times, and the
 * rank waits for the peer's flags. What it times is the transport alone (no plan, no staging
 * copies): the world, its proxy and its links, as a plan's port channels drive them.
 *
 * usage: net_put_bench RANK ADDR:PORT SIZE ITERS
 *   rank 0 listens on ADDR:PORT for the side channel that stands in for the bootstrap; both
 *   ranks' worlds listen on their own host's address (rank 0: ADDR; rank 1: the address its
 *   side-channel socket has). Prints one line: bytes per second of one direction. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "transport/backoff.h"
#include "transport/proxy.h"
#include "transport/world.h"
#include "util/socket.h"

struct side {
  int fd;
  uint32_t rank;
};

static int side_allgather(void* ctx, void* buf, size_t bytes) {
  struct side* s = ctx;
  char err[256];
  int64_t dl = shunt_sock_now_ms() + 60000;
  char* mine = (char*)buf + s->rank * bytes;
  char* theirs = (char*)buf + (1 - s->rank) * bytes;
  if (s->rank == 0)
    return shunt_sock_send(s->fd, mine, bytes, dl, err, sizeof(err)) ||
           shunt_sock_recv(s->fd, theirs, bytes, dl, err, sizeof(err));
  return shunt_sock_recv(s->fd, theirs, bytes, dl, err, sizeof(err)) ||
         shunt_sock_send(s->fd, mine, bytes, dl, err, sizeof(err));
}

static int side_barrier(void* ctx) {
  char b[2] = {0, 0};
  return side_allgather(ctx, b, 1);
}

int main(int argc, char** argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: net_put_bench RANK ADDR:PORT SIZE ITERS\n");
    return 2;
  }
  uint32_t rank = (uint32_t)atoi(argv[1]);
  char host[64];
  snprintf(host, sizeof(host), "%s", argv[2]);
  char* colon = strrchr(host, ':');
  if (!colon || rank > 1) return 2;
  *colon = 0;
  uint64_t size = strtoull(argv[3], NULL, 0);
  int iters = atoi(argv[4]);
  char err[512];
  struct sockaddr_storage a = {0};
  struct sockaddr_in* in = (struct sockaddr_in*)&a;
  in->sin_family = AF_INET;
  in->sin_port = htons((uint16_t)atoi(colon + 1));
  if (inet_pton(AF_INET, host, &in->sin_addr) != 1) return 2;
  struct side s = {-1, rank};
  struct sockaddr_storage mine = a;
  if (rank == 0) {
    int lfd = shunt_sock_listen(&a, err, sizeof(err));
    int64_t dl = shunt_sock_now_ms() + 60000;
    while (lfd >= 0 && (s.fd = shunt_sock_accept(lfd)) < 0 && shunt_sock_now_ms() < dl) usleep(1000);
    if (lfd >= 0) close(lfd);
  } else {
    s.fd = shunt_sock_connect(&a, shunt_sock_now_ms() + 60000, err, sizeof(err));
    socklen_t len = sizeof(mine);
    if (s.fd >= 0) getsockname(s.fd, (struct sockaddr*)&mine, &len);
  }
  if (s.fd < 0) {
    fprintf(stderr, "rank %u: side channel: %s\n", rank, err);
    return 1;
  }
  struct shunt_world_exchange ex = {.oob = {&s, side_allgather, side_barrier},
                                    .at = {.node = rank, .nnodes = 2, .net_addr = mine}};
  struct shunt_world_config cfg = {4096, 4096, size};
  struct shunt_world* w = NULL;
  if (shunt_world_create(rank, 2, &cfg, &ex, &w, err, sizeof(err)) != 0) {
    fprintf(stderr, "rank %u: %s\n", rank, err);
    return 1;
  }
  char* src = malloc(size);
  if (!src) return 1;
  for (uint64_t i = 0; i < size; i++) src[i] = (char)(i * 7 + rank);
  shunt_proxy_bind(w->proxy, src, NULL);
  uint32_t peer = 1 - rank;
  struct shunt_trigger t = {.src_off = 0,
                            .dst_off = 0,
                            .size = size,
                            .peer = (uint16_t)peer,
                            .ordinal = 0,
                            .type = SHUNT_TRIG_DATA | SHUNT_TRIG_FLAG,
                            .src_buf = 0,
                            .dst_buf = 1};
  _Atomic uint64_t* flag = &w->peers[rank].inbound[shunt_world_sem(w, 2, peer, 0)];
  int rc = 0;
  uint64_t t0 = 0;
  /* One put each way to warm up, then the timed ones; each waits for the peer's previous
   * put before the next (the output is reused), as a plan's rounds do. */
  for (int k = 0; k <= iters && !rc; k++) {
    if (k == 1) t0 = shunt_now_ns();
    shunt_proxy_push(w->proxy, &t);
    struct shunt_backoff bo = {0};
    while (atomic_load_explicit(flag, memory_order_acquire) < (uint64_t)k + 1) {
      if (atomic_load(&w->failed)) {
        fprintf(stderr, "rank %u: %s\n", rank, w->fail_msg);
        rc = 1;
        break;
      }
      shunt_backoff(&bo, 0);
    }
    shunt_proxy_drain(w->proxy);
  }
  uint64_t dt = shunt_now_ns() - t0;
  /* The peer's bytes, whole. */
  char* got = w->peers[rank].output;
  for (uint64_t i = 0; i < size && !rc; i++)
    if (got[i] != (char)(i * 7 + peer)) {
      fprintf(stderr, "rank %u: byte %llu wrong\n", rank, (unsigned long long)i);
      rc = 1;
    }
  if (!rc && rank == 0) printf("%.0f\n", (double)size * iters / ((double)dt * 1e-9));
  shunt_world_destroy(w);
  free(src);
  close(s.fd);
  return rc;
}
