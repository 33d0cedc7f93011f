# The CUDA backend (VI_CUDA=ON): target vi_cuda, an OBJECT library like vi_cpu, so that
# every kernel's static registration is linked. Included from the top-level CMakeLists.txt.
#
# Toolkits: CUDA 13 builds sm_75 and newer; CUDA 11.8 (Debian's nvidia-cuda-toolkit) is
# the one that still targets sm_70 (V100). The same sources build with both, which is why
# CUDA sources are C++17 (nvcc 11.8 knows no C++20) and include no C++20-only headers.
#   CUDA 13:   cmake -DVI_CUDA=ON                      (default archs 75;80;90)
#   CUDA 11.8: PATH=/usr/lib/nvidia-cuda-toolkit/bin:$PATH cmake -DVI_CUDA=ON \
#                -DCMAKE_CUDA_COMPILER=/usr/bin/nvcc -DCMAKE_CUDA_HOST_COMPILER=g++-11
#              (default archs 70;75;80;90; -DCMAKE_CUDA_ARCHITECTURES=70 for a compute_70 PTX
#              build that also runs, JIT-compiled, on newer GPUs)

if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  # The default depends on the toolkit, which enable_language has not found yet: ask nvcc.
  set(vi_nvcc "${CMAKE_CUDA_COMPILER}")
  if(NOT vi_nvcc)
    find_program(vi_nvcc nvcc)
  endif()
  set(vi_cuda_release "13.0")
  if(vi_nvcc)
    execute_process(COMMAND ${vi_nvcc} --version OUTPUT_VARIABLE vi_nvcc_out ERROR_QUIET)
    string(REGEX MATCH "release ([0-9]+\\.[0-9]+)" _ "${vi_nvcc_out}")
    if(CMAKE_MATCH_1)
      set(vi_cuda_release ${CMAKE_MATCH_1})
    endif()
  endif()
  if(vi_cuda_release VERSION_LESS 13.0)
    set(CMAKE_CUDA_ARCHITECTURES 70 75 80 90)
  else()
    set(CMAKE_CUDA_ARCHITECTURES 75 80 90)
  endif()
  message(STATUS "voltinfer: CUDA ${vi_cuda_release}, architectures ${CMAKE_CUDA_ARCHITECTURES}")
endif()

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
# Static cudart: the binary then needs only the driver and cuBLAS at run time.
target_link_libraries(vi_cuda PUBLIC vi_ops CUDA::cudart_static CUDA::cublas)
set_target_properties(vi_cuda PROPERTIES CUDA_RUNTIME_LIBRARY Static POSITION_INDEPENDENT_CODE ON)
