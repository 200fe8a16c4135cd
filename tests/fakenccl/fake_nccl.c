/* The NCCL test double; see fake_nccl.h. FAKE_PARTIAL builds a variant that lacks a few
 * functions, as an older NCCL would. */
#include "fakenccl/fake_nccl.h"

#include <pthread.h>
#include <string.h>

#include "common/pp.h"
#include "fallback/nccl_funcs.h"

#define FAKE_EXPORT __attribute__((visibility("default")))

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct fake_call last;
static long calls;
static ncclResult_t result = ncclSuccess;
static int bcast_self;

FAKE_EXPORT const struct fake_call* fake_last_call(void) { return &last; }
FAKE_EXPORT long fake_call_count(void) { return calls; }
FAKE_EXPORT void fake_set_result(ncclResult_t r) { result = r; }
FAKE_EXPORT int fake_bcast_bound_to_self(void) { return bcast_self; }

static void rec_begin(const char* name) {
  pthread_mutex_lock(&mu);
  calls++;
  memset(&last, 0, sizeof(last));
  strncpy(last.name, name, sizeof(last.name) - 1);
}
static void rec_arg(const void* p, size_t n) {
  if (last.nargs < FAKE_MAX_ARGS && n <= sizeof(last.arg[0])) {
    memcpy(last.arg[last.nargs], p, n);
    last.size[last.nargs] = n;
  }
  last.nargs++;
}
static void rec_end(void) { pthread_mutex_unlock(&mu); }

#define FAKE_REC(a) rec_arg(&(a), sizeof(a))
#define FAKE_RECORD(name, args) \
  rec_begin(#name);             \
  PP_EACH(FAKE_REC, PP_SEMI, PP_UNPAREN args);  \
  rec_end()

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

/* Functions with behaviour of their own. */
FAKE_EXPORT ncclResult_t ncclGetVersion(int* version) {
  FAKE_RECORD(ncclGetVersion, (version));
  *version = FAKE_VERSION;
  return ncclSuccess;
}

/* Everything else is generated from the list. The hand-written ones above, and in the
 * partial variant the functions an older NCCL lacks, are renamed out of the way so that the
 * generated twin is not exported under the NCCL name. */
#define ncclGetVersion fake_unused_ncclGetVersion
#define ncclBcast fake_unused_ncclBcast
#ifdef FAKE_PARTIAL
#define ncclCommShrink fake_unused_ncclCommShrink
#define ncclTeamWorld fake_unused_ncclTeamWorld
#endif
SHUNT_NCCL_ALL_FUNCS(FAKE_R, FAKE_S, FAKE_V)
#undef ncclGetVersion
#undef ncclBcast

/* As in the real library, ncclBcast calls the public ncclBroadcast through the PLT. */
static ncclResult_t own_broadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                  int root, ncclComm_t comm, cudaStream_t stream)
    __attribute__((alias("ncclBroadcast")));
FAKE_EXPORT ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                                   cudaStream_t stream) {
  ncclResult_t (*volatile target)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) =
      ncclBroadcast;
  bcast_self = target == own_broadcast;
  ncclResult_t rc = ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
  FAKE_RECORD(ncclBcast, (buff, count, datatype, root, comm, stream));
  return rc;
}

