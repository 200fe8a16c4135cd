/* The kernels' CUDA build (gpu_kernel.cuh): nvcc compiles this file alone into a fat binary
 * that libshunt carries (gpu_image.c) and loads through the driver (gpu_kernels.c). The
 * kernels have C names, so the driver finds them by those. */
#include "exec/gpu/gpu_kernel.cuh"
