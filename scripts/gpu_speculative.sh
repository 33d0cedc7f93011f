#!/usr/bin/env bash
# Speculative decoding on a GPU machine (repository root), from a bundle made here:
#
#   scripts/gpu_speculative.sh BUNDLE.tar.xz [LOG_DIR]
#
# BUNDLE.tar.xz: a folder with bin/voltinfer and lib/ (scripts/gpu_gemv.sh bundle or
# scripts/gpu_test.sh bundle, then tar -cJf), a CUDA build with native kernels.
# 1. tests/e2e/test_speculative.py with VOLTINFER_GPU=1: the MTP head against the torch
#    reference and `generate --spec mtp|ngram` against `--spec off`, on the CPU and in both GPU
#    profiles (needs pytest, torch and transformers, which the GPU image has).
# 2. make-model 27B (seed 1, DTYPE q4_k), then `voltinfer bench` at DEPTHS (8192,131072), int8 KV,
#    PROFILE (native): 1- and 4-token verify rounds, the 4-token round with checkpoints
#    (--verify-checkpoints) and whole MTP rounds with SPEC_K (3) drafts (--spec-rounds).
# Logs to LOG_DIR (default $OUT); summary.txt ends with the bench rows.
set -uo pipefail

bundle=$1
out=${2:-${OUT:-/tmp/gpu_speculative}}
mkdir -p "$out"
rm -f "$out"/bench.log  # appended to below: a warm machine may hold an earlier job's
. "$(dirname "$0")/bundle_env.sh"
unpack_bundle "$bundle"
t0=$SECONDS
{
  date -u +"date: %Y-%m-%d %H:%M UTC"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | sed 's/^/gpu: /'
} | tee "$out/summary.txt"

if [ -z "${NO_PYTEST:-}" ]; then
  (cd tests/e2e && VOLTINFER_BIN="$vi" VOLTINFER_GPU=1 PYTHONUNBUFFERED=1 timeout "${PYTEST_TIMEOUT:-300}" \
    python3 -m pytest -q -p no:cacheprovider test_speculative.py) > "$out/pytest.log" 2>&1
  echo "test_speculative.py (cpu, cuda native, cuda volta): rc=$? $(tail -n 1 "$out/pytest.log") ($((SECONDS - t0)) s)" |
    tee -a "$out/summary.txt"
  grep -E '^(FAILED|ERROR)|Error' "$out/pytest.log" | head -20 | tee -a "$out/summary.txt"
fi

bw=$(copy_bandwidth "$out")
echo "copy bandwidth: $bw GB/s" | tee -a "$out/summary.txt"
dtype=${DTYPE:-q4_k}
make_27b "$dtype" "$out/make.log"
echo "make-model 27b $dtype: rc=$? ($((SECONDS - t0)) s)" | tee -a "$out/summary.txt"

bench() {  # $1: label; the rest: extra bench flags
  local label=$1
  shift
  echo "=== $label: $*" >> "$out/bench.log"
  timeout "${STEP_TIMEOUT:-240}" stdbuf -oL -eL "$vi" bench -m $m --device cuda --kernel-profile "${PROFILE:-native}" \
    --cache-type-k int8 --cache-type-v int8 -p 512 --prompt-style code -d "${DEPTHS:-8192,131072}" \
    --bandwidth-gbs "$bw" -n "${NGEN:-32}" -r "${REPS:-2}" --json "$out/bench.jsonl" "$@" >> "$out/bench.log" 2>&1
  echo "bench $label: rc=$? ($((SECONDS - t0)) s)" | tee -a "$out/summary.txt"
}
bench plain --verify 1,4
bench checkpoints --verify 4 --verify-checkpoints
bench mtp --verify 1 --spec-rounds "${SPEC_K:-3}"
grep -hE '^===|^\| .* (decode|verify|spec|round)|tok/s' "$out/bench.log" | cut -c1-220 >> "$out/summary.txt"
echo "total: $((SECONDS - t0)) s" >> "$out/summary.txt"
rm -rf "$bundle_tmp"
