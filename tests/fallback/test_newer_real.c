/* The functions NCCL added after 2.28, called through libshunt on a real NCCL.
 *
 * Usage: test_newer_real forward|unavailable, with SHUNT_NCCL_LIB set to a real libnccl.so.2:
 *   forward      (2.32) every call reaches the real library: its answer, never shunt's
 *                "does not provide"; most are made with a NULL communicator or window, which
 *                the real library refuses with a message of its own
 *   unavailable  (2.28) every call returns ncclInvalidUsage and names the function and the
 *                loaded library as lacking it, with no crash and no unresolved symbol
 * ncclTeamCft, ncclTeamCftMultimem and ncclGinInboxA2ACreateRequirement return no status and
 * crash the real 2.32 library on made-up arguments, so in forward mode only their binding is
 * checked (the real library defines them); unavailable mode calls them. */
#include <dlfcn.h>
#include <nccl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "fallback/nccl_funcs.h"

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

static int forward_mode;
static int calls;

/* After a call of `name`: did shunt say the loaded library lacks it? */
static void judge(const char* name, ncclResult_t rc) {
  const char* err = ncclGetLastError(NULL);
  int unavailable = err && strstr(err, name) && strstr(err, "does not provide");
  calls++;
  if (forward_mode) {
    CHECK_MSG(!unavailable, "%s did not reach the real library: %s", name, err);
  } else {
    CHECK_MSG(unavailable && rc == ncclInvalidUsage,
              "%s: expected ncclInvalidUsage naming it as missing, got %d (%s)", name, (int)rc,
              err ? err : "");
  }
}

#define CALL(name, ...) judge(#name, name(__VA_ARGS__))

int main(int argc, char** argv) {
  forward_mode = argc > 1 && !strcmp(argv[1], "forward");
  int v = 0;
  CHECK_EQ_INT(ncclGetVersion(&v), ncclSuccess);
  if (forward_mode)
    CHECK_MSG(v >= NCCL_VERSION(2, 32, 0), "forward mode needs NCCL 2.32 or newer, got %d", v);
  else
    CHECK_MSG(v < NCCL_VERSION(2, 29, 0), "unavailable mode needs an NCCL older than 2.29, got %d", v);

  static char out1[1 << 16], out2[1 << 16]; /* room for any opaque result */
  ncclUniqueId id;
  ncclComm_t nc = NULL;
  uint64_t u64;
  void* p;
  CALL(ncclCommGetUniqueId, NULL, &id);
  CALL(ncclCommGrow, NULL, 0, NULL, -1, &nc, NULL);
  CALL(ncclCommSuspend, NULL, 0);
  CALL(ncclCommResume, NULL);
  CALL(ncclCommMemStats, NULL, ncclStatGpuMemTotal, &u64);
  CALL(ncclWinGetUserPtr, NULL, NULL, &p);
  CALL(ncclPutSignal, NULL, 0, ncclInt8, 0, NULL, 0, 0, 0, 0, NULL, NULL);
  CALL(ncclSignal, 0, 0, 0, 0, NULL, NULL);
  CALL(ncclWaitSignal, 0, NULL, NULL, NULL);
  CALL(ncclAllReduceConfig, NULL, NULL, 0, ncclInt8, ncclSum, NULL, NULL, NULL);
  CALL(ncclBroadcastConfig, NULL, NULL, 0, ncclInt8, 0, NULL, NULL, NULL);
  CALL(ncclReduceConfig, NULL, NULL, 0, ncclInt8, ncclSum, 0, NULL, NULL, NULL);
  CALL(ncclAllGatherConfig, NULL, NULL, 0, ncclInt8, NULL, NULL, NULL);
  CALL(ncclReduceScatterConfig, NULL, NULL, 0, ncclInt8, ncclSum, NULL, NULL, NULL);
  CALL(ncclAlltoAllConfig, NULL, NULL, 0, ncclInt8, NULL, NULL, NULL);
  CALL(ncclGatherConfig, NULL, NULL, 0, ncclInt8, 0, NULL, NULL, NULL);
  CALL(ncclScatterConfig, NULL, NULL, 0, ncclInt8, 0, NULL, NULL, NULL);
  CALL(ncclSetEncryption, NULL);
  ncclParamHandle_t h = NULL;
  const char* s = NULL;
  const char** table = NULL;
  int len = 0;
  CALL(ncclParamBind, &h, "NCCL_DEBUG");
  int8_t i8;
  int16_t i16;
  int32_t i32;
  int64_t i64;
  uint8_t u8;
  uint16_t u16;
  uint32_t u32;
  CALL(ncclParamGetI8, h, &i8);
  CALL(ncclParamGetI16, h, &i16);
  CALL(ncclParamGetI32, h, &i32);
  CALL(ncclParamGetI64, h, &i64);
  CALL(ncclParamGetU8, h, &u8);
  CALL(ncclParamGetU16, h, &u16);
  CALL(ncclParamGetU32, h, &u32);
  CALL(ncclParamGetU64, h, &u64);
  CALL(ncclParamGetStr, h, &s);
  CALL(ncclParamGet, h, out1, (int)sizeof(out1), &len);
  CALL(ncclParamGetParameter, "NCCL_DEBUG", &s, &len);
  CALL(ncclParamGetAllParameterKeys, &table, &len);
  ncclParamDumpAll();
  judge("ncclParamDumpAll", ncclInvalidUsage);
  CALL(ncclCommQueryProperties, NULL, NULL);
  ncclCftLeId le;
  size_t off;
  ncclTeam_t team = {1, 0, 1};
  ncclMultimemHandle_t mm = {NULL};
  CALL(ncclGetLsaMultimemDevicePointer, NULL, 0, &p);
  CALL(ncclGetMultimemDevicePointer, NULL, 0, mm, &p);
  CALL(ncclGetLsaDevicePointer, NULL, 0, 0, &p);
  CALL(ncclGetPeerDevicePointer, NULL, 0, 0, &p);
  CALL(ncclGetMultimemDeviceLeInfo, NULL, 0, &le, &off);
  CALL(ncclGetCftDeviceLeInfo, NULL, 0, 0, team, &le, &off);
  CALL(ncclGetPeerDeviceLeInfo, NULL, 0, 0, &le, &off);
  CALL(ncclGinOutboxCreateRequirement, 1, 10, (ncclGinOutboxHandle_t*)out1,
       (ncclDevResourceRequirements_t*)out2);
  if (forward_mode) {
    const char* real_path = getenv("SHUNT_NCCL_LIB");
    void* real = real_path ? dlopen(real_path, RTLD_NOW | RTLD_NOLOAD) : NULL;
    CHECK_MSG(real != NULL, "the real library should be loaded: %s", real_path ? real_path : "(unset)");
    const char* const bound_only[] = {"ncclTeamCft", "ncclTeamCftMultimem",
                                      "ncclGinInboxA2ACreateRequirement"};
    for (int i = 0; real && i < 3; i++) {
      CHECK_MSG(dlsym(real, bound_only[i]) != NULL, "the real library lacks %s", bound_only[i]);
      calls++;
    }
  } else {
    ncclTeam_t t = ncclTeamCft(NULL, NCCL_CFT_TEAM_FLAT);
    CHECK(t.nRanks == 0);
    judge("ncclTeamCft", ncclInvalidUsage);
    t = ncclTeamCftMultimem(NULL);
    CHECK(t.nRanks == 0);
    judge("ncclTeamCftMultimem", ncclInvalidUsage);
    CALL(ncclGinInboxA2ACreateRequirement, team, 1, 10, (ncclGinInboxA2AHandle_t*)out1,
         (ncclDevResourceRequirements_t*)out2);
  }
  /* 44 functions are new since 2.28 (NCCL 2.32.3's exports against 2.28.9's). */
  CHECK_EQ_INT(calls, 44);
  CHECK_DONE();
}
