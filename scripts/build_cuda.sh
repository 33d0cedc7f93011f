#!/usr/bin/env bash
# Compiles the CUDA backend (no GPU needed): voltinfer with -DVI_CUDA=ON and the CUDA op
# tests, for the CUDA 13 toolkit's architectures (sm_75, sm_80, sm_90). The op tests skip
# at run time where there is no GPU; scripts/gpu_test.sh runs them on one.
#   scripts/build_cuda.sh [BUILD_DIR]     (default build-cuda)
#   CUDA_ARCHS=90 scripts/build_cuda.sh   other architectures (one is quicker to compile)
# The CUDA 11.8 sm_70 build is scripts/build_cuda118.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build-cuda}
if ! command -v nvcc >/dev/null 2>&1; then
  echo "nvcc not found: skipping the CUDA build"
  exit 0
fi
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DVI_CUDA=ON \
  ${CUDA_ARCHS:+-DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCHS"} >/dev/null
targets=$(ninja -C "$dir" -t targets all | sed -n 's/^\(tests\/cuda_test_[a-z0-9_]*\): .*/\1/p' | sort -u)
ninja -C "$dir" -j"$(nproc)" voltinfer $targets
echo "CUDA build OK: $dir/voltinfer ($(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/CUDA \1/p'))"
