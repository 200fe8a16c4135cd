/* A test double of the real NCCL: every function records its name and the bytes of each
 * argument, and returns a value the test chose. Built as a shared library that shunt loads
 * through SHUNT_NCCL_LIB. */
#ifndef SHUNT_TEST_FAKE_NCCL_H
#define SHUNT_TEST_FAKE_NCCL_H

#include <nccl.h>
#include <stddef.h>

#define FAKE_MAX_ARGS 8
#define FAKE_VERSION 22899 /* an NCCL version no real release has, to see where answers come from */

struct fake_call {
  char name[64];
  int nargs;
  size_t size[FAKE_MAX_ARGS];
  unsigned char arg[FAKE_MAX_ARGS][sizeof(ncclUniqueId)];
};

typedef const struct fake_call* (*fake_last_call_fn)(void);
typedef long (*fake_call_count_fn)(void);
typedef void (*fake_set_result_fn)(ncclResult_t);
/* 1 when the double's own call of ncclBroadcast (from ncclBcast) reached its own definition. */
typedef int (*fake_bcast_bound_to_self_fn)(void);

#endif
