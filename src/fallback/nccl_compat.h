/* The NCCL API of releases newer than the nccl.h shunt is built against.
 *
 * shunt exports every function of NCCL 2.19 to 2.32.3 whatever headers it is built with, so
 * that an application built against newer headers (PyTorch 2.15 uses 2.30's) still resolves
 * every symbol. Where the build's nccl.h lacks a type or a prototype, it is declared here with
 * the layout and signature of the release that introduced it; with headers that have it, the
 * header's own declaration is used and the compiler checks shunt's definitions against it.
 * Each block is guarded by the first release whose nccl.h declares it (read off the headers
 * of every release from 2.19 to 2.32.3; no export was ever removed or changed its prototype).
 * The device-API host functions live in C++ headers only and are in nccl_device_abi.h. */
#ifndef SHUNT_FALLBACK_NCCL_COMPAT_H
#define SHUNT_FALLBACK_NCCL_COMPAT_H

#include <nccl.h>
#include <stddef.h>
#include <stdint.h>

#define SHUNT_NCCL_HEADERS_BEFORE(maj, min, pat) (NCCL_VERSION_CODE < NCCL_VERSION(maj, min, pat))

/* ---- Communicator growth, suspension, memory statistics, one-sided signals (2.29) ---- */
#if SHUNT_NCCL_HEADERS_BEFORE(2, 29, 0)
#define NCCL_SUSPEND_MEM 0x01
typedef enum {
  ncclStatGpuMemSuspend = 0,
  ncclStatGpuMemSuspended = 1,
  ncclStatGpuMemPersist = 2,
  ncclStatGpuMemTotal = 3
} ncclCommMemStat_t;
typedef struct {
  int opCnt;
  int peer;
  int sigIdx;
  int ctx;
} ncclWaitSignalDesc_t;
#endif

/* ---- Parameter access (2.30) ---- */
#if SHUNT_NCCL_HEADERS_BEFORE(2, 30, 0)
typedef struct ncclParamHandle* ncclParamHandle_t;
#endif

/* ---- Per-call configuration of collectives (2.31; 2.32 appended launchCompletionEvent) ---- */
#if SHUNT_NCCL_HEADERS_BEFORE(2, 31, 0)
typedef struct ncclConfigExt {
  struct ncclConfigExt* next;
  struct {
    int vendorId;
    int optionId;
  } key;
  union {
    int i;
    const char* s;
    void* raw;
  } val;
} ncclConfigExt_t;

typedef struct ncclCollConfig_v23200 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  ncclConfigExt_t* ext;
  int minCTAs;
  int maxCTAs;
  int nvlsCTAs;
  int cgaClusterSize;
  const char* algSelection;
  int forceAlgSelection;
  int CTAPolicy;
  uint64_t userProfilerTag;
  cudaEvent_t launchCompletionEvent;
} ncclCollConfig_t;
#endif

/* ---- Socket encryption (2.32) ---- */
#if SHUNT_NCCL_HEADERS_BEFORE(2, 32, 0)
typedef struct ncclEncryptionConfig_v23200 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int mode;
  const char* psk;
} ncclEncryptionConfig_t;
#endif

/* Prototypes of the functions above, for headers that lack them (one X-macro list in
 * nccl_funcs.h names them all; these are only the declarations it needs). */
#define SHUNT_COMPAT_DECL(ret, name, params) \
  ret name params;                           \
  ret p##name params;

#if SHUNT_NCCL_HEADERS_BEFORE(2, 29, 0)
SHUNT_COMPAT_DECL(ncclResult_t, ncclCommGetUniqueId, (ncclComm_t comm, ncclUniqueId* uniqueId))
SHUNT_COMPAT_DECL(ncclResult_t, ncclCommGrow,
                  (ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId, int rank, ncclComm_t* newcomm,
                   ncclConfig_t* config))
SHUNT_COMPAT_DECL(ncclResult_t, ncclCommSuspend, (ncclComm_t comm, int flags))
SHUNT_COMPAT_DECL(ncclResult_t, ncclCommResume, (ncclComm_t comm))
SHUNT_COMPAT_DECL(ncclResult_t, ncclCommMemStats, (ncclComm_t comm, ncclCommMemStat_t stat, uint64_t* value))
SHUNT_COMPAT_DECL(ncclResult_t, ncclWinGetUserPtr, (ncclComm_t comm, ncclWindow_t win, void** outUserPtr))
SHUNT_COMPAT_DECL(ncclResult_t, ncclPutSignal,
                  (const void* localbuff, size_t count, ncclDataType_t datatype, int peer,
                   ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx, int ctx, unsigned int flags,
                   ncclComm_t comm, cudaStream_t stream))
SHUNT_COMPAT_DECL(ncclResult_t, ncclSignal,
                  (int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm, cudaStream_t stream))
SHUNT_COMPAT_DECL(ncclResult_t, ncclWaitSignal,
                  (int nDesc, ncclWaitSignalDesc_t* signalDescs, ncclComm_t comm, cudaStream_t stream))
#endif

#if SHUNT_NCCL_HEADERS_BEFORE(2, 30, 0)
SHUNT_COMPAT_DECL(ncclResult_t, ncclParamBind, (ncclParamHandle_t * out, const char* key))
SHUNT_COMPAT_DECL(ncclResult_t, ncclParamGetI8, (ncclParamHandle_t h, int8_t* out))
SHUNT_COMPAT_DECL(ncclResult_t, ncclParamGetI16, (ncclParamHandle_t h, int16_t* out))
SHUNT_COMPAT_DECL(ncclResult_t, ncclParamGetI32, (ncclParamHandle_t h, int32_t* out))
SHUNT_COMPAT_DECL(ncclResult_t, ncclParamGetI64, (ncclParamHandle_t h, int64_t* out))
SHUNT_COMPAT_DECL(ncclResult_t, ncclParamGetU8, (ncclParamHandle_t h, uint8_t* out))
SHUNT_COMPAT_DECL(ncclResult_t, ncclParamGetU16, (ncclParamHandle_t h, uint16_t* out))
SHUNT_COMPAT_DECL(ncclResult_t, ncclParamGetU32, (ncclParamHandle_t h, uint32_t* out))
SHUNT_COMPAT_DECL(ncclResult_t, ncclParamGetU64, (ncclParamHandle_t h, uint64_t* out))
SHUNT_COMPAT_DECL(ncclResult_t, ncclParamGetStr, (ncclParamHandle_t h, const char** out))
SHUNT_COMPAT_DECL(ncclResult_t, ncclParamGet, (ncclParamHandle_t h, void* out, int maxLen, int* len))
SHUNT_COMPAT_DECL(ncclResult_t, ncclParamGetParameter, (const char* key, const char** value, int* valueLen))
SHUNT_COMPAT_DECL(ncclResult_t, ncclParamGetAllParameterKeys, (const char*** table, int* tableLen))
SHUNT_COMPAT_DECL(void, ncclParamDumpAll, (void))
#endif

#if SHUNT_NCCL_HEADERS_BEFORE(2, 31, 0)
SHUNT_COMPAT_DECL(ncclResult_t, ncclAllReduceConfig,
                  (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                   ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t* config))
SHUNT_COMPAT_DECL(ncclResult_t, ncclBroadcastConfig,
                  (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                   ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t* config))
SHUNT_COMPAT_DECL(ncclResult_t, ncclReduceConfig,
                  (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                   ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream,
                   const ncclCollConfig_t* config))
SHUNT_COMPAT_DECL(ncclResult_t, ncclAllGatherConfig,
                  (const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                   ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t* config))
SHUNT_COMPAT_DECL(ncclResult_t, ncclReduceScatterConfig,
                  (const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                   ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t* config))
SHUNT_COMPAT_DECL(ncclResult_t, ncclAlltoAllConfig,
                  (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                   ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t* config))
SHUNT_COMPAT_DECL(ncclResult_t, ncclGatherConfig,
                  (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                   ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t* config))
SHUNT_COMPAT_DECL(ncclResult_t, ncclScatterConfig,
                  (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                   ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t* config))
#endif

#if SHUNT_NCCL_HEADERS_BEFORE(2, 32, 0)
SHUNT_COMPAT_DECL(ncclResult_t, ncclSetEncryption, (const ncclEncryptionConfig_t* config))
#endif

#undef SHUNT_COMPAT_DECL

#endif
