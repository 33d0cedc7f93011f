#!/usr/bin/env bash
# Compiles the CUDA backend the way a V100 owner does: Debian's CUDA 11.8
# (nvidia-cuda-toolkit, scripts/install_cuda118.sh) for sm_70, voltinfer and the CUDA op
# tests. CMAKE_CUDA_ARCHITECTURES=70 embeds sm_70 machine code and compute_70 PTX, which
# the driver JIT-compiles on newer GPUs, so this same binary is also tested on an H200.
# Built without cuBLAS (VI_CUBLAS=OFF): it then runs where only another toolkit's
# libraries are installed; the WMMA GEMM serves prefill in both kernel profiles.
#   scripts/build_cuda118.sh [BUILD_DIR]     (default build-cuda118)
# Skips (exit 0) when the toolkit is not installed; any compile error fails.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build-cuda118}
bin=/usr/lib/nvidia-cuda-toolkit/bin  # nvcc, its profile and host-compiler wrappers
nvcc=/usr/bin/nvcc                     # Debian's wrapper: CMake finds the toolkit under /usr from it
if [ ! -x "$bin/nvcc" ] || [[ "$("$nvcc" --version 2>/dev/null)" != *"release 11.8"* ]]; then
  echo "CUDA 11.8 (Debian nvidia-cuda-toolkit) not installed: skipping the sm_70 build" \
       "(scripts/install_cuda118.sh installs it)"
  exit 0
fi
host=g++-11  # the newest host compiler nvcc 11.8 accepts
if ! command -v "$host" >/dev/null 2>&1; then
  echo "$host not found: nvcc 11.8 needs gcc <= 11 as its host compiler (apt-get install g++-11)" >&2
  exit 1
fi
# nvcc finds ptxas, fatbinary and cudafe++ on PATH; Debian's are in /usr/bin, which must come
# before another toolkit's bin folder (cmake/cuda.cmake refuses a mismatched ptxas).
export PATH="$bin:/usr/bin:$PATH"
start=$(date +%s)
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DVI_CUDA=ON -DVI_CUBLAS=OFF \
  -DCMAKE_CUDA_COMPILER="$nvcc" -DCMAKE_CUDA_HOST_COMPILER="$host" -DCMAKE_CUDA_ARCHITECTURES=70 >/dev/null
targets=$(ninja -C "$dir" -t targets all | sed -n 's/^\(tests\/cuda_test_[a-z0-9_]*\): .*/\1/p' | sort -u)
ninja -C "$dir" -j"$(nproc)" voltinfer $targets

# What the V100 owner's binary must be: sm_70 code plus compute_70 PTX, and no cuBLAS.
arch=$(cuobjdump --list-elf --list-ptx "$dir/voltinfer" 2>/dev/null | sed -n 's/.*\.\(sm_[0-9]*\)\..*/\1/p' | sort -u | tr '\n' ' ')
if [ "$arch" != "sm_70 " ]; then
  echo "expected only sm_70 code and compute_70 PTX in $dir/voltinfer, found: ${arch:-none}" >&2
  exit 1
fi
if [[ "$(cuobjdump --list-ptx "$dir/voltinfer")" != *sm_70* ]]; then
  echo "$dir/voltinfer has no compute_70 PTX: newer GPUs could not JIT it" >&2
  exit 1
fi
if [[ "$(ldd "$dir/voltinfer")" == *libcublas* ]]; then
  echo "$dir/voltinfer links cuBLAS; the CUDA 11.8 build must not" >&2
  exit 1
fi
echo "CUDA 11.8 sm_70 build OK: $dir/voltinfer (sm_70 + compute_70 PTX, no cuBLAS; $(($(date +%s) - start)) s)"
