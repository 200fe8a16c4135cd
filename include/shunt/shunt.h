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

/* Whether comm's calls on device memory run on shunt's GPU executor (SHUNT_GPU): *on is 1 when
 * they do (its self-check passed on every rank, or SHUNT_GPU=on), 0 when they go to NCCL
 * (SHUNT_GPU=off, or the self-check failed: a WARN said why), -1 when nothing decided it (no
 * CUDA device where the communicator was made, or no plan for its size). Returns 0, or -1
 * when shunt does not know comm. */
int shuntGpuExecutor(struct ncclComm* comm, int* on);

/* shunt's options in NCCL 2.32's per-call configuration (ncclCollConfig_t.ext, a list of
 * ncclConfigExt_t): key.vendorId SHUNT_CONFIG_VENDOR_ID and one of the option ids below.
 * NCCL ignores every extension, so the same config works with or without shunt. */
#define SHUNT_CONFIG_VENDOR_ID 0x53484e /* "SHN", below 2^24 as NCCL asks */
/* val.s: the name of the only plan that may serve this call (another size or no such plan:
 * the call goes to NCCL, said in the CALL log). */
#define SHUNT_CONFIG_PLAN 1
/* val.i != 0: no plan serves this call; it goes to NCCL. */
#define SHUNT_CONFIG_NO_PLANS 2

#ifdef __cplusplus
}
#endif

#endif
