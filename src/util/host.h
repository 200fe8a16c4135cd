/* Who and where this process is, as ranks compare it to decide what they share.
 *
 * Promises:
 * - shunt_host_identity: equal on two processes exactly when they run on one machine (one
 *   kernel): a hash of the host name and the kernel's boot id, so two containers that share a
 *   name still differ; SHUNT_HOSTID, when set, replaces both (as NCCL_HOSTID).
 * - shunt_process_token: a random 64-bit value drawn once per process (never 0), so two
 *   processes never share one, whatever their pids (containers reuse them). Thread-safe.
 * - shunt_hosts_rpn: given every rank's host (equal values: one host), the ranks per host when
 *   every host holds that many consecutive ranks (n when all share one host), else 0.
 * - shunt_online_cpus: the CPUs online on this machine (at least 1), read once. Thread-safe. */
#ifndef SHUNT_UTIL_HOST_H
#define SHUNT_UTIL_HOST_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

uint64_t shunt_host_identity(void);
uint64_t shunt_process_token(void);
int shunt_hosts_rpn(const uint64_t* host, int n);
long shunt_online_cpus(void);

#ifdef __cplusplus
}
#endif

#endif
