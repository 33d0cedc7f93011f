# The CUDA backend (VI_CUDA=ON): target vi_cuda, an OBJECT library like vi_cpu, so that
# every kernel's static registration is linked. Included from the top-level CMakeLists.txt.
#
# Toolkits: CUDA 13 builds sm_75 and newer; CUDA 11.8 (Debian's nvidia-cuda-toolkit) is
# the one that still targets sm_70 (V100). The same sources build with both, which is why
# CUDA sources are C++17 (nvcc 11.8 knows no C++20) and include no C++20-only headers.
#   CUDA 13:   cmake -DVI_CUDA=ON                      (default archs 75;80;90)
#   CUDA 11.8: scripts/build_cuda118.sh, which runs
#              PATH=/usr/lib/nvidia-cuda-toolkit/bin:/usr/bin:$PATH cmake -DVI_CUDA=ON \
#                -DCMAKE_CUDA_COMPILER=/usr/bin/nvcc -DCMAKE_CUDA_HOST_COMPILER=g++-11 \
#                -DCMAKE_CUDA_ARCHITECTURES=70 -DVI_CUBLAS=OFF
#              (default archs 70;75;80;90; 70 alone embeds sm_70 code and compute_70 PTX,
#              which the driver JIT-compiles on newer GPUs)

# cuBLAS runs the prefill GEMM of the native profile. Without it (OFF) our WMMA kernel
# (gemm_wmma.cu) runs it in every profile, and the binary needs no libcublas at run time:
# the CUDA 11.8 build is made that way, so that it runs where only a newer toolkit's
# libraries are installed (libcublas.so.11 is several hundred MB).
option(VI_CUBLAS "Use cuBLAS for the native profile's prefill GEMM" ON)

# The toolkit's release, from nvcc itself (enable_language has not run yet).
set(vi_nvcc "${CMAKE_CUDA_COMPILER}")
if(NOT vi_nvcc)
  find_program(vi_nvcc_on_path nvcc)  # another name: a normal variable would hide the cached result
  set(vi_nvcc "${vi_nvcc_on_path}")
  # CMake's own search prefers /usr/bin, where Debian's CUDA 11.8 nvcc lives, over the first
  # nvcc on PATH: pin the one checked here, so a machine with both toolkits builds with the
  # PATH's (CUDA 13) unless told otherwise.
  if(vi_nvcc)
    set(CMAKE_CUDA_COMPILER "${vi_nvcc}")
  endif()
endif()
set(vi_cuda_release "13.0")
if(vi_nvcc)
  execute_process(COMMAND ${vi_nvcc} --version OUTPUT_VARIABLE vi_nvcc_out ERROR_QUIET)
  string(REGEX MATCH "release ([0-9]+\\.[0-9]+)" _ "${vi_nvcc_out}")
  if(CMAKE_MATCH_1)
    set(vi_cuda_release ${CMAKE_MATCH_1})
  endif()
  # nvcc finds ptxas through its profile's PATH, which ends with the caller's PATH. Debian's
  # ptxas lives in /usr/bin, so a second toolkit earlier on PATH (/usr/local/cuda/bin) gets
  # called instead, and fails much later with "sm_70 is not defined". Check it here.
  execute_process(COMMAND ${vi_nvcc} --dryrun -c -x cu /dev/null -o /dev/null
                  ERROR_VARIABLE vi_dry OUTPUT_QUIET RESULT_VARIABLE _)
  string(REGEX MATCH "#\\$ PATH=([^\n]*)" _ "${vi_dry}")
  string(REPLACE ":" ";" vi_nvcc_path "${CMAKE_MATCH_1}")
  find_program(vi_ptxas ptxas PATHS ${vi_nvcc_path} NO_DEFAULT_PATH NO_CACHE)
  if(vi_ptxas)
    execute_process(COMMAND ${vi_ptxas} --version OUTPUT_VARIABLE vi_ptxas_out ERROR_QUIET)
    string(REGEX MATCH "release ([0-9]+\\.[0-9]+)" _ "${vi_ptxas_out}")
    if(CMAKE_MATCH_1 AND NOT CMAKE_MATCH_1 VERSION_EQUAL vi_cuda_release)
      message(FATAL_ERROR "nvcc ${vi_nvcc} is CUDA ${vi_cuda_release} but would run ptxas ${vi_ptxas} "
                          "(CUDA ${CMAKE_MATCH_1}) from PATH. Put the toolkit's own ptxas first, e.g. for "
                          "Debian's CUDA 11.8: PATH=/usr/lib/nvidia-cuda-toolkit/bin:/usr/bin:$PATH "
                          "(scripts/build_cuda118.sh does this), for cmake and for every ninja run.")
    endif()
  endif()
endif()
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  if(vi_cuda_release VERSION_LESS 13.0)
    set(CMAKE_CUDA_ARCHITECTURES 70 75 80 90)
  else()
    set(CMAKE_CUDA_ARCHITECTURES 75 80 90)
  endif()
endif()
message(STATUS "voltinfer: CUDA ${vi_cuda_release} (${CMAKE_CUDA_COMPILER}), architectures ${CMAKE_CUDA_ARCHITECTURES}, cuBLAS ${VI_CUBLAS}")

enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)

set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
# The C++ flags (-Wall, -march=native) are for the host compiler only.
set(vi_cuda_flags -Xcompiler=-Wall,-Wno-unused-parameter --expt-relaxed-constexpr)

file(GLOB vi_cuda_srcs CONFIGURE_DEPENDS
     ${CMAKE_CURRENT_SOURCE_DIR}/src/backends/cuda/*.cu
     ${CMAKE_CURRENT_SOURCE_DIR}/src/backends/cuda/*.cpp)
add_library(vi_cuda OBJECT ${vi_cuda_srcs})
target_include_directories(vi_cuda PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/src)
# The directory's options (-Wall, -march=native, ...) are host-compiler flags nvcc rejects:
# keep them for C++ sources only.
get_target_property(vi_dir_opts vi_cuda COMPILE_OPTIONS)
set(vi_cxx_opts)
if(vi_dir_opts)
  foreach(o ${vi_dir_opts})
    list(APPEND vi_cxx_opts "$<$<COMPILE_LANGUAGE:CXX>:${o}>")
  endforeach()
endif()
set_target_properties(vi_cuda PROPERTIES COMPILE_OPTIONS "${vi_cxx_opts}")
target_compile_options(vi_cuda PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:${vi_cuda_flags}>)

# Debian's toolkit keeps its headers in /usr/include, which the host compiler searches
# after /usr/local/include. Where another toolkit's headers are linked into
# /usr/local/include (some build images do this for CUDA 13), those would be compiled
# against this toolkit's tools. Links to this toolkit's own copies of such headers, in a
# folder of the build tree searched first, keep the two apart.
if(CUDAToolkit_INCLUDE_DIRS STREQUAL "/usr/include" AND EXISTS /usr/local/include/cuda_runtime.h)
  set(vi_shadow ${CMAKE_CURRENT_BINARY_DIR}/cuda-toolkit-include)
  file(REMOVE_RECURSE ${vi_shadow})
  file(MAKE_DIRECTORY ${vi_shadow})
  file(GLOB vi_local_hdrs RELATIVE /usr/local/include /usr/local/include/*)
  foreach(h ${vi_local_hdrs})
    if(EXISTS /usr/include/${h})
      file(CREATE_LINK /usr/include/${h} ${vi_shadow}/${h} SYMBOLIC)
    endif()
  endforeach()
  target_include_directories(vi_cuda BEFORE PUBLIC ${vi_shadow})
  message(STATUS "voltinfer: /usr/local/include holds other CUDA headers; using ${CUDAToolkit_INCLUDE_DIRS}'s first")
endif()

# Static cudart: the binary then needs only the driver (and cuBLAS when VI_CUBLAS) at run time.
target_link_libraries(vi_cuda PUBLIC vi_ops CUDA::cudart_static)
if(VI_CUBLAS)
  target_link_libraries(vi_cuda PUBLIC CUDA::cublas)
  target_compile_definitions(vi_cuda PRIVATE VI_CUBLAS=1)
else()
  target_compile_definitions(vi_cuda PRIVATE VI_CUBLAS=0)
endif()
set_target_properties(vi_cuda PROPERTIES CUDA_RUNTIME_LIBRARY Static POSITION_INDEPENDENT_CODE ON)

# The parallel layer's CUDA part (src/parallel/cuda/: the mailbox communicator's kernels), built
# with vi_cuda's flags. It depends on the parallel layer and the CUDA runtime only, and registers
# itself from a static initialiser, so it is an object library too.
file(GLOB vi_parallel_cuda_srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/src/parallel/cuda/*.cu)
add_library(vi_parallel_cuda OBJECT ${vi_parallel_cuda_srcs})
set_target_properties(vi_parallel_cuda PROPERTIES COMPILE_OPTIONS "${vi_cxx_opts}" CUDA_RUNTIME_LIBRARY Static
                                                  POSITION_INDEPENDENT_CODE ON)
target_compile_options(vi_parallel_cuda PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:${vi_cuda_flags}>)
target_link_libraries(vi_parallel_cuda PUBLIC vi_parallel CUDA::cudart_static)
if(DEFINED vi_shadow)
  target_include_directories(vi_parallel_cuda BEFORE PUBLIC ${vi_shadow})
endif()
