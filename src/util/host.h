/* Who and where this process is, as ranks compare it to decide what they share.
 *
 * Promises:
 * - shunt_host_identity: equal on two processes exactly when they run on one machine (one
 *   kernel): a hash of the host name and the kernel's boot id, so two containers that share a
 *   name still differ; SHUNT_HOSTID, when set, replaces both (as NCCL_HOSTID).
 * - shunt_process_token: a random 64-bit value drawn once per process (never 0), so two
 *   processes never share one, whatever their pids (containers reuse them). Thread-safe. */
#ifndef SHUNT_UTIL_HOST_H
#define SHUNT_UTIL_HOST_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

uint64_t shunt_host_identity(void);
uint64_t shunt_process_token(void);

#ifdef __cplusplus
}
#endif

#endif
