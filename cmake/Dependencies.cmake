# NCCL headers: the ones shipped with the CUDA toolkit unless NCCL_INCLUDE_DIR is given.
find_package(CUDAToolkit QUIET)
set(_nccl_hints ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include /usr/include /usr/local/include)
# Last resort (a machine without the toolkit): the PyPI wheels scripts/setup.sh unpacks.
set(_deps ${CMAKE_SOURCE_DIR}/.deps)
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${_nccl_hints} PATHS ${_deps}/nccl-2.32.3/nvidia/nccl/include
          DOC "folder holding nccl.h")
if(NOT NCCL_INCLUDE_DIR)
  message(FATAL_ERROR "nccl.h not found: run scripts/setup.sh, install the CUDA toolkit's NCCL or pass -DNCCL_INCLUDE_DIR=")
endif()
# nccl.h includes cuda_runtime.h; when NCCL's headers live apart from the toolkit's (a
# distribution package in /usr/include, say), the toolkit's folder is needed too.
if(NOT EXISTS ${NCCL_INCLUDE_DIR}/cuda_runtime.h)
  find_path(SHUNT_CUDART_INCLUDE_DIR cuda_runtime.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include
            PATHS ${_deps}/cuda-headers/nvidia/cu13/include)
  if(NOT SHUNT_CUDART_INCLUDE_DIR)
    message(FATAL_ERROR "cuda_runtime.h (needed by nccl.h) not found: run scripts/setup.sh or install the CUDA toolkit")
  endif()
  include_directories(SYSTEM ${SHUNT_CUDART_INCLUDE_DIR})
  # The wheels' headers keep libcu++ (nv/target) in a folder of its own.
  if(EXISTS ${SHUNT_CUDART_INCLUDE_DIR}/cccl)
    include_directories(SYSTEM ${SHUNT_CUDART_INCLUDE_DIR}/cccl)
  endif()
endif()
file(STRINGS ${NCCL_INCLUDE_DIR}/nccl.h _nccl_ver REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) ")
message(STATUS "NCCL headers: ${NCCL_INCLUDE_DIR}/nccl.h (${_nccl_ver})")

# The real libnccl.so.2 used by tests that compare against it; the library itself finds it at run time.
get_filename_component(_nccl_root ${NCCL_INCLUDE_DIR} DIRECTORY)
find_library(NCCL_REAL_LIBRARY NAMES libnccl.so.2 nccl
  HINTS ${CUDAToolkit_LIBRARY_DIR} ${_nccl_root}/lib ${_nccl_root}/lib64 /usr/local/cuda/lib64 /usr/local/cuda/lib
  DOC "real libnccl.so.2 for tests")
message(STATUS "real NCCL for tests: ${NCCL_REAL_LIBRARY}")

find_path(CJSON_INCLUDE_DIR cjson/cJSON.h)
find_library(CJSON_LIBRARY cjson)
if(NOT CJSON_INCLUDE_DIR OR NOT CJSON_LIBRARY)
  message(FATAL_ERROR "cJSON not found: apt-get install libcjson-dev")
endif()

find_path(IBVERBS_INCLUDE_DIR infiniband/verbs.h)
find_library(IBVERBS_LIBRARY ibverbs)

set(THREADS_PREFER_PTHREAD_FLAG ON)
find_package(Threads REQUIRED)
set(SHUNT_SYSTEM_LIBS ${CMAKE_DL_LIBS} Threads::Threads m)

# GPU code is optional: without nvcc the host parts still build.
set(SHUNT_HAVE_CUDA OFF)
if(SHUNT_ENABLE_CUDA)
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 80 90)
      if(CUDAToolkit_VERSION VERSION_GREATER_EQUAL 12.8)
        list(APPEND CMAKE_CUDA_ARCHITECTURES 100)
      endif()
    endif()
    enable_language(CUDA)
    set(SHUNT_HAVE_CUDA ON)
  endif()
endif()
message(STATUS "GPU code: ${SHUNT_HAVE_CUDA}")
