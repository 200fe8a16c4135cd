/* What travels on the bootstrap's connections: every message is a fixed header and up to
 * SHUNT_BOOTSTRAP_MAX_MSG bytes of payload. The header carries the communicator's key (which
 * is also its tag: every rendezvous and every split child draws its own), the sender's rank,
 * the kind of message and its tag, and the payload length. Peers share the host byte order
 * (x86-64 and aarch64 are both little-endian); ports and addresses are in network order. */
#ifndef SHUNT_COMM_BOOTSTRAP_WIRE_H
#define SHUNT_COMM_BOOTSTRAP_WIRE_H

#include <stdint.h>

#include "comm/bootstrap.h"

#define SHUNT_BOOT_WIRE_MAGIC 0x534e5442u /* "BTNS" */

enum shunt_boot_msg {
  SHUNT_BOOT_ROOT_HELLO = 1, /* rank -> root: tag = nranks, payload = its listening address */
  SHUNT_BOOT_TABLE = 2,      /* root -> rank: payload = nranks listening addresses */
  SHUNT_BOOT_FAIL = 3,       /* root -> rank: payload = why the rendezvous failed (text) */
  SHUNT_BOOT_HELLO = 4,      /* rank -> rank, first on a connection: no payload */
  SHUNT_BOOT_USER = 5,       /* point-to-point: tag = the caller's tag */
  SHUNT_BOOT_COLL = 6,       /* collectives: tag = the collective's sequence number */
};

struct shunt_boot_hdr {
  uint32_t magic;
  uint32_t type; /* enum shunt_boot_msg */
  uint64_t key;
  int32_t from; /* sender's rank */
  int32_t tag;
  uint64_t len; /* payload bytes */
};

_Static_assert(sizeof(struct shunt_boot_hdr) == 32, "the header's layout is part of the protocol");
_Static_assert(sizeof(struct shunt_bootstrap_id) <= 88, "the id must fit in bytes 40-127 of ncclUniqueId");

#endif
