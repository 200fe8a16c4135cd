// Self-test of the libibverbs stand-in, driven the way the verbs transport drives it: the library is
// dlopen()ed by path (argv[1]) and reached through dlsym and the header's inline post/poll calls.
// A responder process owns the target memory; a victim process is stopped and killed to see the
// transport timeout; the parent sends.
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fakeibv_wire.h"

struct api {
  struct ibv_device** (*get_device_list)(int*);
  void (*free_device_list)(struct ibv_device**);
  const char* (*get_device_name)(struct ibv_device*);
  struct ibv_context* (*open_device)(struct ibv_device*);
  int (*close_device)(struct ibv_context*);
  int (*query_device)(struct ibv_context*, struct ibv_device_attr*);
  int (*query_port)(struct ibv_context*, uint8_t, struct ibv_port_attr*);
  int (*query_gid)(struct ibv_context*, uint8_t, int, union ibv_gid*);
  struct ibv_pd* (*alloc_pd)(struct ibv_context*);
  int (*dealloc_pd)(struct ibv_pd*);
  struct ibv_mr* (*reg_mr)(struct ibv_pd*, void*, size_t, int);
  int (*dereg_mr)(struct ibv_mr*);
  struct ibv_mr* (*reg_dmabuf_mr)(struct ibv_pd*, uint64_t, size_t, uint64_t, int, int);
  struct ibv_cq* (*create_cq)(struct ibv_context*, int, void*, struct ibv_comp_channel*, int);
  int (*destroy_cq)(struct ibv_cq*);
  struct ibv_qp* (*create_qp)(struct ibv_pd*, struct ibv_qp_init_attr*);
  int (*modify_qp)(struct ibv_qp*, struct ibv_qp_attr*, int);
  int (*destroy_qp)(struct ibv_qp*);
  int (*query_qp)(struct ibv_qp*, struct ibv_qp_attr*, int, struct ibv_qp_init_attr*);
};

static struct api V;
static pid_t g_children[2];

static void fail(int line, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "test_fakeibv: FAIL at line %d: ", line);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  for (int i = 0; i < 2; i++) {
    if (g_children[i] > 0) kill(g_children[i], SIGKILL);
  }
  exit(1);
}

#define EXPECT(cond, ...)                                  \
  do {                                                     \
    if (!(cond)) fail(__LINE__, #cond " -- " __VA_ARGS__); \
  } while (0)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint8_t pattern(uint64_t seed, uint64_t i) {
  uint64_t x = (i + 1) * 0x9e3779b97f4a7c15ull ^ seed * 0xbf58476d1ce4e5b9ull;
  return (uint8_t)(x >> 29 ^ x >> 51);
}

static void fill(uint8_t* p, size_t len, uint64_t seed) {
  for (size_t i = 0; i < len; i++) p[i] = pattern(seed, i);
}

// ---- the control channel between the parent and its peers ----

enum { CMD_NEWQP = 1, CMD_CHECK, CMD_CHECK_NOW, CMD_WAITFLAG, CMD_QPSTATE, CMD_EXIT };

struct msg {
  uint32_t cmd;
  uint32_t qpn;
  uint32_t rkey;
  int32_t status;
  uint64_t addr;
  uint64_t off;
  uint64_t len;
  uint64_t seed;
  uint64_t flag_off;
  uint64_t flag_value;
  uint8_t gid[16];
};

static void send_msg(int fd, const struct msg* m) {
  EXPECT(write(fd, m, sizeof(*m)) == (ssize_t)sizeof(*m), "control write: %s", strerror(errno));
}

static int recv_msg(int fd, struct msg* m) {
  size_t got = 0;
  while (got < sizeof(*m)) {
    ssize_t n = read(fd, (uint8_t*)m + got, sizeof(*m) - got);
    if (n <= 0) return -1;
    got += (size_t)n;
  }
  return 0;
}

static struct msg call(int fd, struct msg m) {
  send_msg(fd, &m);
  struct msg r;
  EXPECT(recv_msg(fd, &r) == 0, "the peer process went away");
  return r;
}

// ---- verbs calls ----

struct dev {
  struct ibv_context* ctx;
  struct ibv_pd* pd;
  union ibv_gid gid;
};

static struct dev open_dev(int index, const char* fault) {
  struct dev d;
  memset(&d, 0, sizeof(d));
  if (fault) setenv("FAKEIBV_FAULT", fault, 1);
  int n = 0;
  struct ibv_device** list = V.get_device_list(&n);
  EXPECT(list && n > index, "device list has %d entries", n);
  d.ctx = V.open_device(list[index]);
  V.free_device_list(list);
  if (fault) unsetenv("FAKEIBV_FAULT");
  EXPECT(d.ctx, "open_device: %s", strerror(errno));
  d.pd = V.alloc_pd(d.ctx);
  EXPECT(d.pd, "alloc_pd");
  EXPECT(V.query_gid(d.ctx, 1, 1, &d.gid) == 0, "query_gid 1");
  return d;
}

static struct ibv_qp* new_qp(struct dev* d, struct ibv_cq* cq, uint32_t max_wr) {
  struct ibv_qp_init_attr ia;
  memset(&ia, 0, sizeof(ia));
  ia.send_cq = cq;
  ia.recv_cq = cq;
  ia.qp_type = IBV_QPT_RC;
  ia.cap.max_send_wr = max_wr;
  ia.cap.max_recv_wr = 1;
  ia.cap.max_send_sge = 2;
  ia.cap.max_recv_sge = 1;
  ia.cap.max_inline_data = 128;
  struct ibv_qp* qp = V.create_qp(d->pd, &ia);
  EXPECT(qp, "create_qp: %s", strerror(errno));
  EXPECT(qp->qp_num >> 8 != 0 && qp->qp_num <= 0xffffff, "qp_num 0x%x", qp->qp_num);
  EXPECT(qp->state == IBV_QPS_RESET, "new QP state %d", qp->state);
  return qp;
}

static int to_init(struct ibv_qp* qp) {
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
  return V.modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

static void rtr_attr(struct ibv_qp_attr* a, uint32_t dest_qpn, const uint8_t* dgid) {
  memset(a, 0, sizeof(*a));
  a->qp_state = IBV_QPS_RTR;
  a->path_mtu = IBV_MTU_4096;
  a->dest_qp_num = dest_qpn;
  a->max_dest_rd_atomic = 1;
  a->min_rnr_timer = 12;
  a->ah_attr.is_global = 1;
  memcpy(a->ah_attr.grh.dgid.raw, dgid, 16);
  a->ah_attr.grh.sgid_index = 1;
  a->ah_attr.grh.hop_limit = 255;
  a->ah_attr.port_num = 1;
}

static const int RTR_MASK = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                            IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;

static void connect_qp(struct ibv_qp* qp, uint32_t dest_qpn, const uint8_t* dgid, int timeout, int retry) {
  EXPECT(to_init(qp) == 0, "RESET->INIT");
  struct ibv_qp_attr a;
  rtr_attr(&a, dest_qpn, dgid);
  EXPECT(V.modify_qp(qp, &a, RTR_MASK) == 0, "INIT->RTR");
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_RTS;
  a.timeout = (uint8_t)timeout;
  a.retry_cnt = (uint8_t)retry;
  a.rnr_retry = 7;
  a.max_rd_atomic = 1;
  EXPECT(V.modify_qp(qp, &a,
                     IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                         IBV_QP_MAX_QP_RD_ATOMIC) == 0,
         "RTR->RTS");
  EXPECT(qp->state == IBV_QPS_RTS, "state after RTS %d", qp->state);
}

static enum ibv_qp_state qp_state(struct ibv_qp* qp) {
  struct ibv_qp_attr a;
  struct ibv_qp_init_attr ia;
  EXPECT(V.query_qp(qp, &a, IBV_QP_STATE, &ia) == 0, "query_qp");
  return a.qp_state;
}

static int post_write(struct ibv_qp* qp, uint64_t wr_id, struct ibv_sge* sges, int nsge, uint64_t raddr,
                      uint32_t rkey, unsigned flags) {
  struct ibv_send_wr wr, *bad = NULL;
  memset(&wr, 0, sizeof(wr));
  wr.wr_id = wr_id;
  wr.sg_list = sges;
  wr.num_sge = nsge;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = flags;
  wr.wr.rdma.remote_addr = raddr;
  wr.wr.rdma.rkey = rkey;
  int rc = ibv_post_send(qp, &wr, &bad);
  if (rc) EXPECT(bad == &wr, "bad_wr not set on failure");
  return rc;
}

static struct ibv_wc wait_wc(struct ibv_cq* cq, double timeout_s) {
  struct ibv_wc wc;
  double end = now_s() + timeout_s;
  for (;;) {
    int n = ibv_poll_cq(cq, 1, &wc);
    EXPECT(n >= 0, "poll_cq returned %d", n);
    if (n == 1) return wc;
    EXPECT(now_s() < end, "no completion within %.1f s", timeout_s);
    usleep(50);
  }
}

static void expect_wc(struct ibv_cq* cq, uint64_t wr_id, enum ibv_wc_status status, int line) {
  struct ibv_wc wc = wait_wc(cq, 10);
  if (wc.opcode != IBV_WC_RDMA_WRITE) fail(line, "completion opcode %d", wc.opcode);
  if (wc.wr_id != wr_id || wc.status != status) {
    fail(line, "completion wr_id %llu status %d, expected wr_id %llu status %d", (unsigned long long)wc.wr_id,
         wc.status, (unsigned long long)wr_id, status);
  }
}

static void expect_no_wc(struct ibv_cq* cq, int line) {
  struct ibv_wc wc;
  int n = ibv_poll_cq(cq, 1, &wc);
  if (n != 0)
    fail(line, "unexpected completion wr_id %llu status %d", (unsigned long long)wc.wr_id, wc.status);
}

// ---- the responder: owns the memory the parent writes into ----

// About 8.6 s without an ACK before a QP fails: ample for sanitized builds, whose threads can be
// slow to run.
#define SLOW_TIMEOUT 18
#define PEER_BYTES (16u << 20)
#define FLAGS_OFF (1u << 20)
#define MAX_PEER_QPS 64

static void responder(int sock) {
  uint8_t* buf = aligned_alloc(4096, PEER_BYTES);
  EXPECT(buf, "responder buffer");
  memset(buf, 0, PEER_BYTES);
  struct dev d = open_dev(0, NULL);
  struct ibv_cq* cq = V.create_cq(d.ctx, 64, NULL, NULL, 0);
  EXPECT(cq, "responder create_cq");
  struct ibv_mr* mr = V.reg_mr(d.pd, buf, PEER_BYTES, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  EXPECT(mr, "responder reg_mr");
  // Held in RESET. Querying it takes the lock under which the stand-in writes memory, which tells
  // ThreadSanitizer what the TCP round trip through the parent already guarantees.
  struct ibv_qp* sync_qp = new_qp(&d, cq, 1);
  struct ibv_qp* qps[MAX_PEER_QPS];
  int nqp = 0;
  struct msg m;
  memset(&m, 0, sizeof(m));
  m.addr = (uintptr_t)buf;
  m.rkey = mr->rkey;
  memcpy(m.gid, d.gid.raw, 16);
  send_msg(sock, &m);
  while (recv_msg(sock, &m) == 0) {
    struct msg r;
    memset(&r, 0, sizeof(r));
    if (m.cmd == CMD_NEWQP) {
      EXPECT(nqp < MAX_PEER_QPS, "too many QPs");
      struct ibv_qp* qp = new_qp(&d, cq, 16);
      connect_qp(qp, m.qpn, m.gid, SLOW_TIMEOUT, 7);
      qps[nqp++] = qp;
      r.qpn = qp->qp_num;
    } else if (m.cmd == CMD_CHECK || m.cmd == CMD_WAITFLAG) {
      if (m.cmd == CMD_WAITFLAG) {
        double end = now_s() + 5;
        while (__atomic_load_n((uint64_t*)(void*)(buf + m.flag_off), __ATOMIC_ACQUIRE) != m.flag_value) {
          if (now_s() > end) {
            r.status = 2;
            break;
          }
          usleep(10);
        }
      } else {
        qp_state(sync_qp);
      }
      for (uint64_t i = 0; r.status == 0 && i < m.len; i++) {
        if (buf[m.off + i] != pattern(m.seed, i)) {
          r.status = 1;
          r.off = i;
        }
      }
      qp_state(sync_qp);  // and the next writes after these reads
    } else if (m.cmd == CMD_CHECK_NOW) {
      // Whole words read as they are this moment, with no ordering against the writing thread: the
      // stand-in stores aligned payload a word at a time, so this is no race, and it sees a write
      // that is still arriving. Backwards, because it lands front to back.
      for (uint64_t k = m.len / 8; r.status == 0 && k > 0; k--) {
        uint64_t i = (k - 1) * 8;
        uint64_t v = __atomic_load_n((uint64_t*)(void*)(buf + m.off + i), __ATOMIC_RELAXED);
        for (int b = 0; b < 8; b++) {
          if ((uint8_t)(v >> (8 * b)) != pattern(m.seed, i + (uint64_t)b)) {
            r.status = 1;
            r.off = i + (uint64_t)b;
            break;
          }
        }
      }
    } else if (m.cmd == CMD_QPSTATE) {
      r.status = -1;
      for (int i = 0; i < nqp; i++) {
        if (qps[i]->qp_num == m.qpn) r.status = (int32_t)qp_state(qps[i]);
      }
    } else {
      break;
    }
    send_msg(sock, &r);
  }
  for (int i = 0; i < nqp; i++) EXPECT(V.destroy_qp(qps[i]) == 0, "destroy_qp");
  EXPECT(V.destroy_qp(sync_qp) == 0, "destroy_qp");
  EXPECT(V.destroy_cq(cq) == 0, "destroy_cq");
  EXPECT(V.dereg_mr(mr) == 0, "dereg_mr");
  EXPECT(V.dealloc_pd(d.pd) == 0, "dealloc_pd");
  EXPECT(V.close_device(d.ctx) == 0, "close_device");
  free(buf);
}

// ---- the parent ----

struct peer {
  int sock;
  pid_t pid;
  uint64_t addr;
  uint32_t rkey;
  uint8_t gid[16];
};

static struct peer spawn(int slot) {
  int sv[2];
  EXPECT(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair");
  pid_t pid = fork();
  EXPECT(pid >= 0, "fork");
  if (pid == 0) {
    g_children[0] = g_children[1] = 0;
    close(sv[0]);
    responder(sv[1]);
    exit(0);
  }
  close(sv[1]);
  g_children[slot] = pid;
  struct peer p = {.sock = sv[0], .pid = pid};
  struct msg m;
  EXPECT(recv_msg(p.sock, &m) == 0, "peer process did not start");
  p.addr = m.addr;
  p.rkey = m.rkey;
  memcpy(p.gid, m.gid, 16);
  return p;
}

// Connects a new QP of d to a new QP of the peer; returns the peer's QP number in *remote.
static struct ibv_qp* pair(struct dev* d, struct ibv_cq* cq, struct peer* p, uint32_t max_wr, int timeout,
                           int retry, uint32_t* remote) {
  struct ibv_qp* qp = new_qp(d, cq, max_wr);
  struct msg m;
  memset(&m, 0, sizeof(m));
  m.cmd = CMD_NEWQP;
  m.qpn = qp->qp_num;
  memcpy(m.gid, d->gid.raw, 16);
  struct msg r = call(p->sock, m);
  connect_qp(qp, r.qpn, p->gid, timeout, retry);
  if (remote) *remote = r.qpn;
  return qp;
}

static void expect_peer_bytes(struct peer* p, uint64_t off, uint64_t len, uint64_t seed, int line) {
  struct msg m = {.cmd = CMD_CHECK, .off = off, .len = len, .seed = seed};
  struct msg r = call(p->sock, m);
  if (r.status != 0)
    fail(line, "peer memory at +%llu differs from the written data at byte %llu", (unsigned long long)off,
         (unsigned long long)r.off);
}

static void test_local_api(void) {
  int n = 0;
  struct ibv_device** list = V.get_device_list(&n);
  EXPECT(list && n == 2 && list[2] == NULL, "device count %d", n);
  EXPECT(strcmp(V.get_device_name(list[0]), "fakeibv0") == 0, "name %s", V.get_device_name(list[0]));
  EXPECT(strcmp(V.get_device_name(list[1]), "fakeibv1") == 0, "name %s", V.get_device_name(list[1]));
  EXPECT(strcmp(list[0]->ibdev_path, "/nonexistent/fakeibv-sysfs/class/infiniband/fakeibv0") == 0, "path %s",
         list[0]->ibdev_path);
  struct ibv_context* c0 = V.open_device(list[0]);
  struct ibv_context* c1 = V.open_device(list[1]);
  struct ibv_context* c0b = V.open_device(list[0]);
  EXPECT(c0 && c1 && c0b && c0 != c0b, "open_device");
  EXPECT(c0->device == list[0] && c1->device == list[1], "context device");

  struct ibv_device_attr da;
  EXPECT(V.query_device(c0, &da) == 0 && da.phys_port_cnt == 1 && da.max_qp_wr > 0 && da.max_sge >= 2,
         "query_device");
  struct ibv_port_attr pa;
  memset(&pa, 0x5a, sizeof(pa));
  EXPECT(V.query_port(c0, 1, &pa) == 0, "query_port");
  EXPECT(pa.state == IBV_PORT_ACTIVE && pa.link_layer == IBV_LINK_LAYER_ETHERNET &&
             pa.active_mtu == IBV_MTU_4096 && pa.max_mtu == IBV_MTU_4096 && pa.gid_tbl_len == 2 &&
             pa.lid == 0,
         "port attributes state %d link %d mtu %d gids %d", pa.state, pa.link_layer, pa.active_mtu,
         pa.gid_tbl_len);
  EXPECT(V.query_port(c0, 2, &pa) != 0, "port 2 exists");
  setenv("FAKEIBV_DOWN", "fakeibv1", 1);
  EXPECT(V.query_port(c1, 1, &pa) == 0 && pa.state == IBV_PORT_DOWN, "FAKEIBV_DOWN ignored (%d)", pa.state);
  EXPECT(V.query_port(c0, 1, &pa) == 0 && pa.state == IBV_PORT_ACTIVE, "wrong device down");
  unsetenv("FAKEIBV_DOWN");

  union ibv_gid g0, g1, g2;
  EXPECT(V.query_gid(c0, 1, 0, &g0) == 0 && g0.raw[0] == 0xfe && g0.raw[1] == 0x80, "link-local GID");
  EXPECT(V.query_gid(c0, 1, 1, &g1) == 0, "GID 1");
  struct in_addr want;
  EXPECT(inet_pton(AF_INET, getenv("FAKEIBV_ADDR"), &want) == 1, "FAKEIBV_ADDR");
  static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  EXPECT(memcmp(g1.raw, mapped, 12) == 0 && memcmp(g1.raw + 12, &want, 4) == 0, "GID 1 is not ::ffff:addr");
  EXPECT(V.query_gid(c0, 1, 2, &g2) != 0, "GID index 2 exists");

  struct ibv_pd* pd = V.alloc_pd(c0);
  EXPECT(pd && pd->context == c0, "alloc_pd");
  errno = 0;
  EXPECT(V.reg_dmabuf_mr(pd, 0, 4096, 0, -1, IBV_ACCESS_LOCAL_WRITE) == NULL && errno == EINVAL,
         "dmabuf, no fd");
  {
    /* A dma-buf's region is addressed by its iova, which need not be mapped here. */
    int fd = memfd_create("dmabuf", 0);
    EXPECT(fd >= 0 && ftruncate(fd, 8192) == 0, "memfd");
    uint64_t iova = 0x7e0000000000ull;
    struct ibv_mr* dm =
        V.reg_dmabuf_mr(pd, 0, 8192, iova, fd, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    EXPECT(dm && (uint64_t)(uintptr_t)dm->addr == iova && dm->length == 8192 && dm->rkey, "dmabuf MR");
    EXPECT(V.reg_dmabuf_mr(pd, 100, 4096, iova, fd, IBV_ACCESS_LOCAL_WRITE) == NULL && errno == EINVAL,
           "dmabuf offset not page aligned");
    if (dm) EXPECT(V.dereg_mr(dm) == 0, "dereg dmabuf MR");
    if (fd >= 0) close(fd);
  }
  static uint8_t area[8192];
  struct ibv_mr* m1 = V.reg_mr(pd, area, 4096, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr* m2 = V.reg_mr(pd, area + 4096, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  EXPECT(m1 && m2 && m1->lkey && m1->rkey && m2->lkey && m1->lkey != m2->lkey && m1->rkey != m2->rkey,
         "keys");
  EXPECT(m1->addr == area && m1->length == 4096 && m1->pd == pd && m1->context == c0, "MR fields");
  EXPECT(V.dealloc_pd(pd) != 0, "dealloc_pd with live MRs");

  struct ibv_cq* cq = V.create_cq(c0, 16, NULL, NULL, 0);
  EXPECT(cq && cq->context == c0, "create_cq");
  struct ibv_qp_init_attr ia;
  memset(&ia, 0, sizeof(ia));
  ia.send_cq = ia.recv_cq = cq;
  ia.qp_type = IBV_QPT_UD;
  ia.cap.max_send_wr = 4;
  errno = 0;
  EXPECT(V.create_qp(pd, &ia) == NULL && errno == EINVAL, "UD QP accepted");
  struct dev d = {.ctx = c0, .pd = pd};
  struct ibv_qp* qp = new_qp(&d, cq, 4);
  EXPECT(qp->context == c0 && qp->send_cq == cq && qp->qp_type == IBV_QPT_RC && qp->pd == pd, "QP fields");
  EXPECT(V.destroy_cq(cq) != 0, "destroy_cq with a live QP");

  struct ibv_qp_attr a;
  rtr_attr(&a, 0x1234, g1.raw);
  EXPECT(V.modify_qp(qp, &a, RTR_MASK) == EINVAL, "RESET->RTR allowed");
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  EXPECT(V.modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT) == EINVAL,
         "INIT without access");
  EXPECT(to_init(qp) == 0 && qp_state(qp) == IBV_QPS_INIT, "RESET->INIT");
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_RTS;
  EXPECT(V.modify_qp(qp, &a, IBV_QP_STATE) == EINVAL, "INIT->RTS allowed");
  rtr_attr(&a, 0x1234, g1.raw);
  EXPECT(V.modify_qp(qp, &a, RTR_MASK & ~IBV_QP_MIN_RNR_TIMER) == EINVAL, "RTR without min_rnr_timer");
  a.ah_attr.is_global = 0;
  EXPECT(V.modify_qp(qp, &a, RTR_MASK) == EINVAL, "RTR without GRH");
  rtr_attr(&a, 0x1234, g0.raw);
  EXPECT(V.modify_qp(qp, &a, RTR_MASK) == EINVAL, "RTR to a GID that is not IPv4-mapped");
  rtr_attr(&a, 0x1234, g1.raw);
  a.ah_attr.grh.sgid_index = 2;
  EXPECT(V.modify_qp(qp, &a, RTR_MASK) == EINVAL, "RTR with sgid_index 2");
  struct ibv_sge sge = {(uintptr_t)area, 8, m1->lkey};
  EXPECT(post_write(qp, 1, &sge, 1, (uintptr_t)(area + 4096), m2->rkey, IBV_SEND_SIGNALED) == EINVAL,
         "post_send in INIT");
  EXPECT(qp_state(qp) == IBV_QPS_INIT, "state changed by failed calls");

  // A second context of the same device listens on its own port.
  struct ibv_pd* pdb = V.alloc_pd(c0b);
  struct ibv_cq* cqb = V.create_cq(c0b, 4, NULL, NULL, 0);
  struct dev db = {.ctx = c0b, .pd = pdb};
  struct ibv_qp* qpb = new_qp(&db, cqb, 4);
  EXPECT(qpb->qp_num >> 8 != qp->qp_num >> 8, "two contexts share a port");

  // c1 is closed with its objects alive, as a crashing consumer would leave it.
  struct ibv_pd* pd1 = V.alloc_pd(c1);
  struct ibv_cq* cq1 = V.create_cq(c1, 4, NULL, NULL, 0);
  struct dev d1 = {.ctx = c1, .pd = pd1};
  new_qp(&d1, cq1, 4);
  EXPECT(V.reg_mr(pd1, area, 64, IBV_ACCESS_LOCAL_WRITE), "reg_mr on c1");
  EXPECT(V.close_device(c1) == 0, "close_device with live objects");

  EXPECT(V.destroy_qp(qp) == 0 && V.destroy_cq(cq) == 0, "destroy");
  EXPECT(V.dereg_mr(m1) == 0 && V.dereg_mr(m2) == 0 && V.dealloc_pd(pd) == 0, "dereg");
  EXPECT(V.destroy_qp(qpb) == 0 && V.destroy_cq(cqb) == 0 && V.dealloc_pd(pdb) == 0, "destroy b");
  EXPECT(V.close_device(c0) == 0 && V.close_device(c0b) == 0, "close_device");

  // The environment is read again at each listing; earlier device pointers stay valid.
  setenv("FAKEIBV_DEVICES", "mlx5_7", 1);
  struct ibv_device** l2 = V.get_device_list(&n);
  EXPECT(l2 && n == 1 && strcmp(V.get_device_name(l2[0]), "mlx5_7") == 0, "relisting");
  V.free_device_list(l2);
  setenv("FAKEIBV_DEVICES", "fakeibv0,fakeibv1", 1);
  EXPECT(strcmp(V.get_device_name(list[1]), "fakeibv1") == 0, "old device pointer");
  V.free_device_list(list);

  // An unknown fault form is reported and ignored.
  struct dev f = open_dev(0, "bogus:1");
  EXPECT(V.dealloc_pd(f.pd) == 0 && V.close_device(f.ctx) == 0, "close");
}

#define SRC_BYTES (8u << 20)

struct sender {
  struct dev d;
  struct ibv_cq* cq;
  uint8_t* src;
  struct ibv_mr* lo;  // first half of src
  struct ibv_mr* hi;  // second half of src
};

static struct sender make_sender(const char* fault) {
  struct sender s;
  s.d = open_dev(0, fault);
  s.cq = V.create_cq(s.d.ctx, 8, NULL, NULL, 0);  // small: completions beyond it must not be lost
  s.src = aligned_alloc(4096, SRC_BYTES);
  EXPECT(s.cq && s.src, "sender setup");
  memset(s.src, 0, SRC_BYTES);
  s.lo = V.reg_mr(s.d.pd, s.src, SRC_BYTES / 2, IBV_ACCESS_LOCAL_WRITE);
  s.hi = V.reg_mr(s.d.pd, s.src + SRC_BYTES / 2, SRC_BYTES / 2, IBV_ACCESS_LOCAL_WRITE);
  EXPECT(s.lo && s.hi, "sender reg_mr");
  return s;
}

// With objects_alive, the context is closed with its QPs, CQ and regions still there.
static void free_sender(struct sender* s, int objects_alive) {
  if (objects_alive) {
    EXPECT(V.close_device(s->d.ctx) == 0, "close_device");
    free(s->src);
    return;
  }
  EXPECT(V.dereg_mr(s->lo) == 0 && V.dereg_mr(s->hi) == 0, "dereg_mr");
  EXPECT(V.destroy_cq(s->cq) == 0, "destroy_cq");
  EXPECT(V.dealloc_pd(s->d.pd) == 0, "dealloc_pd");
  EXPECT(V.close_device(s->d.ctx) == 0, "close_device");
  free(s->src);
}

// A signaled write of `len` (at most 256 KiB) pattern bytes. Its source is one of four slots of the
// first MiB picked by wr_id, so that WRs posted back to back do not share one.
static int write_seed(struct sender* s, struct ibv_qp* qp, uint64_t wr_id, struct peer* p, uint64_t off,
                      uint32_t len, uint64_t seed, uint32_t rkey) {
  uint8_t* src = s->src + (wr_id % 4) * (256u << 10);
  fill(src, len, seed);
  struct ibv_sge sge = {(uintptr_t)src, len, s->lo->lkey};
  return post_write(qp, wr_id, &sge, 1, p->addr + off, rkey, IBV_SEND_SIGNALED);
}

static struct ibv_qp* test_data(struct sender* s, struct peer* p, uint32_t* remote) {
  struct ibv_qp* qp = pair(&s->d, s->cq, p, 64, SLOW_TIMEOUT, 7, remote);

  // 1 MiB in two sges from two regions, then a flag word the responder spins on.
  const uint32_t half = 512u << 10;
  fill(s->src, half, 11);
  for (uint32_t i = 0; i < half; i++) s->src[SRC_BYTES / 2 + i] = pattern(11, half + i);
  struct ibv_sge sges[2] = {{(uintptr_t)s->src, half, s->lo->lkey},
                            {(uintptr_t)(s->src + SRC_BYTES / 2), half, s->hi->lkey}};
  uint64_t flag = 0xc0ffee0000000001ull;
  struct msg w = {
      .cmd = CMD_WAITFLAG, .off = 0, .len = 2 * half, .seed = 11, .flag_off = FLAGS_OFF, .flag_value = flag};
  send_msg(p->sock, &w);
  EXPECT(post_write(qp, 1, sges, 2, p->addr, p->rkey, 0) == 0, "post 1 MiB");
  struct ibv_sge fs = {(uintptr_t)&flag, 8, 0};
  EXPECT(post_write(qp, 2, &fs, 1, p->addr + FLAGS_OFF, p->rkey, IBV_SEND_SIGNALED | IBV_SEND_INLINE) == 0,
         "post flag");
  expect_wc(s->cq, 2, IBV_WC_SUCCESS, __LINE__);
  expect_no_wc(s->cq, __LINE__);
  struct msg r;
  EXPECT(recv_msg(p->sock, &r) == 0 && r.status == 0, "1 MiB write seen by the responder: status %d at %llu",
         r.status, (unsigned long long)r.off);
  expect_peer_bytes(p, 0, 2 * half, 11, __LINE__);

  // A success completion means the data are already in the remote memory.
  // Large writes leave time to notice a completion that overtakes its data.
  for (int it = 0; it < 8; it++) {
    const uint32_t len = 4u << 20;
    uint64_t off = 8u << 20;
    fill(s->src, len, 100 + (uint64_t)it);
    struct ibv_sge big = {(uintptr_t)s->src, len, s->lo->lkey};
    EXPECT(post_write(qp, 100 + (uint64_t)it, &big, 1, p->addr + off, p->rkey, IBV_SEND_SIGNALED) == 0,
           "post");
    expect_wc(s->cq, 100 + (uint64_t)it, IBV_WC_SUCCESS, __LINE__);
    struct msg m = {.cmd = CMD_CHECK_NOW, .off = off, .len = len, .seed = 100 + (uint64_t)it};
    struct msg r = call(p->sock, m);
    EXPECT(r.status == 0, "completion %d came before its data: byte %llu of %u differs", it,
           (unsigned long long)r.off, len);
  }

  // Neither address nor length a multiple of 8.
  fill(s->src + 3, 1001, 7);
  struct ibv_sge us = {(uintptr_t)(s->src + 3), 1001, s->lo->lkey};
  EXPECT(post_write(qp, 200, &us, 1, p->addr + (3u << 20) + 5, p->rkey, IBV_SEND_SIGNALED) == 0, "post");
  expect_wc(s->cq, 200, IBV_WC_SUCCESS, __LINE__);
  expect_peer_bytes(p, (3u << 20) + 5, 1001, 7, __LINE__);

  // Inline data are taken at post time.
  uint8_t inl[100];
  fill(inl, sizeof(inl), 8);
  struct ibv_sge is = {(uintptr_t)inl, sizeof(inl), 0};
  EXPECT(post_write(qp, 201, &is, 1, p->addr + (3u << 20) + 4096, p->rkey,
                    IBV_SEND_SIGNALED | IBV_SEND_INLINE) == 0,
         "post inline");
  memset(inl, 0, sizeof(inl));
  expect_wc(s->cq, 201, IBV_WC_SUCCESS, __LINE__);
  expect_peer_bytes(p, (3u << 20) + 4096, sizeof(inl), 8, __LINE__);

  // More outstanding WRs than max_send_wr: the 65th of one list is refused.
  struct ibv_send_wr wrs[65], *bad = NULL;
  struct ibv_sge one = {(uintptr_t)s->src, 8, s->lo->lkey};
  memset(wrs, 0, sizeof(wrs));
  for (int i = 0; i < 65; i++) {
    wrs[i].wr_id = 300 + (uint64_t)i;
    wrs[i].sg_list = &one;
    wrs[i].num_sge = 1;
    wrs[i].opcode = IBV_WR_RDMA_WRITE;
    wrs[i].wr.rdma.remote_addr = p->addr + (3u << 20) + 8192;
    wrs[i].wr.rdma.rkey = p->rkey;
    wrs[i].next = i < 64 ? &wrs[i + 1] : NULL;
  }
  wrs[63].send_flags = IBV_SEND_SIGNALED;
  EXPECT(ibv_post_send(qp, wrs, &bad) == ENOMEM && bad == &wrs[64], "send queue overflow");
  expect_wc(s->cq, 363, IBV_WC_SUCCESS, __LINE__);
  EXPECT(write_seed(s, qp, 400, p, 3u << 20, 64, 9, p->rkey) == 0, "post after overflow");
  expect_wc(s->cq, 400, IBV_WC_SUCCESS, __LINE__);
  expect_no_wc(s->cq, __LINE__);
  struct msg q = {.cmd = CMD_QPSTATE, .qpn = *remote};
  EXPECT(call(p->sock, q).status == IBV_QPS_RTS, "responder QP state");
  EXPECT(qp_state(qp) == IBV_QPS_RTS, "sender QP state");
  return qp;
}

static void test_errors(struct sender* s, struct peer* p) {
  // A bad rkey: that WR fails with the remote's verdict, the next is flushed, and so is a later post.
  uint32_t remote = 0;
  struct ibv_qp* qp = pair(&s->d, s->cq, p, 16, SLOW_TIMEOUT, 7, &remote);
  // Large, so the refusal overtakes the payload still being sent.
  EXPECT(write_seed(s, qp, 1, p, 4u << 20, 256u << 10, 31, p->rkey ^ 0x00100001u) == 0, "post bad rkey");
  EXPECT(write_seed(s, qp, 2, p, 4u << 20, 4096, 31, p->rkey) == 0, "post after");
  expect_wc(s->cq, 1, IBV_WC_REM_ACCESS_ERR, __LINE__);
  expect_wc(s->cq, 2, IBV_WC_WR_FLUSH_ERR, __LINE__);
  EXPECT(qp_state(qp) == IBV_QPS_ERR, "QP not in ERR after a NAK");
  EXPECT(write_seed(s, qp, 3, p, 4u << 20, 4096, 31, p->rkey) == 0, "post in ERR refused");
  expect_wc(s->cq, 3, IBV_WC_WR_FLUSH_ERR, __LINE__);
  struct msg st = {.cmd = CMD_QPSTATE, .qpn = remote};
  EXPECT(call(p->sock, st).status == IBV_QPS_RTS, "a refused write disturbed the receiving QP");
  EXPECT(V.destroy_qp(qp) == 0, "destroy_qp");

  // The right rkey but past the end of the region.
  qp = pair(&s->d, s->cq, p, 16, SLOW_TIMEOUT, 7, NULL);
  EXPECT(write_seed(s, qp, 4, p, PEER_BYTES - 8, 16, 32, p->rkey) == 0, "post");
  expect_wc(s->cq, 4, IBV_WC_REM_ACCESS_ERR, __LINE__);
  EXPECT(V.destroy_qp(qp) == 0, "destroy_qp");

  // A local sge outside any region of its lkey.
  qp = pair(&s->d, s->cq, p, 16, SLOW_TIMEOUT, 7, NULL);
  struct ibv_sge sge = {(uintptr_t)s->src, 64, s->hi->lkey};
  EXPECT(post_write(qp, 5, &sge, 1, p->addr, p->rkey, 0) == 0, "post bad lkey");
  EXPECT(write_seed(s, qp, 6, p, 4u << 20, 64, 33, p->rkey) == 0, "post after");
  expect_wc(s->cq, 5, IBV_WC_LOC_PROT_ERR, __LINE__);
  expect_wc(s->cq, 6, IBV_WC_WR_FLUSH_ERR, __LINE__);
  EXPECT(V.destroy_qp(qp) == 0, "destroy_qp");

  // An opcode the NIC does not carry.
  qp = pair(&s->d, s->cq, p, 16, SLOW_TIMEOUT, 7, NULL);
  struct ibv_send_wr wr, *bad = NULL;
  memset(&wr, 0, sizeof(wr));
  wr.opcode = IBV_WR_RDMA_READ;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  EXPECT(ibv_post_send(qp, &wr, &bad) == EINVAL && bad == &wr, "RDMA read accepted");
  EXPECT(V.destroy_qp(qp) == 0, "destroy_qp");
  expect_no_wc(s->cq, __LINE__);
}

static void test_faults(struct peer* p) {
  struct sender s = make_sender("wc_error:2");
  struct ibv_qp* qp = pair(&s.d, s.cq, p, 16, SLOW_TIMEOUT, 7, NULL);
  EXPECT(write_seed(&s, qp, 1, p, 5u << 20, 512, 41, p->rkey) == 0, "post 1");
  EXPECT(write_seed(&s, qp, 2, p, (5u << 20) + 4096, 512, 42, p->rkey) == 0, "post 2");
  EXPECT(write_seed(&s, qp, 3, p, (5u << 20) + 8192, 512, 43, p->rkey) == 0, "post 3");
  expect_wc(s.cq, 1, IBV_WC_SUCCESS, __LINE__);
  expect_wc(s.cq, 2, IBV_WC_REM_ACCESS_ERR, __LINE__);
  expect_wc(s.cq, 3, IBV_WC_WR_FLUSH_ERR, __LINE__);
  EXPECT(qp_state(qp) == IBV_QPS_ERR, "wc_error left the QP usable");
  expect_peer_bytes(p, 5u << 20, 512, 41, __LINE__);
  struct msg m = {.cmd = CMD_CHECK, .off = (5u << 20) + 4096, .len = 512, .seed = 42};
  EXPECT(call(p->sock, m).status != 0, "the failed WR was written anyway");
  EXPECT(V.destroy_qp(qp) == 0, "destroy_qp");
  free_sender(&s, 0);

  s = make_sender("qp_error:1");
  qp = pair(&s.d, s.cq, p, 16, SLOW_TIMEOUT, 7, NULL);
  EXPECT(write_seed(&s, qp, 1, p, 6u << 20, 512, 51, p->rkey) == 0, "post 1");
  EXPECT(write_seed(&s, qp, 2, p, 6u << 20, 512, 51, p->rkey) == 0, "post 2");
  expect_wc(s.cq, 1, IBV_WC_WR_FLUSH_ERR, __LINE__);
  expect_wc(s.cq, 2, IBV_WC_WR_FLUSH_ERR, __LINE__);
  EXPECT(qp_state(qp) == IBV_QPS_ERR, "qp_error did not move the QP to ERR");
  EXPECT(V.destroy_qp(qp) == 0, "destroy_qp");
  free_sender(&s, 0);

  // timeout 14, retry_cnt 1: 4.096 us * 2^14 * 2 = 134 ms without an ACK.
  s = make_sender("stall:2");
  qp = pair(&s.d, s.cq, p, 16, 14, 1, NULL);
  EXPECT(write_seed(&s, qp, 1, p, 6u << 20, 512, 52, p->rkey) == 0, "post 1");
  expect_wc(s.cq, 1, IBV_WC_SUCCESS, __LINE__);
  double t0 = now_s();
  EXPECT(write_seed(&s, qp, 2, p, 6u << 20, 512, 53, p->rkey) == 0, "post 2");
  expect_wc(s.cq, 2, IBV_WC_RETRY_EXC_ERR, __LINE__);
  double dt = now_s() - t0;
  EXPECT(dt > 0.120 && dt < 1.5, "stall timed out after %.3f s, expected about 0.134 s", dt);
  EXPECT(write_seed(&s, qp, 3, p, 6u << 20, 512, 53, p->rkey) == 0, "post 3");
  expect_wc(s.cq, 3, IBV_WC_WR_FLUSH_ERR, __LINE__);
  free_sender(&s, 1);
}

static void test_dead_peer(struct sender* s, struct peer* victim) {
  uint32_t remote = 0;
  struct ibv_qp* qp = pair(&s->d, s->cq, victim, 16, 14, 1, &remote);
  EXPECT(write_seed(s, qp, 1, victim, 0, 4096, 61, victim->rkey) == 0, "post 1");
  expect_wc(s->cq, 1, IBV_WC_SUCCESS, __LINE__);
  EXPECT(kill(victim->pid, SIGSTOP) == 0, "SIGSTOP");
  int status = 0;
  EXPECT(waitpid(victim->pid, &status, WUNTRACED) == victim->pid && WIFSTOPPED(status), "victim not stopped");
  double t0 = now_s();
  EXPECT(write_seed(s, qp, 2, victim, 0, 65536, 62, victim->rkey) == 0, "post 2");
  expect_wc(s->cq, 2, IBV_WC_RETRY_EXC_ERR, __LINE__);
  double dt = now_s() - t0;
  EXPECT(dt > 0.120 && dt < 1.5, "silent peer timed out after %.3f s, expected about 0.134 s", dt);
  EXPECT(V.destroy_qp(qp) == 0, "destroy_qp");

  kill(victim->pid, SIGKILL);
  EXPECT(waitpid(victim->pid, &status, 0) == victim->pid, "waitpid victim");
  g_children[1] = 0;
  // Nobody listens there any more: connecting is refused until the timeout gives up.
  qp = new_qp(&s->d, s->cq, 16);
  connect_qp(qp, remote, victim->gid, 14, 1);
  t0 = now_s();
  EXPECT(write_seed(s, qp, 3, victim, 0, 64, 63, victim->rkey) == 0, "post 3");
  expect_wc(s->cq, 3, IBV_WC_RETRY_EXC_ERR, __LINE__);
  dt = now_s() - t0;
  EXPECT(dt < 1.5, "refused connection took %.3f s", dt);
  EXPECT(V.destroy_qp(qp) == 0, "destroy_qp");
}

// Expects the listener to hang up on what was sent.
static void expect_refused(const struct peer* p, uint32_t port, const void* bytes, size_t len, int line) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  memcpy(&sa.sin_addr, p->gid + 12, 4);
  if (fd < 0 || connect(fd, (struct sockaddr*)&sa, sizeof(sa)) != 0)
    fail(line, "connect: %s", strerror(errno));
  struct timeval tv = {3, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (send(fd, bytes, len, MSG_NOSIGNAL) != (ssize_t)len) fail(line, "send: %s", strerror(errno));
  char c;
  ssize_t n = recv(fd, &c, 1, 0);
  if (!(n == 0 || (n < 0 && errno == ECONNRESET)))
    fail(line, "not refused (recv %zd, %s)", n, strerror(errno));
  close(fd);
}

static void test_bad_hello(struct peer* p, uint32_t remote) {
  uint32_t port = remote >> 8;
  expect_refused(p, port, "garbage garbage!", 16, __LINE__);
  struct fib_hello h = {FIB_MAGIC, FIB_HELLO, 0x123456, remote};
  expect_refused(p, port, &h, sizeof(h), __LINE__);
  h.from_qpn = 0;
  h.to_qpn = remote ^ 0x80;
  expect_refused(p, port, &h, sizeof(h), __LINE__);
  struct msg st = {.cmd = CMD_QPSTATE, .qpn = remote};
  EXPECT(call(p->sock, st).status == IBV_QPS_RTS, "refused hellos disturbed the QP");
}

struct worker {
  struct sender* s;
  struct peer* p;
  struct ibv_qp* qp;
  struct ibv_cq* cq;
  uint8_t* src;
  struct ibv_mr* mr;
  uint64_t off;
  uint64_t seed;
};

#define WORKER_BYTES (64u << 10)

static void* worker_main(void* arg) {
  struct worker* w = arg;
  // Every write copies src[k] to remote[k], so the region ends up equal to src whatever the order.
  uint64_t next = 0;
  for (uint64_t i = 0; i < 160; i += 8) {
    for (uint64_t j = i; j < i + 8; j++) {
      uint32_t off = (uint32_t)(j % 16) * 4096;
      uint32_t len = 4096 - (uint32_t)(j % 5) * 8;
      struct ibv_sge sge = {(uintptr_t)(w->src + off), len, w->mr->lkey};
      EXPECT(post_write(w->qp, j, &sge, 1, w->p->addr + w->off + off, w->p->rkey, IBV_SEND_SIGNALED) == 0,
             "post");
    }
    for (int k = 0; k < 8; k++) {
      struct ibv_wc wc = wait_wc(w->cq, 10);
      EXPECT(wc.status == IBV_WC_SUCCESS && wc.wr_id == next,
             "thread completion %llu status %d, expected %llu", (unsigned long long)wc.wr_id, wc.status,
             (unsigned long long)next);
      EXPECT(wc.qp_num == w->qp->qp_num, "completion qp_num");
      next++;
    }
  }
  return NULL;
}

static void test_threads(struct sender* s, struct peer* p) {
  struct worker w[2];
  pthread_t t[2];
  for (int i = 0; i < 2; i++) {
    w[i].s = s;
    w[i].p = p;
    w[i].cq = V.create_cq(s->d.ctx, 4, NULL, NULL, 0);
    EXPECT(w[i].cq, "create_cq");
    w[i].qp = pair(&s->d, w[i].cq, p, 8, SLOW_TIMEOUT, 7, NULL);
    w[i].src = malloc(WORKER_BYTES);
    w[i].seed = 70 + (uint64_t)i;
    fill(w[i].src, WORKER_BYTES, w[i].seed);
    w[i].mr = V.reg_mr(s->d.pd, w[i].src, WORKER_BYTES, IBV_ACCESS_LOCAL_WRITE);
    EXPECT(w[i].mr, "reg_mr");
    w[i].off = (7u << 20) + (uint64_t)i * WORKER_BYTES;
  }
  for (int i = 0; i < 2; i++) EXPECT(pthread_create(&t[i], NULL, worker_main, &w[i]) == 0, "pthread_create");
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < 2; i++) {
    expect_peer_bytes(p, w[i].off, WORKER_BYTES, w[i].seed, __LINE__);
    EXPECT(V.destroy_qp(w[i].qp) == 0 && V.destroy_cq(w[i].cq) == 0 && V.dereg_mr(w[i].mr) == 0, "cleanup");
    free(w[i].src);
  }
}

// Two contexts of one device in one process, one writing into the other.
static void test_loopback(struct sender* s) {
  struct dev d2 = open_dev(0, NULL);
  struct ibv_cq* cq2 = V.create_cq(d2.ctx, 4, NULL, NULL, 0);
  uint8_t* dst = calloc(1, 65536);
  struct ibv_mr* mr = V.reg_mr(d2.pd, dst, 65536, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  EXPECT(cq2 && dst && mr, "loopback setup");
  struct ibv_qp* a = new_qp(&s->d, s->cq, 4);
  struct ibv_qp* b = new_qp(&d2, cq2, 4);
  connect_qp(b, a->qp_num, s->d.gid.raw, SLOW_TIMEOUT, 7);
  connect_qp(a, b->qp_num, d2.gid.raw, SLOW_TIMEOUT, 7);
  fill(s->src, 65536, 81);
  struct ibv_sge sge = {(uintptr_t)s->src, 65536, s->lo->lkey};
  EXPECT(post_write(a, 1, &sge, 1, (uintptr_t)dst, mr->rkey, IBV_SEND_SIGNALED) == 0, "post");
  expect_wc(s->cq, 1, IBV_WC_SUCCESS, __LINE__);
  qp_state(b);  // orders this thread after the writing thread, for ThreadSanitizer
  for (size_t i = 0; i < 65536; i++) EXPECT(dst[i] == pattern(81, i), "loopback byte %zu", i);
  EXPECT(V.destroy_qp(a) == 0 && V.destroy_qp(b) == 0, "destroy_qp");
  EXPECT(V.dereg_mr(mr) == 0 && V.destroy_cq(cq2) == 0 && V.dealloc_pd(d2.pd) == 0, "cleanup");
  EXPECT(V.close_device(d2.ctx) == 0, "close_device");
  free(dst);
}

#define LOAD(fn)                                             \
  do {                                                       \
    *(void**)&V.fn = dlsym(lib, "ibv_" #fn);                 \
    if (!V.fn) fail(__LINE__, "%s lacks ibv_" #fn, argv[1]); \
  } while (0)

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s path/to/libfakeibv.so\n", argv[0]);
    return 2;
  }
  if (!getenv("FAKEIBV_ADDR")) setenv("FAKEIBV_ADDR", "127.0.0.1", 1);
  setenv("FAKEIBV_DEVICES", "fakeibv0,fakeibv1", 1);
  setenv("FAKEIBV_SYSFS", "/nonexistent/fakeibv-sysfs", 1);
  unsetenv("FAKEIBV_DOWN");
  unsetenv("FAKEIBV_FAULT");
  signal(SIGPIPE, SIG_IGN);
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) fail(__LINE__, "dlopen: %s", dlerror());
  LOAD(get_device_list);
  LOAD(free_device_list);
  LOAD(get_device_name);
  LOAD(open_device);
  LOAD(close_device);
  LOAD(query_device);
  LOAD(query_port);
  LOAD(query_gid);
  LOAD(alloc_pd);
  LOAD(dealloc_pd);
  LOAD(reg_mr);
  LOAD(dereg_mr);
  LOAD(reg_dmabuf_mr);
  LOAD(create_cq);
  LOAD(destroy_cq);
  LOAD(create_qp);
  LOAD(modify_qp);
  LOAD(destroy_qp);
  LOAD(query_qp);

  // Peers are forked before any thread exists.
  struct peer resp = spawn(0);
  struct peer victim = spawn(1);
  double t0 = now_s();
  test_local_api();
  struct sender s = make_sender(NULL);
  uint32_t remote = 0;
  struct ibv_qp* qp = test_data(&s, &resp, &remote);
  test_errors(&s, &resp);
  test_faults(&resp);
  test_dead_peer(&s, &victim);
  test_bad_hello(&resp, remote);
  // The QP of test_data still works after all that.
  EXPECT(write_seed(&s, qp, 9, &resp, 4u << 20, 4096, 91, resp.rkey) == 0, "post");
  expect_wc(s.cq, 9, IBV_WC_SUCCESS, __LINE__);
  expect_peer_bytes(&resp, 4u << 20, 4096, 91, __LINE__);
  test_threads(&s, &resp);
  test_loopback(&s);
  EXPECT(V.destroy_qp(qp) == 0, "destroy_qp");
  free_sender(&s, 0);

  struct msg bye = {.cmd = CMD_EXIT};
  send_msg(resp.sock, &bye);
  int status = 0;
  EXPECT(waitpid(resp.pid, &status, 0) == resp.pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
         "responder exit status 0x%x", status);
  g_children[0] = 0;
  fprintf(stderr, "test_fakeibv: all checks passed in %.2f s\n", now_s() - t0);
  return 0;
}
