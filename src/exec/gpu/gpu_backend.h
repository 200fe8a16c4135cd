/* The GPU backend's world as its own files see it (exec/backend.h is the public face). */
#ifndef SHUNT_EXEC_GPU_BACKEND_H
#define SHUNT_EXEC_GPU_BACKEND_H

#include "exec/backend.h"
#include "exec/gpu/gpu_world.h"

/* The backend's world (NULL before its first prepare or after a failure). */
struct shunt_gpu_world* shunt_gpu_backend_world(struct shunt_backend* b);

#endif
