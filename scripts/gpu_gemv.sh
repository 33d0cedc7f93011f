#!/usr/bin/env bash
# The decode-GEMV checks and measurements on a GPU machine, in two steps (compile here, run there):
#
#   scripts/gpu_gemv.sh bundle BUILD_DIR BUNDLE_DIR   copy cuda_test_matmul*, bench_cuda_gemv,
#       voltinfer (when built) and their non-system shared libraries into BUNDLE_DIR.
#   scripts/gpu_gemv.sh run BUNDLE_DIR [LOG_DIR]       (repository root, GPU machine) the matmul op
#       tests (both profiles, f32 and f16 activations), the GEMV benchmark (tests/bench/
#       bench_cuda_gemv.cu), and, with voltinfer, decode rounds of a 27B-shaped Q4_K Qwen3.5 in
#       both profiles. Logs and the benchmark's JSON lines go to LOG_DIR (default $OUT).
#       BENCH_ARGS: extra benchmark arguments (e.g. "--dtypes q4_k --variants --tokens 1,4");
#       NCU_KERNEL: a kernel-name regex to profile once with Nsight Compute (NCU_SHAPE: the
#       benchmark shape it runs on, default 17408x5120), when ncu is on the machine.
set -uo pipefail

bundle() {
  local build=$1 dst=$2
  mkdir -p "$dst/bin" "$dst/lib"
  cp "$build"/tests/cuda_test_matmul "$build"/tests/cuda_test_matmul_gemv "$build"/tests/bench_cuda_gemv "$dst/bin/"
  [ -x "$build/voltinfer" ] && cp "$build/voltinfer" "$dst/bin/"
  for b in "$dst"/bin/*; do
    ldd "$b" | awk '/=> \// {print $3}'
  done | sort -u | grep -Ev '/(libc|libm|libdl|librt|libpthread|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so|/libcu' |
    while read -r lib; do cp -L "$lib" "$dst/lib/"; done
  strip "$dst"/bin/* 2>/dev/null
  du -sh "$dst"
}

run() {
  local b=$1 log=${2:-${OUT:-/tmp/gpu_gemv}}
  mkdir -p "$log"
  local cublas_dir
  cublas_dir=$(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null)
  export LD_LIBRARY_PATH="$b/lib:/usr/local/cuda/lib64:${cublas_dir}:${LD_LIBRARY_PATH:-}"
  {
    date -u +"date: %Y-%m-%d %H:%M UTC"
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | sed 's/^/gpu: /'
  } | tee "$log/summary.txt"
  for t in cuda_test_matmul_gemv cuda_test_matmul; do
    timeout "${SUITE_TIMEOUT:-120}" stdbuf -oL -eL "$b/bin/$t" > "$log/$t.log" 2>&1
    echo "$t: rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$log/$t.log" | tr '\n' ' ')" | tee -a "$log/summary.txt"
    grep -E 'Failure|relative L2|FAILED  \]' "$log/$t.log" | head -8
  done
  # shellcheck disable=SC2086
  timeout "${BENCH_TIMEOUT:-150}" "$b/bin/bench_cuda_gemv" ${BENCH_ARGS:-} --json "$log/gemv.jsonl" > "$log/gemv_bench.txt" 2>&1
  echo "bench_cuda_gemv: rc=$?" | tee -a "$log/summary.txt"
  if [ -n "${NCU_KERNEL:-}" ] && command -v ncu > /dev/null; then
    # shellcheck disable=SC2086
    timeout "${NCU_TIMEOUT:-120}" ncu --clock-control none --graph-profiling node -k "regex:$NCU_KERNEL" -s 3 -c 1 \
      --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats \
      --section MemoryWorkloadAnalysis "$b/bin/bench_cuda_gemv" ${BENCH_ARGS:-} --shapes "${NCU_SHAPE:-17408x5120}" \
      --tokens 1 > "$log/ncu.txt" 2>&1
    echo "ncu $NCU_KERNEL: rc=$?" | tee -a "$log/summary.txt"
  fi
  if [ -x "$b/bin/voltinfer" ] && [ -z "${NO_E2E:-}" ]; then
    local m=/tmp/q27.gguf
    [ -f $m ] || "$b/bin/voltinfer" make-model --arch qwen3_5 --preset 27b --dtype q4_k --seed 1 -o $m > "$log/make_model.log" 2>&1
    for prof in native volta; do
      timeout "${E2E_TIMEOUT:-90}" "$b/bin/voltinfer" bench -m $m --device cuda --kernel-profile $prof -d 512 \
        --fill synthetic -n 32 -r 2 --verify 1,4 --json "$log/e2e.jsonl" > "$log/e2e_$prof.txt" 2>&1
      echo "e2e $prof: rc=$?" | tee -a "$log/summary.txt"
    done
  fi
}

case "${1:-}" in
  bundle) bundle "$2" "$3" ;;
  run) run "$2" "${3:-}" ;;
  *) sed -n '2,9p' "$0"; exit 2 ;;
esac
