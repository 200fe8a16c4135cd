/* Port-channel triggers: what a threadblock asks its rank's proxy to do (docs/plan-format.md §6.3).
 *
 * Promises: one 32-byte plain struct with fixed-width fields, identical for C and CUDA C, so
 * a GPU kernel can push the same triggers into a FIFO in host-mapped memory. The proxy
 * handles triggers strictly in FIFO order; for one trigger it performs the data transfer
 * first, then the flag, then publishes completion (sync).
 *
 * Offsets are final byte offsets inside the named buffers: the pipeline window, the packet
 * doubling and the double-scratch half are already applied by the pusher. */
#ifndef SHUNT_TRANSPORT_TRIGGER_H
#define SHUNT_TRANSPORT_TRIGGER_H

#include <stdint.h>

/* Bits of shunt_trigger.type; the ops map as put = DATA, signal = FLAG, flush = SYNC,
 * put-with-signal = DATA|FLAG, put-with-signal-and-flush = DATA|FLAG|SYNC. */
#define SHUNT_TRIG_DATA 1u
#define SHUNT_TRIG_FLAG 2u
#define SHUNT_TRIG_SYNC 4u
/* The data are LL packets: copy them in whole 8-byte words so each packet word lands at once. */
#define SHUNT_TRIG_PACKETS 8u

struct shunt_trigger {
  uint64_t src_off; /* in the local buffer src_buf */
  uint64_t dst_off; /* in the peer's buffer dst_buf */
  uint64_t size;    /* DATA: bytes to copy */
  uint16_t peer;    /* the channel's peer rank */
  uint16_t ordinal; /* FLAG: the channel's ordinal to that peer (which semaphore to bump) */
  uint8_t type;     /* SHUNT_TRIG_* */
  uint8_t src_buf;  /* enum shunt_buf_type: 0 input, 1 output, 2 scratch */
  uint8_t dst_buf;
  uint8_t pad_;
};

#endif
