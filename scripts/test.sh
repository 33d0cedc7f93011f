#!/usr/bin/env bash
# Runs every test that needs no GPU: the C++ unit tests (ctest), a short fuzz run of each
# file reader, compiles of the CUDA backend (CUDA 13 when nvcc is present; CUDA 11.8 for sm_70
# when Debian's toolkit is installed), and the end-to-end
# tests that drive the real binary (pytest). GPU tests: scripts/gpu_test.sh on a GPU machine.
# Usage: scripts/test.sh            (after scripts/setup.sh --test)
#        FUZZ_SECONDS=0 scripts/test.sh   to skip fuzzing
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C build -j"$jobs"

echo "== unit tests (ctest)"
ctest --test-dir build --output-on-failure -j"$jobs"

fuzz_seconds=${FUZZ_SECONDS:-20}
if [ "$fuzz_seconds" -gt 0 ] && [ -x scripts/fuzz.sh ]; then
  echo "== fuzzing each reader for ${fuzz_seconds}s"
  scripts/fuzz.sh "$fuzz_seconds"
fi

echo "== CUDA backend: compile only (no GPU here; the op tests skip without one)"
scripts/build_cuda.sh build-cuda
echo "== CUDA backend, CUDA 11.8 for sm_70 (V100): compile only (skipped where it is not installed)"
scripts/build_cuda118.sh build-cuda118

echo "== end-to-end tests (pytest, real binary)"
python3 -m pytest -q tests/e2e
