// The byte formats on the TCP stream that stands in for the RoCE wire. Both ends run on one host
// architecture, so fields travel in host byte order.
#ifndef FAKEIBV_WIRE_H
#define FAKEIBV_WIRE_H

#include <stdint.h>

#define FIB_MAGIC 0x46494256u

enum fib_kind {
  FIB_HELLO = 1,
  FIB_WELCOME = 2,
  FIB_ACK = 3,
  FIB_NAK = 4,
};

// First bytes a sending QP writes on a fresh connection: which QP speaks to which.
struct fib_hello {
  uint32_t magic;
  uint32_t kind;
  uint32_t from_qpn;
  uint32_t to_qpn;
};

// Precedes the payload of every RDMA write.
struct fib_write_hdr {
  uint32_t magic;
  uint32_t rkey;
  uint64_t remote_addr;
  uint64_t length;
  uint64_t seq;
};

// Receiver to sender: the hello was accepted (WELCOME), or write `seq` landed (ACK) or was refused
// (NAK, with an ibv_wc_status).
struct fib_reply {
  uint32_t magic;
  uint32_t kind;
  uint32_t status;
  uint32_t qpn;
  uint64_t seq;
};

_Static_assert(sizeof(struct fib_hello) == 16, "hello layout");
_Static_assert(sizeof(struct fib_write_hdr) == 32, "write header layout");
_Static_assert(sizeof(struct fib_reply) == 24, "reply layout");

#endif  // FAKEIBV_WIRE_H
