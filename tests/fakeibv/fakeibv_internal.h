// Shared state of the libibverbs stand-in: a RoCE NIC whose wire is TCP.
#ifndef FAKEIBV_INTERNAL_H
#define FAKEIBV_INTERNAL_H

#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "fakeibv_wire.h"

// verbs.h turns some entry points into macros around inline wrappers; the library defines the
// real symbols those wrappers (and dlsym users) reach.
#undef ibv_get_device_list
#undef ibv_query_port
#undef ibv_reg_mr

#define FIB_EXPORT __attribute__((visibility("default")))
#define FIB_CONTAINER(ptr, type, member) ((type*)((char*)(ptr)-offsetof(type, member)))

#define FIB_MAX_DEVICES 16
#define FIB_MAX_SGE 30
#define FIB_MAX_INLINE 4096
#define FIB_MAX_QP_WR 32768
// The QP number keeps 8 bits for the QP within its context.
#define FIB_MAX_QP 256

enum fib_fault_kind { FIB_FAULT_NONE, FIB_FAULT_WC_ERROR, FIB_FAULT_QP_ERROR, FIB_FAULT_STALL };

struct fib_device {
  struct ibv_device dev;
  struct in_addr addr;
  uint64_t guid;
};

struct fib_pd {
  struct ibv_pd pd;
  struct fib_pd* next;
  int refs;
};

struct fib_mr {
  struct ibv_mr mr;
  struct fib_mr* next;
  struct fib_pd* pd;
  int access;
  uint64_t id;
  // Where mr.addr is in this process: mr.addr itself, or for a dma-buf region (mr.addr the
  // consumer's iova) the stand-in's own mapping of the buffer.
  uint8_t* backing;
  size_t mapped;  // bytes of that mapping to unmap (0: none)
};

// This process's address of byte `addr` (in the MR's address space) of m.
static inline uint8_t* fib_mr_host(const struct fib_mr* m, uint64_t addr) {
  return m->backing + (addr - (uint64_t)(uintptr_t)m->mr.addr);
}

struct fib_cq {
  struct ibv_cq cq;
  struct fib_cq* next;
  pthread_mutex_t lock;
  struct ibv_wc* ring;
  size_t cap;
  size_t head;
  size_t count;
  int refs;
};

// A posted RDMA write, copied so the caller's ibv_send_wr may be reused at once. iov[0] is the
// wire header; the rest point at the caller's buffers (or at inl, the inline copy).
struct fib_wr {
  struct fib_wr* next;
  uint64_t wr_id;
  uint64_t seq;
  uint64_t length;
  int signaled;
  int hold;                 // a stall fault: never transmitted
  enum ibv_wc_status fail;  // nonzero: completes with this status when it reaches the head
  size_t sent;              // bytes of header and payload handed to the socket
  int niov;
  struct fib_write_hdr hdr;
  struct iovec iov[1 + FIB_MAX_SGE];
  uint8_t inl[];
};

enum fib_out_state { FIB_OUT_IDLE, FIB_OUT_BACKOFF, FIB_OUT_CONNECTING, FIB_OUT_HELLO, FIB_OUT_READY };

struct fib_qp {
  struct ibv_qp qp;
  struct fib_qp* next;
  struct fib_context* ctx;
  struct fib_pd* pd;
  struct fib_cq* scq;
  struct fib_cq* rcq;
  struct ibv_qp_cap cap;
  int sq_sig_all;
  struct ibv_qp_attr attr;  // the attributes last set by ibv_modify_qp
  struct in_addr peer;
  uint64_t timeout_ns;  // 0: wait for an ACK forever

  // Send queue: every WR not yet completed, in posting order; txnext is the first not fully sent.
  struct fib_wr* head;
  struct fib_wr* tail;
  struct fib_wr* txnext;
  uint32_t queued;
  uint64_t next_seq;
  uint64_t last_progress;

  // The outbound connection carrying this QP's writes.
  enum fib_out_state ost;
  int fd;
  int pidx;
  struct fib_hello hello;
  size_t hello_off;
  struct fib_reply rx;
  size_t rx_off;
  uint64_t retry_at;
  uint64_t backoff_ns;
  // Why the last connection attempt failed, for the log: an errno value, else a fixed text.
  int connect_err;
  const char* connect_why;
};

struct fib_fault {
  enum fib_fault_kind kind;
  uint64_t n;
  int once;  // FAKEIBV_FAULT_ONCE: fires in the first context of the process that gets there only
};

struct fib_in;

struct fib_context {
  struct ibv_context ibctx;
  struct fib_device* fdev;
  pthread_mutex_t lock;  // guards everything below and every object of the context but CQ rings
  pthread_t thread;
  int thread_started;
  int stop;
  int wake_fd;
  int listen_fd;
  uint16_t port;
  // Bumped when a thread other than the service thread closes a socket, so the service thread
  // does not act on poll results for a descriptor number that may since have been reused.
  uint64_t epoch;
  uint64_t posted;
  struct fib_fault fault;
  uint32_t qp_counter;
  struct fib_pd* pds;
  struct fib_mr* mrs;
  struct fib_cq* cqs;
  struct fib_qp* qps;
  struct fib_in* ins;
};

static inline struct fib_context* fib_ctx(struct ibv_context* c) {
  return FIB_CONTAINER(c, struct fib_context, ibctx);
}
static inline struct fib_device* fib_dev(struct ibv_device* d) {
  return FIB_CONTAINER(d, struct fib_device, dev);
}
static inline struct fib_qp* fib_qp(struct ibv_qp* q) {
  return FIB_CONTAINER(q, struct fib_qp, qp);
}
static inline struct fib_cq* fib_cq(struct ibv_cq* c) {
  return FIB_CONTAINER(c, struct fib_cq, cq);
}

// fakeibv_env.c
void fib_log(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
uint64_t fib_now_ns(void);
int fib_devices(struct fib_device** out, int cap);
int fib_device_known(const struct ibv_device* dev);
int fib_device_down(const struct fib_device* d);
void fib_fault_parse(const char* spec, struct fib_fault* out);

// fakeibv_mr.c
struct fib_mr* fib_mr_find_local(struct fib_context* ctx, uint32_t lkey, uint64_t addr, uint64_t len);
struct fib_mr* fib_mr_find_remote(struct fib_context* ctx, struct fib_pd* pd, uint32_t rkey, uint64_t addr,
                                  uint64_t len);
struct fib_mr* fib_mr_by_id(struct fib_context* ctx, uint64_t id);
void fib_mr_free_all(struct fib_context* ctx);

// fakeibv_cq.c
void fib_cq_push(struct fib_cq* cq, const struct ibv_wc* wc);
int fib_poll_cq(struct ibv_cq* ibcq, int num_entries, struct ibv_wc* wc);
int fib_req_notify_cq(struct ibv_cq* ibcq, int solicited_only);
void fib_cq_free_all(struct fib_context* ctx);

// fakeibv_qp.c (callers hold ctx->lock)
void fib_qp_complete_head(struct fib_qp* qp, enum ibv_wc_status status);
void fib_qp_to_error(struct fib_qp* qp, enum ibv_wc_status first);
struct fib_qp* fib_qp_by_num(struct fib_context* ctx, uint32_t qpn);
void fib_qp_free_all(struct fib_context* ctx);
int fib_post_send(struct ibv_qp* ibqp, struct ibv_send_wr* wr, struct ibv_send_wr** bad_wr);
int fib_post_recv(struct ibv_qp* ibqp, struct ibv_recv_wr* wr, struct ibv_recv_wr** bad_wr);

// fakeibv_wire.c
int fib_wire_start(struct fib_context* ctx);
void fib_wire_stop(struct fib_context* ctx);
void fib_wire_wake(struct fib_context* ctx);
void fib_wire_close_out(struct fib_qp* qp);  // caller holds ctx->lock

#endif  // FAKEIBV_INTERNAL_H
