/* libibverbs, opened at run time. libshunt never links it: a machine without rdma-core loads
 * libshunt and uses the socket transport.
 *
 * Promises:
 * - shunt_ibv_get opens the library once per process (SHUNT_IB_LIB names another file, e.g. a
 *   stand-in; default libibverbs.so.1) and resolves every function the verbs transport calls;
 *   NULL with the reason when the library or one of them is missing. Safe from any thread;
 *   the table lives until the process ends.
 * - The data path (post_send, poll_cq) goes through the context's ops, as the header's inline
 *   functions do, so it needs no symbol. */
#ifndef SHUNT_TRANSPORT_IBV_H
#define SHUNT_TRANSPORT_IBV_H

#include <infiniband/verbs.h>
#include <stddef.h>

struct shunt_ibv {
  struct ibv_device** (*get_device_list)(int* num);
  void (*free_device_list)(struct ibv_device** list);
  const char* (*get_device_name)(struct ibv_device* dev);
  struct ibv_context* (*open_device)(struct ibv_device* dev);
  int (*close_device)(struct ibv_context* ctx);
  int (*query_device)(struct ibv_context* ctx, struct ibv_device_attr* attr);
  int (*query_port)(struct ibv_context* ctx, uint8_t port, struct ibv_port_attr* attr);
  int (*query_gid)(struct ibv_context* ctx, uint8_t port, int index, union ibv_gid* gid);
  struct ibv_pd* (*alloc_pd)(struct ibv_context* ctx);
  int (*dealloc_pd)(struct ibv_pd* pd);
  struct ibv_mr* (*reg_mr)(struct ibv_pd* pd, void* addr, size_t length, int access);
  int (*dereg_mr)(struct ibv_mr* mr);
  struct ibv_cq* (*create_cq)(struct ibv_context* ctx, int cqe, void* cq_context, struct ibv_comp_channel* ch,
                              int comp_vector);
  int (*destroy_cq)(struct ibv_cq* cq);
  struct ibv_qp* (*create_qp)(struct ibv_pd* pd, struct ibv_qp_init_attr* attr);
  int (*modify_qp)(struct ibv_qp* qp, struct ibv_qp_attr* attr, int mask);
  int (*destroy_qp)(struct ibv_qp* qp);
  /* Optional (NULL before rdma-core 34): registering device memory by its dma-buf. */
  struct ibv_mr* (*reg_dmabuf_mr)(struct ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova, int fd,
                                  int access);
  const char* path; /* the file opened */
};

const struct shunt_ibv* shunt_ibv_get(char* err, size_t len);

/* The name of a completion status (ibv_wc_status), for messages. */
const char* shunt_ibv_status_str(int status);

#endif
