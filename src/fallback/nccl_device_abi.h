/* C declarations of the types that NCCL's device-API host functions take.
 *
 * NCCL declares these functions only in C++ headers (nccl_device/ headers). The handles are
 * opaque structs passed by pointer; ncclTeam_t is passed and returned by value, so its
 * layout ({int nRanks, rank, stride}, 12 bytes) must match NCCL's exactly. */
#ifndef SHUNT_FALLBACK_NCCL_DEVICE_ABI_H
#define SHUNT_FALLBACK_NCCL_DEVICE_ABI_H

#include <stdint.h>

struct ncclTeam {
  int nRanks, rank, stride;
};
typedef struct ncclTeam ncclTeam_t;
typedef struct ncclDevComm ncclDevComm_t;
typedef struct ncclDevCommRequirements ncclDevCommRequirements_t;
typedef struct ncclDevResourceRequirements ncclDevResourceRequirements_t;
typedef struct ncclLsaBarrierHandle ncclLsaBarrierHandle_t;
typedef struct ncclGinBarrierHandle ncclGinBarrierHandle_t;
typedef struct ncclLLA2AHandle ncclLLA2AHandle_t;

typedef struct ncclCommProperties ncclCommProperties_t;
typedef struct ncclGinOutboxHandle ncclGinOutboxHandle_t;
typedef struct ncclGinInboxA2AHandle ncclGinInboxA2AHandle_t;
/* Passed by value: one pointer, as NCCL 2.32 lays it out. */
struct ncclMultimemHandle {
  void* mcBasePtr;
};
typedef struct ncclMultimemHandle ncclMultimemHandle_t;
typedef uint32_t ncclCftLeId;
typedef enum { NCCL_CFT_TEAM_FLAT, NCCL_CFT_TEAM_HIER_MULTIMEM, NCCL_CFT_TEAM_HIER_LSA } ncclCftTeamMode_t;

_Static_assert(sizeof(ncclTeam_t) == 12, "ncclTeam_t must be 12 bytes");
_Static_assert(sizeof(ncclMultimemHandle_t) == sizeof(void*), "ncclMultimemHandle_t must be one pointer");
_Static_assert(sizeof(ncclCftTeamMode_t) == sizeof(int), "ncclCftTeamMode_t is passed as an int");

#define shunt_team_none ((ncclTeam_t){0, 0, 0})

#endif
