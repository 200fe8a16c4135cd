/* A TEST DOUBLE of the real NCCL, built as a shared library that shunt loads through
 * SHUNT_NCCL_LIB. It is not an implementation of NCCL: it exists so that tests can see what
 * shunt forwards and get correct answers on a machine without a GPU. Nothing in it is
 * meant to be fast, complete or robust against misuse.
 *
 * Recording: every function records its name and the bytes of each argument (fake_last_call,
 * fake_call_count), and returns the result the test chose with fake_set_result.
 *
 * Computing: on HOST buffers and synchronously, these do real work: ncclGetUniqueId (random
 * bytes 0..39; 40..127 are left as they were), ncclCommInitRank[Config] (ranks are processes
 * or threads and meet in a POSIX shared-memory segment named from the id's first 40 bytes),
 * ncclCommCount/UserRank/CuDevice (device = rank), ncclCommGetAsyncError, ncclAllReduce,
 * ncclAllGather, ncclBroadcast, ncclReduceScatter (every dtype; sum, prod, min, max, avg and
 * PreMulSum ops from ncclRedOpCreatePreMulSum), ncclAlltoAll (in place too), ncclGroupStart/End (work issued in a group
 * runs at the outermost end, one thread per communicator), ncclCommSplit,
 * ncclCommFinalize/Destroy/Abort. Each records first; a result set to an error with
 * fake_set_result is returned without computing; a communicator the double did not create
 * (or other made-up arguments) gets the recording and the chosen result only.
 *
 * Environment: FAKE_NCCL_CORRUPT=1 makes rank 0 flip a bit of one output element of every
 * collective (to test checkers); FAKE_NCCL_TIMEOUT=seconds bounds every wait for peers
 * (default 60), after which the call fails with ncclSystemError. */
#ifndef SHUNT_TEST_FAKE_NCCL_H
#define SHUNT_TEST_FAKE_NCCL_H

#include <nccl.h>
#include <stddef.h>

#define FAKE_MAX_ARGS 12
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
