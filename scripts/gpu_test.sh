#!/usr/bin/env bash
# GPU test suite of the CUDA backend, in two steps so the slow compile happens off the GPU:
#
#   scripts/gpu_test.sh bundle BUILD_DIR BUNDLE_DIR   (build machine) copy the CUDA op tests,
#       voltinfer and the non-system shared libraries they need (fmt, spdlog, ICU, PCRE2, ...;
#       not cuBLAS, which the GPU machine's toolkit provides) into BUNDLE_DIR.
#   scripts/gpu_test.sh run BUNDLE_DIR [LOG_DIR]       (GPU machine, repository root) run every
#       CUDA op test (both kernel profiles, f32 and f16 activations: built into the tests) and,
#       when the bundle has voltinfer, the golden models (tests/golden, HF forms) on the GPU in
#       both profiles; full logs to LOG_DIR (default $OUT or /tmp/gpu_test), a summary last.
#
# Golden tolerance on the GPU: max |Δlogit| / row max <= 3e-2 (f16 activations and KV cache,
# fp32 accumulation; the CPU runs the same fixtures at 1e-3).
set -uo pipefail

GOLDEN_TOL=${GOLDEN_TOL:-3e-2}

bundle() {
  local build=$1 dst=$2
  mkdir -p "$dst/bin" "$dst/lib"
  cp "$build"/tests/cuda_test_* "$dst/bin/" 2>/dev/null
  rm -f "$dst"/bin/*.cmake
  [ -x "$build/voltinfer" ] && cp "$build/voltinfer" "$dst/bin/"
  # Shared libraries outside glibc/libstdc++ and the CUDA toolkit travel with the binaries.
  for b in "$dst"/bin/*; do
    ldd "$b" | awk '/=> \// {print $3}'
  done | sort -u | grep -Ev '/(libc|libm|libdl|librt|libpthread|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so|/libcu' |
    while read -r lib; do cp -L "$lib" "$dst/lib/"; done
  du -sh "$dst"
}

run() {
  local b=$1 log=${2:-${OUT:-/tmp/gpu_test}}
  mkdir -p "$log"
  local cublas_dir
  cublas_dir=$(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null)
  export LD_LIBRARY_PATH="$b/lib:/usr/local/cuda/lib64:${cublas_dir}:${LD_LIBRARY_PATH:-}"
  {
    date -u +"date: %Y-%m-%d %H:%M UTC"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | sed 's/^/gpu: /'
    nvcc --version 2>/dev/null | grep release | sed 's/^/toolkit there: /'
  } | tee "$log/summary.txt"
  local fails=0
  for t in "$b"/bin/cuda_test_*; do
    local name
    name=$(basename "$t")
    # Line-buffered and time-limited, so a crash or a hang still leaves the log up to there.
    timeout "${SUITE_TIMEOUT:-150}" stdbuf -oL -eL "$t" > "$log/$name.log" 2>&1
    local rc=$?
    local passed failed skipped
    passed=$(grep -oE '\[  PASSED  \] [0-9]+' "$log/$name.log" | grep -oE '[0-9]+$' || echo 0)
    failed=$(grep -oE '\[  FAILED  \] [0-9]+ test' "$log/$name.log" | grep -oE '[0-9]+' || echo 0)
    skipped=$(grep -oE '\[  SKIPPED \] [0-9]+' "$log/$name.log" | grep -oE '[0-9]+$' || echo 0)
    echo "$name: rc=$rc passed=${passed:-0} failed=${failed:-0} skipped=${skipped:-0}" | tee -a "$log/summary.txt"
    [ "$rc" -ne 0 ] && { fails=$((fails + 1)); grep -E 'Failure|error|FAILED' "$log/$name.log" | head -20; }
  done
  if [ -x "$b/bin/voltinfer" ]; then
    for prof in native volta; do
      PYTHONUNBUFFERED=1 python3 tests/golden/run_golden.py --voltinfer "$b/bin/voltinfer" --formats hf \
        --tol "$GOLDEN_TOL" --extra-args "--device cuda --kernel-profile $prof" > "$log/golden_$prof.log" 2>&1
      local rc=$?
      echo "golden ($prof, tol $GOLDEN_TOL): rc=$rc $(grep -E 'passed, .* failed' "$log/golden_$prof.log")" |
        tee -a "$log/summary.txt"
      [ "$rc" -ne 0 ] && { fails=$((fails + 1)); grep -E 'FAIL' "$log/golden_$prof.log" | head -10; }
    done
  fi
  echo "suites failing: $fails" | tee -a "$log/summary.txt"
  return $((fails > 0))
}

case "${1:-}" in
  bundle) bundle "$2" "$3" ;;
  run) run "$2" "${3:-}" ;;
  *) sed -n '2,14p' "$0"; exit 2 ;;
esac
