# The GPU kernels' fat binary (gpu_kernel.cu), made by nvcc when it is found and carried inside
# libshunt by gpu_image.c. Without nvcc, gpu_image.c carries a placeholder instead.
string(REPLACE ";" "$<SEMICOLON>" _nvcc_warn "${SHUNT_NVCC_WARN_FLAGS}")
set(SHUNT_GPU_COMPILE_OPTIONS
    $<$<COMPILE_LANGUAGE:C>:-Wall$<SEMICOLON>-Wextra$<$<BOOL:${SHUNT_WERROR}>:$<SEMICOLON>-Werror>>
    $<$<COMPILE_LANGUAGE:CUDA>:${_nvcc_warn}>
    CACHE INTERNAL "")
if(SHUNT_HAVE_CUDA)
  set(_fatbin ${CMAKE_CURRENT_BINARY_DIR}/shunt_gpu_kernels.fatbin)
  set(_gencode "")
  set(_last "")
  foreach(a ${CMAKE_CUDA_ARCHITECTURES})
    string(REGEX REPLACE "-(real|virtual)$" "" a ${a})
    list(APPEND _gencode -gencode=arch=compute_${a},code=sm_${a})
    set(_last ${a})
  endforeach()
  # PTX of the newest architecture too, so a newer GPU compiles it at load time.
  list(APPEND _gencode -gencode=arch=compute_${_last},code=compute_${_last})
  file(GLOB _kernel_deps ${CMAKE_SOURCE_DIR}/src/exec/*.h ${CMAKE_SOURCE_DIR}/src/exec/gpu/*.h
       ${CMAKE_SOURCE_DIR}/src/exec/gpu/*.cuh ${CMAKE_SOURCE_DIR}/src/exec/ops/*.h
       ${CMAKE_SOURCE_DIR}/src/transport/*.h ${CMAKE_SOURCE_DIR}/src/plan/*.h ${CMAKE_SOURCE_DIR}/src/util/vocab.h)
  add_custom_command(
    OUTPUT ${_fatbin}
    COMMAND ${CMAKE_CUDA_COMPILER} --fatbin -std=c++17 -O3 ${_gencode} ${SHUNT_NVCC_WARN_FLAGS}
            -DNCCL_OS_LINUX -D_GNU_SOURCE -I${CMAKE_SOURCE_DIR}/src -I${CMAKE_SOURCE_DIR}/include
            -I${NCCL_INCLUDE_DIR} -o ${_fatbin} ${CMAKE_CURRENT_SOURCE_DIR}/gpu/gpu_kernel.cu
    DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/gpu/gpu_kernel.cu ${_kernel_deps}
    COMMENT "Building the GPU kernels' fat binary"
    VERBATIM)
  add_custom_target(shunt_gpu_fatbin DEPENDS ${_fatbin})
  add_dependencies(shunt_exec shunt_gpu_fatbin)
  set_source_files_properties(gpu/gpu_image.c PROPERTIES COMPILE_DEFINITIONS SHUNT_GPU_FATBIN="${_fatbin}"
                              OBJECT_DEPENDS ${_fatbin})
endif()
