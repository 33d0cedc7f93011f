#!/usr/bin/env bash
# GPU test suite of the CUDA backend, in two steps so the slow compile happens off the GPU:
#
#   scripts/gpu_test.sh bundle BUILD_DIR BUNDLE_DIR [NAME]   (build machine) copy the CUDA op
#       tests (TESTS="a b": only cuda_test_a and cuda_test_b; the parallel_cuda_test_* suites
#       always) and voltinfer of BUILD_DIR,
#       stripped, into BUNDLE_DIR/NAME (default: the build
#       folder's name), and what the build is (toolkit, architectures, cuBLAS) into
#       NAME/build.txt. The non-system shared libraries they need (fmt, spdlog, ICU, PCRE2,
#       ...; not cuBLAS, which the GPU machine's toolkit provides) go to BUNDLE_DIR/lib, shared
#       by all builds of the bundle. Bundle the CUDA 13 build and the CUDA 11.8 sm_70 build
#       (scripts/build_cuda118.sh) into one folder to test both in one run.
#   scripts/gpu_test.sh pack BUNDLE_DIR                 (build machine) BUNDLE_DIR.tar.xz: every
#       test binary holds all kernels, so the builds' files shrink about tenfold together.
#   scripts/gpu_test.sh run BUNDLE_DIR|BUNDLE.tar.xz [LOG_DIR]   (GPU machine, repository root) for each
#       build in the bundle: every CUDA op test (both kernel profiles, f32 and f16 activations:
#       built into the tests) and, when the build has voltinfer, the golden models
#       (tests/golden, HF forms) on the GPU: in both profiles, or only in the volta profile
#       for an sm_70-only build (what a V100 owner runs; on a newer GPU the driver JIT-compiles
#       its compute_70 PTX), and for builds with native kernels tests/e2e/test_speculative.py
#       with VOLTINFER_GPU=1 (needs pytest). Full logs to LOG_DIR (default $OUT or /tmp/gpu_test),
#       a summary last.
#
# Golden tolerance on the GPU: max |Δlogit| / row max <= 3e-2 (f16 activations and KV cache,
# fp32 accumulation; the CPU runs the same fixtures at 1e-3).
set -uo pipefail

GOLDEN_TOL=${GOLDEN_TOL:-3e-2}

bundle() {
  local build=$1 root=$2 name=${3:-$(basename "$1")}
  local dst=$root/$name
  mkdir -p "$dst/bin" "$root/lib"
  if [ -n "${TESTS:-}" ]; then  # only these suites (names without cuda_test_), for a smaller bundle
    for t in $TESTS; do cp "$build/tests/cuda_test_$t" "$dst/bin/" || return 1; done
  else
    cp "$build"/tests/cuda_test_* "$dst/bin/" 2>/dev/null
  fi
  # The parallel layer's GPU suites (the mailbox communicator) are small: always along.
  cp "$build"/tests/parallel_cuda_test_* "$dst/bin/" 2>/dev/null
  rm -f "$dst"/bin/*.cmake
  [ -x "$build/voltinfer" ] && cp "$build/voltinfer" "$dst/bin/"
  strip --strip-unneeded "$dst"/bin/*
  # What the build is, from its cache: the run step reads the profiles line.
  local cache=$build/CMakeCache.txt archs nvcc cublas
  archs=$(sed -n 's/^CMAKE_CUDA_ARCHITECTURES:[A-Z]*=//p' "$cache")
  nvcc=$(sed -n 's/^CMAKE_CUDA_COMPILER:[A-Z]*=//p' "$cache")
  nvcc=${nvcc:-nvcc}  # configured without an explicit compiler: the one on PATH
  cublas=$(sed -n 's/^VI_CUBLAS:BOOL=//p' "$cache")
  {
    echo "toolkit: $("$nvcc" --version | sed -n 's/.*release \([0-9.]*\), \(V[0-9.]*\).*/CUDA \1 (\2)/p')"
    echo "architectures: ${archs:-toolkit default}"
    echo "cuBLAS: ${cublas:-ON}"
    if [ "$archs" = 70 ]; then echo "profiles: volta"; else echo "profiles: native volta"; fi
  } > "$dst/build.txt"
  # Shared libraries outside glibc/libstdc++ and the CUDA toolkit travel with the binaries.
  for b in "$dst"/bin/*; do
    ldd "$b" | awk '/=> \// {print $3}'
  done | sort -u | grep -Ev '/(libc|libm|libdl|librt|libpthread|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so|/libcu' |
    while read -r lib; do cp -L "$lib" "$root/lib/"; done
  strip --strip-unneeded "$root"/lib/*
  du -sh "$root"
}

# Runs one build's suites ($1: its folder, with bin/ and build.txt); returns the failures.
run_build() {
  local b=$1 log=$2 name
  name=$(basename "$b")
  local profiles="native volta"
  if [ -f "$b/build.txt" ]; then
    sed 's/^/  /' "$b/build.txt" | grep -v profiles | { echo "build $name:"; cat; } | tee -a "$log/summary.txt"
    profiles=$(sed -n 's/^profiles: //p' "$b/build.txt")
  fi
  local fails=0 first=1
  for t in "$b"/bin/cuda_test_* "$b"/bin/parallel_cuda_test_*; do
    [ -e "$t" ] || continue
    local tname
    tname=$(basename "$t")
    # The first suite of a build also pays for the driver's JIT compile of PTX where the
    # build has no code for this GPU (cached on disk for the later ones).
    # 480 s: cuda_test_attention_decode alone runs ~380 s on an H200 (43 of its tests took 240 s).
    local limit=${SUITE_TIMEOUT:-480}
    [ $first = 1 ] && limit=$((limit + ${JIT_TIMEOUT:-300}))
    first=0
    # Line-buffered and time-limited, so a crash or a hang still leaves the log up to there.
    local t0=$SECONDS
    timeout "$limit" stdbuf -oL -eL "$t" > "$log/$name.$tname.log" 2>&1
    local rc=$?
    local passed failed skipped
    passed=$(grep -oE '\[  PASSED  \] [0-9]+' "$log/$name.$tname.log" | grep -oE '[0-9]+$' || echo 0)
    # A suite stopped by the limit prints no summary: count the tests that finished.
    [ "$rc" = 124 ] && passed=$(grep -c '^\[       OK \]' "$log/$name.$tname.log")
    failed=$(grep -oE '\[  FAILED  \] [0-9]+ test' "$log/$name.$tname.log" | grep -oE '[0-9]+' || echo 0)
    skipped=$(grep -oE '\[  SKIPPED \] [0-9]+' "$log/$name.$tname.log" | grep -oE '[0-9]+$' || echo 0)
    echo "$name $tname: rc=$rc passed=${passed:-0} failed=${failed:-0} skipped=${skipped:-0} ($((SECONDS - t0)) s)" |
      tee -a "$log/summary.txt"
    [ "$rc" -ne 0 ] && { fails=$((fails + 1)); grep -E 'Failure|error|FAILED' "$log/$name.$tname.log" | head -20; }
  done
  if [ -x "$b/bin/voltinfer" ]; then
    for prof in $profiles; do
      PYTHONUNBUFFERED=1 python3 tests/golden/run_golden.py --voltinfer "$b/bin/voltinfer" --formats hf \
        --tol "$GOLDEN_TOL" --extra-args "--device cuda --kernel-profile $prof" > "$log/$name.golden_$prof.log" 2>&1
      local rc=$?
      echo "$name golden ($prof, tol $GOLDEN_TOL): rc=$rc $(grep -E 'passed, .* failed' "$log/$name.golden_$prof.log")" |
        tee -a "$log/summary.txt"
      [ "$rc" -ne 0 ] && { fails=$((fails + 1)); grep -E 'FAIL' "$log/$name.golden_$prof.log" | head -10; }
    done
    # Speculative decoding end to end (tests/e2e/test_speculative.py: the MTP head against a torch
    # reference, --spec output equal to the plain output) on the CPU and in both GPU profiles;
    # builds with native kernels only, and where pytest is installed.
    if [ "$profiles" = "native volta" ] && python3 -c 'import pytest' 2>/dev/null; then
      VOLTINFER_BIN="$b/bin/voltinfer" VOLTINFER_GPU=1 timeout "${SUITE_TIMEOUT:-480}" \
        python3 -m pytest -q -p no:cacheprovider tests/e2e/test_speculative.py > "$log/$name.speculative.log" 2>&1
      local rc=$?
      echo "$name speculative (tests/e2e/test_speculative.py, cpu + cuda): rc=$rc $(tail -n 1 "$log/$name.speculative.log")" |
        tee -a "$log/summary.txt"
      [ "$rc" -ne 0 ] && { fails=$((fails + 1)); grep -E 'FAILED|Error' "$log/$name.speculative.log" | head -10; }
    fi
  fi
  return "$fails"
}

pack() {
  local root=${1%/}
  # One dictionary as large as the bundle: the kernels repeat in every executable, hundreds of MB
  # apart, and xz -9's 64 MiB window misses most of them (2026-11-30: 32.9 MB -> 23.6 MB for two
  # builds; ~4 minutes and ~8 GB of memory here, 768 MB to unpack there).
  tar -C "$(dirname "$root")" -cf - "$(basename "$root")" | xz -9 --lzma2=preset=9,dict=768MiB -T1 > "$root.tar.xz"
  du -sh "$root.tar.xz"
}

run() {
  local root=$1 log=${2:-${OUT:-/tmp/gpu_test}}
  mkdir -p "$log"
  if [ -f "$root" ]; then  # a packed bundle
    local tmp
    tmp=$(mktemp -d)
    tar -C "$tmp" -xJf "$root" || { echo "cannot unpack $root" >&2; return 1; }
    root=$(echo "$tmp"/*)
  fi
  local cublas_dir
  cublas_dir=$(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null)
  export LD_LIBRARY_PATH="$root/lib:/usr/local/cuda/lib64:${cublas_dir}:${LD_LIBRARY_PATH:-}"
  # Room for the JIT-compiled code of every kernel of a PTX-only build (default 256 MiB).
  export CUDA_CACHE_MAXSIZE=${CUDA_CACHE_MAXSIZE:-2147483648}
  {
    date -u +"date: %Y-%m-%d %H:%M UTC"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | sed 's/^/gpu: /'
    nvcc --version 2>/dev/null | grep release | sed 's/^/toolkit there: /'
  } | tee "$log/summary.txt"
  # A bundle holds one build per folder with a bin/ (the older layout: bin/ at its top).
  local builds=() fails=0
  if [ -d "$root/bin" ]; then builds=("$root"); fi
  for d in "$root"/*/; do
    [ -d "$d/bin" ] && builds+=("${d%/}")
  done
  [ ${#builds[@]} -gt 0 ] || { echo "no build in $root (expected $root/NAME/bin)" >&2; return 1; }
  for b in "${builds[@]}"; do
    run_build "$b" "$log"
    fails=$((fails + $?))
  done
  echo "suites failing: $fails" | tee -a "$log/summary.txt"
  return $((fails > 0))
}

case "${1:-}" in
  bundle) bundle "$2" "$3" "${4:-}" ;;
  pack) pack "$2" ;;
  run) run "$2" "${3:-}" ;;
  *) sed -n '2,21p' "$0"; exit 2 ;;
esac
