// Devices and contexts: listing, opening, closing, and the attributes a consumer queries.
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fakeibv_internal.h"

FIB_EXPORT struct ibv_device** ibv_get_device_list(int* num_devices) {
  struct fib_device* devs[FIB_MAX_DEVICES];
  int n = fib_devices(devs, FIB_MAX_DEVICES);
  struct ibv_device** list = calloc((size_t)n + 1, sizeof(*list));
  if (!list) {
    errno = ENOMEM;
    return NULL;
  }
  for (int i = 0; i < n; i++) list[i] = &devs[i]->dev;
  if (num_devices) *num_devices = n;
  return list;
}

// The devices themselves live for the whole process, as opened contexts point at them.
FIB_EXPORT void ibv_free_device_list(struct ibv_device** list) {
  free(list);
}

FIB_EXPORT const char* ibv_get_device_name(struct ibv_device* device) {
  return device ? device->name : NULL;
}

FIB_EXPORT __be64 ibv_get_device_guid(struct ibv_device* device) {
  return htobe64(fib_dev(device)->guid);
}

FIB_EXPORT int ibv_fork_init(void) {
  return 0;
}

FIB_EXPORT struct ibv_context* ibv_open_device(struct ibv_device* device) {
  if (!device || !fib_device_known(device)) {
    errno = ENODEV;
    return NULL;
  }
  struct fib_context* ctx = calloc(1, sizeof(*ctx));
  if (!ctx) {
    errno = ENOMEM;
    return NULL;
  }
  ctx->fdev = fib_dev(device);
  ctx->ibctx.device = device;
  ctx->ibctx.ops.poll_cq = fib_poll_cq;
  ctx->ibctx.ops.post_send = fib_post_send;
  ctx->ibctx.ops.post_recv = fib_post_recv;
  ctx->ibctx.ops.req_notify_cq = fib_req_notify_cq;
  ctx->ibctx.cmd_fd = -1;
  ctx->ibctx.async_fd = -1;
  ctx->ibctx.num_comp_vectors = 1;
  pthread_mutex_init(&ctx->ibctx.mutex, NULL);
  pthread_mutex_init(&ctx->lock, NULL);
  ctx->wake_fd = -1;
  ctx->listen_fd = -1;
  fib_fault_parse(getenv("FAKEIBV_FAULT"), &ctx->fault);
  ctx->fault.once = getenv("FAKEIBV_FAULT_ONCE") != NULL;
  int rc = fib_wire_start(ctx);
  if (rc != 0) {
    pthread_mutex_destroy(&ctx->lock);
    pthread_mutex_destroy(&ctx->ibctx.mutex);
    free(ctx);
    errno = rc;
    return NULL;
  }
  return &ctx->ibctx;
}

FIB_EXPORT int ibv_close_device(struct ibv_context* context) {
  if (!context) return EINVAL;
  struct fib_context* ctx = fib_ctx(context);
  // Like the kernel when the device file closes: the service thread goes first, then whatever the
  // consumer left behind.
  fib_wire_stop(ctx);
  pthread_mutex_lock(&ctx->lock);
  fib_qp_free_all(ctx);
  fib_cq_free_all(ctx);
  fib_mr_free_all(ctx);
  while (ctx->pds) {
    struct fib_pd* p = ctx->pds;
    ctx->pds = p->next;
    free(p);
  }
  pthread_mutex_unlock(&ctx->lock);
  pthread_mutex_destroy(&ctx->lock);
  pthread_mutex_destroy(&ctx->ibctx.mutex);
  free(ctx);
  return 0;
}

FIB_EXPORT int ibv_query_device(struct ibv_context* context, struct ibv_device_attr* a) {
  if (!context || !a) return EINVAL;
  struct fib_device* d = fib_ctx(context)->fdev;
  memset(a, 0, sizeof(*a));
  snprintf(a->fw_ver, sizeof(a->fw_ver), "1.0.0 (fakeibv)");
  a->node_guid = htobe64(d->guid);
  a->sys_image_guid = htobe64(d->guid);
  a->max_mr_size = UINT64_MAX;
  a->page_size_cap = 0xfffff000;
  a->vendor_id = 0x02c9;
  a->vendor_part_id = 0xfeed;
  a->hw_ver = 1;
  a->max_qp = FIB_MAX_QP;
  a->max_qp_wr = FIB_MAX_QP_WR;
  a->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_PORT_ACTIVE_EVENT;
  a->max_sge = FIB_MAX_SGE;
  a->max_sge_rd = FIB_MAX_SGE;
  a->max_cq = 1 << 16;
  a->max_cqe = 1 << 22;
  a->max_mr = 1 << 20;
  a->max_pd = 1 << 16;
  a->max_qp_rd_atom = 16;
  a->max_res_rd_atom = 16 * FIB_MAX_QP;
  a->max_qp_init_rd_atom = 16;
  a->atomic_cap = IBV_ATOMIC_NONE;
  a->max_ah = 1 << 16;
  a->max_pkeys = 1;
  a->local_ca_ack_delay = 16;
  a->phys_port_cnt = 1;
  return 0;
}

FIB_EXPORT int ibv_query_port(struct ibv_context* context, uint8_t port_num,
                              struct _compat_ibv_port_attr* out) {
  if (!context || !out) return EINVAL;
  if (port_num != 1) return EINVAL;
  struct ibv_port_attr* a = (struct ibv_port_attr*)out;
  // The compat layout ends at link_layer; a caller may hand the smaller struct, so nothing past it
  // is written.
  memset(a, 0, offsetof(struct ibv_port_attr, link_layer) + 1);
  a->state = fib_device_down(fib_ctx(context)->fdev) ? IBV_PORT_DOWN : IBV_PORT_ACTIVE;
  a->max_mtu = IBV_MTU_4096;
  a->active_mtu = IBV_MTU_4096;
  a->gid_tbl_len = 2;
  a->port_cap_flags = 0;
  a->max_msg_sz = 1u << 31;
  a->pkey_tbl_len = 1;
  a->lid = 0;
  a->sm_lid = 0;
  a->max_vl_num = 1;
  a->active_width = 2;                                  // 4x
  a->active_speed = 32;                                 // EDR, 25 Gb/s per lane
  a->phys_state = a->state == IBV_PORT_ACTIVE ? 5 : 3;  // LinkUp : Disabled
  a->link_layer = IBV_LINK_LAYER_ETHERNET;
  return 0;
}

FIB_EXPORT int ibv_query_gid(struct ibv_context* context, uint8_t port_num, int index, union ibv_gid* gid) {
  if (!context || !gid || port_num != 1 || index < 0 || index > 1) {
    errno = EINVAL;
    return -1;
  }
  uint32_t ip = fib_ctx(context)->fdev->addr.s_addr;
  memset(gid, 0, sizeof(*gid));
  if (index == 0) {
    // A link-local GID with a modified EUI-64 interface id made from the address.
    gid->raw[0] = 0xfe;
    gid->raw[1] = 0x80;
    gid->raw[8] = 0x02;
    gid->raw[11] = 0xff;
    gid->raw[12] = 0xfe;
    memcpy(&gid->raw[13], (uint8_t*)&ip + 1, 3);
    gid->raw[9] = ((uint8_t*)&ip)[0];
  } else {
    gid->raw[10] = 0xff;
    gid->raw[11] = 0xff;
    memcpy(&gid->raw[12], &ip, 4);
  }
  return 0;
}

FIB_EXPORT const char* ibv_wc_status_str(enum ibv_wc_status status) {
  static const char* const names[] = {
      [IBV_WC_SUCCESS] = "success",
      [IBV_WC_LOC_LEN_ERR] = "local length error",
      [IBV_WC_LOC_QP_OP_ERR] = "local QP operation error",
      [IBV_WC_LOC_EEC_OP_ERR] = "local EE context operation error",
      [IBV_WC_LOC_PROT_ERR] = "local protection error",
      [IBV_WC_WR_FLUSH_ERR] = "Work Request Flushed Error",
      [IBV_WC_MW_BIND_ERR] = "memory management operation error",
      [IBV_WC_BAD_RESP_ERR] = "bad response error",
      [IBV_WC_LOC_ACCESS_ERR] = "local access error",
      [IBV_WC_REM_INV_REQ_ERR] = "remote invalid request error",
      [IBV_WC_REM_ACCESS_ERR] = "remote access error",
      [IBV_WC_REM_OP_ERR] = "remote operation error",
      [IBV_WC_RETRY_EXC_ERR] = "transport retry counter exceeded",
      [IBV_WC_RNR_RETRY_EXC_ERR] = "RNR retry counter exceeded",
      [IBV_WC_LOC_RDD_VIOL_ERR] = "local RDD violation error",
      [IBV_WC_REM_INV_RD_REQ_ERR] = "remote invalid RD request",
      [IBV_WC_REM_ABORT_ERR] = "aborted error",
      [IBV_WC_INV_EECN_ERR] = "invalid EE context number",
      [IBV_WC_INV_EEC_STATE_ERR] = "invalid EE context state",
      [IBV_WC_FATAL_ERR] = "fatal error",
      [IBV_WC_RESP_TIMEOUT_ERR] = "response timeout error",
      [IBV_WC_GENERAL_ERR] = "general error",
  };
  if ((unsigned)status < sizeof(names) / sizeof(names[0]) && names[status]) return names[status];
  return "unknown";
}
