/* C declarations of the types that NCCL's device-API host functions take.
 *
 * NCCL declares these functions only in C++ headers (nccl_device/ headers). The handles are
 * opaque structs passed by pointer; ncclTeam_t is passed and returned by value, so its
 * layout ({int nRanks, rank, stride}, 12 bytes) must match NCCL's exactly. */
#ifndef SHUNT_FALLBACK_NCCL_DEVICE_ABI_H
#define SHUNT_FALLBACK_NCCL_DEVICE_ABI_H

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

_Static_assert(sizeof(ncclTeam_t) == 12, "ncclTeam_t must be 12 bytes");

#define shunt_team_none ((ncclTeam_t){0, 0, 0})

#endif
