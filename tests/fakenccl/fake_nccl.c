/* The NCCL test double; see fake_nccl.h. FAKE_PARTIAL builds a variant that lacks a few
 * functions, as an older NCCL would. */
#include "fakenccl/fake_nccl.h"

#include <pthread.h>
#include <string.h>

#include "fakenccl/fake_record.h"
#include "fallback/nccl_funcs.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct fake_call last;
static long calls;
static ncclResult_t result = ncclSuccess;
static int bcast_self;

FAKE_EXPORT const struct fake_call* fake_last_call(void) { return &last; }
FAKE_EXPORT long fake_call_count(void) { return calls; }
FAKE_EXPORT void fake_set_result(ncclResult_t r) { result = r; }
FAKE_EXPORT int fake_bcast_bound_to_self(void) { return bcast_self; }
ncclResult_t fake_scripted(void) { return result; }

void fake_rec_begin(const char* name) {
  pthread_mutex_lock(&mu);
  calls++;
  memset(&last, 0, sizeof(last));
  strncpy(last.name, name, sizeof(last.name) - 1);
}
void fake_rec_arg(const void* p, size_t n) {
  if (last.nargs < FAKE_MAX_ARGS && n <= sizeof(last.arg[0])) {
    memcpy(last.arg[last.nargs], p, n);
    last.size[last.nargs] = n;
  }
  last.nargs++;
}
void fake_rec_end(void) { pthread_mutex_unlock(&mu); }

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

#define FAKE_R(who, name, params, args)  \
  FAKE_EXPORT ncclResult_t name params { \
    FAKE_RECORD(name, args);             \
    return result;                       \
  }
#define FAKE_S(who, ret, name, params, args, fail) \
  FAKE_EXPORT ret name params {                    \
    FAKE_RECORD(name, args);                       \
    return fake_value_##name();                    \
  }
#define FAKE_V(who, name, params, args) \
  FAKE_EXPORT void name params { FAKE_RECORD(name, args); }

/* Distinct return values for the functions that do not return ncclResult_t. */
static const char* fake_value_ncclGetErrorString(void) { return "fake error string"; }
static const char* fake_value_ncclGetLastError(void) { return "fake last error"; }
static ncclTeam_t fake_value_ncclTeamWorld(void) { return (ncclTeam_t){8, 3, 1}; }
static ncclTeam_t fake_value_ncclTeamLsa(void) { return (ncclTeam_t){4, 2, 1}; }
static ncclTeam_t fake_value_ncclTeamRail(void) { return (ncclTeam_t){2, 1, 4}; }
static int fake_value_ncclTeamRankToWorld(void) { return 5; }
static int fake_value_ncclTeamRankToLsa(void) { return 6; }
static int fake_value_ncclLLA2ACalcSlots(void) { return 7; }
static ncclTeam_t fake_value_ncclTeamCft(void) { return (ncclTeam_t){16, 9, 2}; }
static ncclTeam_t fake_value_ncclTeamCftMultimem(void) { return (ncclTeam_t){32, 17, 1}; }

/* Functions with behaviour of their own. */
FAKE_EXPORT ncclResult_t ncclGetVersion(int* version) {
  FAKE_RECORD(ncclGetVersion, (version));
  *version = FAKE_VERSION;
  return ncclSuccess;
}

/* Everything else is generated from the list. The hand-written ones (above, and the
 * computing ones in fake_compute.c), and in the partial variant the functions an older
 * NCCL lacks, are renamed out of the way so that the generated twin is not exported under
 * the NCCL name. */
#define ncclGetVersion fake_unused_ncclGetVersion
#define ncclBcast fake_unused_ncclBcast
#define ncclGetUniqueId fake_unused_ncclGetUniqueId
#define ncclCommInitRank fake_unused_ncclCommInitRank
#define ncclCommInitRankConfig fake_unused_ncclCommInitRankConfig
#define ncclCommCount fake_unused_ncclCommCount
#define ncclCommUserRank fake_unused_ncclCommUserRank
#define ncclCommCuDevice fake_unused_ncclCommCuDevice
#define ncclCommGetAsyncError fake_unused_ncclCommGetAsyncError
#define ncclAllReduce fake_unused_ncclAllReduce
#define ncclAllGather fake_unused_ncclAllGather
#define ncclBroadcast fake_unused_ncclBroadcast
#define ncclReduce fake_unused_ncclReduce
#define ncclReduceScatter fake_unused_ncclReduceScatter
#define ncclAlltoAll fake_unused_ncclAlltoAll
#define ncclGroupStart fake_unused_ncclGroupStart
#define ncclGroupEnd fake_unused_ncclGroupEnd
#define ncclCommDestroy fake_unused_ncclCommDestroy
#define ncclCommFinalize fake_unused_ncclCommFinalize
#define ncclCommAbort fake_unused_ncclCommAbort
#define ncclCommSplit fake_unused_ncclCommSplit
#define ncclRedOpCreatePreMulSum fake_unused_ncclRedOpCreatePreMulSum
#define ncclRedOpDestroy fake_unused_ncclRedOpDestroy
#define ncclCommShrink fake_unused_ncclCommShrink
#define ncclCommInitRankScalable fake_unused_ncclCommInitRankScalable
#ifdef FAKE_PARTIAL
#define ncclTeamWorld fake_unused_ncclTeamWorld
#endif
SHUNT_NCCL_ALL_FUNCS(FAKE_R, FAKE_S, FAKE_V)
#undef ncclGetVersion
#undef ncclBcast
#undef ncclGetUniqueId
#undef ncclCommInitRank
#undef ncclCommInitRankConfig
#undef ncclCommCount
#undef ncclCommUserRank
#undef ncclCommCuDevice
#undef ncclCommGetAsyncError
#undef ncclAllReduce
#undef ncclAllGather
#undef ncclBroadcast
#undef ncclReduce
#undef ncclReduceScatter
#undef ncclAlltoAll
#undef ncclGroupStart
#undef ncclGroupEnd
#undef ncclCommDestroy
#undef ncclCommFinalize
#undef ncclCommAbort
#undef ncclCommSplit
#undef ncclRedOpCreatePreMulSum
#undef ncclRedOpDestroy
#undef ncclCommShrink
#undef ncclCommInitRankScalable

/* As in the real library, ncclBcast calls the public ncclBroadcast through the PLT.
 * fake_own_broadcast is the double's own definition (fake_compute.c), under a hidden name
 * that nothing can interpose. */
extern ncclResult_t fake_own_broadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                       int root, ncclComm_t comm, cudaStream_t stream);
FAKE_EXPORT ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                                   cudaStream_t stream) {
  ncclResult_t (*volatile target)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) =
      ncclBroadcast;
  bcast_self = target == fake_own_broadcast;
  ncclResult_t rc = ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
  FAKE_RECORD(ncclBcast, (buff, count, datatype, root, comm, stream));
  return rc;
}
