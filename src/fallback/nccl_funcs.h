/* The NCCL functions shunt exports, as an X-macro list.
 *
 * Every entry is exported as nccl<Name> and pnccl<Name> with NCCL's exact prototype and has a
 * slot in the forwarding table of the real library. The set is the union of what the NCCL
 * 2.28 binary exports and what the nccl.h used for the build declares; entries newer than the
 * build's headers are compiled only when those headers declare them.
 *
 *   R(who, name, params, args)             returns ncclResult_t
 *   S(who, ret, name, params, args, fail)  returns another type; `fail` is returned when the
 *                                          real library cannot serve the call
 *   V(who, name, params, args)             returns void
 *
 * `who` is F when the export is a pure pass-through generated from this list, FC when it is
 * a pass-through whose parameter `comm` must first be checked (a communicator that shunt made
 * without NCCL is never handed to NCCL), O when shunt implements the function itself
 * (src/api/) and uses the table only to reach NCCL.
 */
#ifndef SHUNT_FALLBACK_NCCL_FUNCS_H
#define SHUNT_FALLBACK_NCCL_FUNCS_H

#include <nccl.h>

#include "fallback/nccl_compat.h"
#include "fallback/nccl_device_abi.h"

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 28, 0)
#error "shunt is built against nccl.h from NCCL 2.28 or newer"
#endif
#if NCCL_VERSION_CODE < NCCL_VERSION(2, 28, 7)
/* Added in 2.28.7; exported all the same so that a newer real library's function is
 * reachable through a shunt built with older 2.28 headers. */
ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags);
ncclResult_t pncclCommRevoke(ncclComm_t comm, int revokeFlags);
#endif

#define SHUNT_NCCL_CORE_FUNCS(R, S, V)                                                                     \
  R(O, ncclMemAlloc, (void** ptr, size_t size), (ptr, size))                                                  \
  R(O, ncclMemFree, (void* ptr), (ptr))                                                                       \
  R(O, ncclGetVersion, (int* version), (version))                                                             \
  R(O, ncclGetUniqueId, (ncclUniqueId * uniqueId), (uniqueId))                                                \
  R(O, ncclCommInitRankConfig, (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config), \
    (comm, nranks, commId, rank, config))                                                                  \
  R(O, ncclCommInitRank, (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank), (comm, nranks, commId, rank)) \
  R(O, ncclCommInitAll, (ncclComm_t * comm, int ndev, const int* devlist), (comm, ndev, devlist))             \
  R(O, ncclCommFinalize, (ncclComm_t comm), (comm))                                                           \
  R(O, ncclCommDestroy, (ncclComm_t comm), (comm))                                                            \
  R(O, ncclCommAbort, (ncclComm_t comm), (comm))                                                              \
  R(FC, ncclCommRevoke, (ncclComm_t comm, int revokeFlags), (comm, revokeFlags))                               \
  R(O, ncclCommSplit, (ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config),      \
    (comm, color, key, newcomm, config))                                                                   \
  R(O, ncclCommShrink,                                                                                         \
    (ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm, ncclConfig_t* config, \
     int shrinkFlags),                                                                                     \
    (comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags))                             \
  R(O, ncclCommInitRankScalable,                                                                              \
    (ncclComm_t * newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds, ncclConfig_t* config),  \
    (newcomm, nranks, myrank, nId, commIds, config))                                                       \
  S(O, const char*, ncclGetErrorString, (ncclResult_t result), (result), "unknown result code")               \
  S(O, const char*, ncclGetLastError, (ncclComm_t comm), (comm), "")                                          \
  V(F, ncclResetDebugInit, (void), ())                                                                        \
  R(O, ncclCommGetAsyncError, (ncclComm_t comm, ncclResult_t * asyncError), (comm, asyncError))               \
  R(O, ncclCommCount, (const ncclComm_t comm, int* count), (comm, count))                                     \
  R(O, ncclCommCuDevice, (const ncclComm_t comm, int* device), (comm, device))                                \
  R(O, ncclCommUserRank, (const ncclComm_t comm, int* rank), (comm, rank))                                    \
  R(O, ncclCommRegister, (const ncclComm_t comm, void* buff, size_t size, void** handle), (comm, buff, size, handle)) \
  R(O, ncclCommDeregister, (const ncclComm_t comm, void* handle), (comm, handle))                             \
  R(O, ncclCommWindowRegister, (ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags),   \
    (comm, buff, size, win, winFlags))                                                                     \
  R(O, ncclCommWindowDeregister, (ncclComm_t comm, ncclWindow_t win), (comm, win))                            \
  R(O, ncclRedOpCreatePreMulSum,                                                                              \
    (ncclRedOp_t * op, void* scalar, ncclDataType_t datatype, ncclScalarResidence_t residence, ncclComm_t comm), \
    (op, scalar, datatype, residence, comm))                                                               \
  R(O, ncclRedOpDestroy, (ncclRedOp_t op, ncclComm_t comm), (op, comm))                                       \
  R(O, ncclReduce,                                                                                             \
    (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, int root, \
     ncclComm_t comm, cudaStream_t stream),                                                                \
    (sendbuff, recvbuff, count, datatype, op, root, comm, stream))                                         \
  R(O, ncclBcast, (void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream), \
    (buff, count, datatype, root, comm, stream))                                                           \
  R(O, ncclBroadcast,                                                                                         \
    (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, \
     cudaStream_t stream),                                                                                 \
    (sendbuff, recvbuff, count, datatype, root, comm, stream))                                             \
  R(O, ncclAllReduce,                                                                                         \
    (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, \
     cudaStream_t stream),                                                                                 \
    (sendbuff, recvbuff, count, datatype, op, comm, stream))                                               \
  R(O, ncclReduceScatter,                                                                                     \
    (const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op,      \
     ncclComm_t comm, cudaStream_t stream),                                                                \
    (sendbuff, recvbuff, recvcount, datatype, op, comm, stream))                                           \
  R(O, ncclAllGather,                                                                                         \
    (const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm,     \
     cudaStream_t stream),                                                                                 \
    (sendbuff, recvbuff, sendcount, datatype, comm, stream))                                               \
  R(O, ncclAlltoAll,                                                                                           \
    (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,         \
     cudaStream_t stream),                                                                                 \
    (sendbuff, recvbuff, count, datatype, comm, stream))                                                   \
  R(FC, ncclGather,                                                                                            \
    (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, \
     cudaStream_t stream),                                                                                 \
    (sendbuff, recvbuff, count, datatype, root, comm, stream))                                             \
  R(FC, ncclScatter,                                                                                           \
    (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, \
     cudaStream_t stream),                                                                                 \
    (sendbuff, recvbuff, count, datatype, root, comm, stream))                                             \
  R(FC, ncclSend,                                                                                              \
    (const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream), \
    (sendbuff, count, datatype, peer, comm, stream))                                                       \
  R(FC, ncclRecv,                                                                                              \
    (void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream), \
    (recvbuff, count, datatype, peer, comm, stream))                                                       \
  R(O, ncclGroupStart, (void), ())                                                                            \
  R(O, ncclGroupEnd, (void), ())                                                                              \
  R(F, ncclGroupSimulateEnd, (ncclSimInfo_t * simInfo), (simInfo))                                        \
  SHUNT_NCCL_NEWER_FUNCS(R, S, V)

/* Functions of nccl.h in releases after 2.28 (declared by nccl_compat.h when the build's
 * headers are older). */
#define SHUNT_NCCL_NEWER_FUNCS(R, S, V)                                                                    \
  R(FC, ncclCommGetUniqueId, (ncclComm_t comm, ncclUniqueId * uniqueId), (comm, uniqueId))                    \
  R(O, ncclCommGrow,                                                                                          \
    (ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId, int rank, ncclComm_t* newcomm, ncclConfig_t* config), \
    (comm, nRanks, uniqueId, rank, newcomm, config))                                                       \
  R(O, ncclCommSuspend, (ncclComm_t comm, int flags), (comm, flags))                                          \
  R(O, ncclCommResume, (ncclComm_t comm), (comm))                                                             \
  R(FC, ncclCommMemStats, (ncclComm_t comm, ncclCommMemStat_t stat, uint64_t * value), (comm, stat, value))   \
  R(FC, ncclWinGetUserPtr, (ncclComm_t comm, ncclWindow_t win, void** outUserPtr), (comm, win, outUserPtr))   \
  R(FC, ncclPutSignal,                                                                                         \
    (const void* localbuff, size_t count, ncclDataType_t datatype, int peer, ncclWindow_t peerWin,           \
     size_t peerWinOffset, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm, cudaStream_t stream),  \
    (localbuff, count, datatype, peer, peerWin, peerWinOffset, sigIdx, ctx, flags, comm, stream))           \
  R(FC, ncclSignal, (int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm, cudaStream_t stream), \
    (peer, sigIdx, ctx, flags, comm, stream))                                                              \
  R(FC, ncclWaitSignal, (int nDesc, ncclWaitSignalDesc_t* signalDescs, ncclComm_t comm, cudaStream_t stream),  \
    (nDesc, signalDescs, comm, stream))                                                                    \
  R(O, ncclAllReduceConfig,                                                                                   \
    (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, \
     cudaStream_t stream, const ncclCollConfig_t* config),                                                 \
    (sendbuff, recvbuff, count, datatype, op, comm, stream, config))                                       \
  R(O, ncclBroadcastConfig,                                                                                   \
    (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, \
     cudaStream_t stream, const ncclCollConfig_t* config),                                                 \
    (sendbuff, recvbuff, count, datatype, root, comm, stream, config))                                     \
  R(O, ncclReduceConfig,                                                                                       \
    (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, int root, \
     ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t* config),                                \
    (sendbuff, recvbuff, count, datatype, op, root, comm, stream, config))                                 \
  R(O, ncclAllGatherConfig,                                                                                   \
    (const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm,     \
     cudaStream_t stream, const ncclCollConfig_t* config),                                                 \
    (sendbuff, recvbuff, sendcount, datatype, comm, stream, config))                                       \
  R(O, ncclReduceScatterConfig,                                                                               \
    (const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op,      \
     ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t* config),                                \
    (sendbuff, recvbuff, recvcount, datatype, op, comm, stream, config))                                   \
  R(O, ncclAlltoAllConfig,                                                                                     \
    (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,         \
     cudaStream_t stream, const ncclCollConfig_t* config),                                                 \
    (sendbuff, recvbuff, count, datatype, comm, stream, config))                                           \
  R(FC, ncclGatherConfig,                                                                                      \
    (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, \
     cudaStream_t stream, const ncclCollConfig_t* config),                                                 \
    (sendbuff, recvbuff, count, datatype, root, comm, stream, config))                                     \
  R(FC, ncclScatterConfig,                                                                                     \
    (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, \
     cudaStream_t stream, const ncclCollConfig_t* config),                                                 \
    (sendbuff, recvbuff, count, datatype, root, comm, stream, config))                                     \
  R(F, ncclSetEncryption, (const ncclEncryptionConfig_t* config), (config))                                   \
  R(F, ncclParamBind, (ncclParamHandle_t * out, const char* key), (out, key))                                 \
  R(F, ncclParamGetI8, (ncclParamHandle_t h, int8_t * out), (h, out))                                         \
  R(F, ncclParamGetI16, (ncclParamHandle_t h, int16_t * out), (h, out))                                       \
  R(F, ncclParamGetI32, (ncclParamHandle_t h, int32_t * out), (h, out))                                       \
  R(F, ncclParamGetI64, (ncclParamHandle_t h, int64_t * out), (h, out))                                       \
  R(F, ncclParamGetU8, (ncclParamHandle_t h, uint8_t * out), (h, out))                                        \
  R(F, ncclParamGetU16, (ncclParamHandle_t h, uint16_t * out), (h, out))                                      \
  R(F, ncclParamGetU32, (ncclParamHandle_t h, uint32_t * out), (h, out))                                      \
  R(F, ncclParamGetU64, (ncclParamHandle_t h, uint64_t * out), (h, out))                                      \
  R(F, ncclParamGetStr, (ncclParamHandle_t h, const char** out), (h, out))                                    \
  R(F, ncclParamGet, (ncclParamHandle_t h, void* out, int maxLen, int* len), (h, out, maxLen, len))           \
  R(F, ncclParamGetParameter, (const char* key, const char** value, int* valueLen), (key, value, valueLen))    \
  R(F, ncclParamGetAllParameterKeys, (const char*** table, int* tableLen), (table, tableLen))                 \
  V(F, ncclParamDumpAll, (void), ())

/* Host functions of the device API (nccl_device/ headers, C++ headers; types from nccl_device_abi.h). */
#define SHUNT_NCCL_DEVICE_FUNCS(R, S, V)                                                                   \
  R(FC, ncclDevCommCreate, (ncclComm_t comm, ncclDevCommRequirements_t const* reqs, ncclDevComm_t* outDevComm),  \
    (comm, reqs, outDevComm))                                                                              \
  R(FC, ncclDevCommDestroy, (ncclComm_t comm, ncclDevComm_t const* devComm), (comm, devComm))                 \
  S(FC, ncclTeam_t, ncclTeamWorld, (ncclComm_t comm), (comm), shunt_team_none)                                 \
  S(FC, ncclTeam_t, ncclTeamLsa, (ncclComm_t comm), (comm), shunt_team_none)                                   \
  S(FC, ncclTeam_t, ncclTeamRail, (ncclComm_t comm), (comm), shunt_team_none)                                  \
  S(FC, int, ncclTeamRankToWorld, (ncclComm_t comm, ncclTeam_t team, int rank), (comm, team, rank), -1)        \
  S(FC, int, ncclTeamRankToLsa, (ncclComm_t comm, ncclTeam_t team, int rank), (comm, team, rank), -1)          \
  R(F, ncclLsaBarrierCreateRequirement,                                                                       \
    (ncclTeam_t team, int nBarriers, ncclLsaBarrierHandle_t* outHandle, ncclDevResourceRequirements_t* outReq), \
    (team, nBarriers, outHandle, outReq))                                                                  \
  S(F, int, ncclLLA2ACalcSlots, (int maxElts, int maxEltSize), (maxElts, maxEltSize), -1)                     \
  R(F, ncclLLA2ACreateRequirement,                                                                            \
    (int nBlocks, int nSlots, ncclLLA2AHandle_t* outHandle, ncclDevResourceRequirements_t* outReq),        \
    (nBlocks, nSlots, outHandle, outReq))                                                                  \
  R(FC, ncclGinBarrierCreateRequirement,                                                                       \
    (ncclComm_t comm, ncclTeam_t team, int nBarriers, ncclGinBarrierHandle_t* outHandle,                   \
     ncclDevResourceRequirements_t* outReq),                                                               \
    (comm, team, nBarriers, outHandle, outReq))                                                            \
  R(FC, ncclCommQueryProperties, (ncclComm_t comm, ncclCommProperties_t * props), (comm, props))              \
  R(F, ncclGetLsaMultimemDevicePointer, (ncclWindow_t window, size_t offset, void** outPtr), (window, offset, outPtr)) \
  R(F, ncclGetMultimemDevicePointer,                                                                          \
    (ncclWindow_t window, size_t offset, ncclMultimemHandle_t multimem, void** outPtr),                     \
    (window, offset, multimem, outPtr))                                                                    \
  R(F, ncclGetLsaDevicePointer, (ncclWindow_t window, size_t offset, int lsaRank, void** outPtr),             \
    (window, offset, lsaRank, outPtr))                                                                     \
  R(F, ncclGetPeerDevicePointer, (ncclWindow_t window, size_t offset, int peer, void** outPtr),               \
    (window, offset, peer, outPtr))                                                                        \
  R(F, ncclGetMultimemDeviceLeInfo, (ncclWindow_t window, size_t offset, ncclCftLeId * leId, size_t * leOffset), \
    (window, offset, leId, leOffset))                                                                      \
  R(F, ncclGetCftDeviceLeInfo,                                                                                \
    (ncclWindow_t window, size_t offset, int peerCft, ncclTeam_t cftTeam, ncclCftLeId* leId, size_t* leOffset), \
    (window, offset, peerCft, cftTeam, leId, leOffset))                                                    \
  R(F, ncclGetPeerDeviceLeInfo,                                                                               \
    (ncclWindow_t window, size_t offset, int peerWorld, ncclCftLeId* leId, size_t* leOffset),               \
    (window, offset, peerWorld, leId, leOffset))                                                           \
  S(FC, ncclTeam_t, ncclTeamCft, (ncclComm_t comm, ncclCftTeamMode_t mode), (comm, mode), shunt_team_none)     \
  S(FC, ncclTeam_t, ncclTeamCftMultimem, (ncclComm_t comm), (comm), shunt_team_none)                           \
  R(F, ncclGinOutboxCreateRequirement,                                                                        \
    (int nBlocks, int size_log2, ncclGinOutboxHandle_t* outHandle, ncclDevResourceRequirements_t* outReq),  \
    (nBlocks, size_log2, outHandle, outReq))                                                               \
  R(F, ncclGinInboxA2ACreateRequirement,                                                                      \
    (ncclTeam_t peers, int nBlocks, int size_log2, ncclGinInboxA2AHandle_t* outHandle,                     \
     ncclDevResourceRequirements_t* outReq),                                                               \
    (peers, nBlocks, size_log2, outHandle, outReq))

/* Exported by the real library without a pnccl twin and without a declaration in nccl.h. */
#define SHUNT_NCCL_INTERNAL_FUNCS(R, S, V) V(O, ncclResetDebugInitInternal, (void), ())

/* Declarations for the functions no C header of NCCL declares. */
#define SHUNT_DECL_R(who, name, params, args) ncclResult_t name params; ncclResult_t p##name params;
#define SHUNT_DECL_S(who, ret, name, params, args, fail) ret name params; ret p##name params;
#define SHUNT_DECL_V(who, name, params, args) void name params;
SHUNT_NCCL_DEVICE_FUNCS(SHUNT_DECL_R, SHUNT_DECL_S, SHUNT_DECL_V)
SHUNT_NCCL_INTERNAL_FUNCS(SHUNT_DECL_R, SHUNT_DECL_S, SHUNT_DECL_V)
#undef SHUNT_DECL_R
#undef SHUNT_DECL_S
#undef SHUNT_DECL_V

#define SHUNT_NCCL_ALL_FUNCS(R, S, V) \
  SHUNT_NCCL_CORE_FUNCS(R, S, V)      \
  SHUNT_NCCL_DEVICE_FUNCS(R, S, V)    \
  SHUNT_NCCL_INTERNAL_FUNCS(R, S, V)

#endif
