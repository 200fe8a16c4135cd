/* PreMulSum reduction ops, tracked per communicator so that plans can compute them.
 *
 * Promises: an op handle created through ncclRedOpCreatePreMulSum is recorded with its
 * data type, residence and scalar (the bytes for host-immediate scalars, the pointer for
 * device-resident ones) until ncclRedOpDestroy; the scalar is captured at enqueue time,
 * because clients destroy ops right after enqueueing. Safe from several threads. */
#ifndef SHUNT_COMM_REDOP_H
#define SHUNT_COMM_REDOP_H

#include <nccl.h>
#include <stdint.h>

struct shunt_redop_info {
  ncclDataType_t dtype;
  ncclScalarResidence_t residence;
  unsigned char scalar[8]; /* host-immediate: the value in dtype */
  const void* scalar_ptr;  /* device residence: where the value lives */
};

struct shunt_redop_table;

struct shunt_redop_table* shunt_redop_table_new(void);
void shunt_redop_table_free(struct shunt_redop_table* t);
int shunt_redop_add(struct shunt_redop_table* t, ncclRedOp_t op, const struct shunt_redop_info* info);
/* 0 and *out filled when op is known, else -1. */
int shunt_redop_find(struct shunt_redop_table* t, ncclRedOp_t op, struct shunt_redop_info* out);
void shunt_redop_remove(struct shunt_redop_table* t, ncclRedOp_t op);
/* A handle value unused in t, at or above ncclNumOps, for communicators without NCCL. */
ncclRedOp_t shunt_redop_fresh(struct shunt_redop_table* t);

#endif
