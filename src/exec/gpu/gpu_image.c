/* The kernels' fat binary inside libshunt (gpu_kernels.h). nvcc builds it from gpu_kernel.cu
 * at build time (src/exec/gpu/CMakeLists.txt) and the assembler copies it in whole; a build
 * without nvcc carries a placeholder instead, which the driver refuses as an image. */
#include <stddef.h>

#include "exec/gpu/gpu_kernels.h"

#ifdef SHUNT_GPU_FATBIN
/* The driver wants the image 8-byte aligned; hidden, so it is not part of libnccl's ABI. */
__asm__(".section .rodata\n"
        ".balign 16\n"
        ".hidden shunt_gpu_fatbin_start\n"
        ".hidden shunt_gpu_fatbin_end\n"
        "shunt_gpu_fatbin_start:\n"
        ".incbin \"" SHUNT_GPU_FATBIN "\"\n"
        "shunt_gpu_fatbin_end:\n"
        ".previous\n");
extern const char shunt_gpu_fatbin_start[];
extern const char shunt_gpu_fatbin_end[];

const void* shunt_gpu_image(size_t* bytes, int* built) {
  *bytes = (size_t)(shunt_gpu_fatbin_end - shunt_gpu_fatbin_start);
  *built = 1;
  return shunt_gpu_fatbin_start;
}
#else
static const char placeholder[] = "shunt: built without nvcc, no GPU kernels";

const void* shunt_gpu_image(size_t* bytes, int* built) {
  *bytes = sizeof(placeholder);
  *built = 0;
  return placeholder;
}
#endif
