/* shunt's own public interface, beside the NCCL API it exports.
 *
 * For tools and for applications that embed shunt and want to report what it is using. */
#ifndef SHUNT_SHUNT_H
#define SHUNT_SHUNT_H

#ifdef __cplusplus
extern "C" {
#endif

/* shunt's version, e.g. "0.1.0". */
const char* shuntVersion(void);

/* The real NCCL that calls are forwarded to: its absolute path and version code. Loads it
 * if that has not happened yet. Returns 0 on success; -1 when there is none, with *path set
 * to the reason (naming every file tried) and *version to 0. */
int shuntRealNccl(const char** path, int* version);

struct ncclComm;

/* What served the last ncclAllReduce or ncclAllGather on comm in this process: *name is the
 * plan's name, or NULL when NCCL served it. Returns 0, or -1 when shunt does not know comm. */
int shuntLastPlan(struct ncclComm* comm, const char** name);

#ifdef __cplusplus
}
#endif

#endif
