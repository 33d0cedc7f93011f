#!/usr/bin/env bash
# The GEMV hand-offs (src/backends/cuda/gemv_handoff.cuh, VI_GEMV_HANDOFF=1|2|3) checked on a GPU
# machine (repository root), from a bundle that holds bin/voltinfer and the CUDA op tests
# (scripts/gpu_test.sh bundle + pack):
#
#   scripts/gpu_handoff.sh BUNDLE.tar.xz [LOG_DIR]
#
# 1. cuda_test_gemv_handoff (each hand-off level against the waiting kernels, bit for bit; also
#    with VI_GEMV_HANDOFF_ACQUIRE=1),
#    cuda_test_deferred_norm, cuda_test_pdl and cuda_test_gdn_conv_step as they are, and
#    cuda_test_models_gpu with VI_GEMV_HANDOFF=3 (recorded decode against op by op, the golden
#    models).
# 2. The 27B-shaped make-model (q4_k, seed 1): `voltinfer generate` sampled (temperature 0.8,
#    seed 7, 48 tokens) plain and with --spec mtp (4-token verify rounds), at levels 0 to 3:
#    the texts must be the same at every level (a hand-off changes no arithmetic).
# 3. scripts/golden_q4k.sh (qwen35_k as Q4_K against transformers; needs torch) at level 3, tol
#    3e-2 (GOLDEN=0 skips it).
# The rounds are timed apart, with gpu_ab.sh:
#   A="VI_GEMV_HANDOFF=3" B="" C="VI_GEMV_HANDOFF=2" D="VI_GEMV_HANDOFF=1" TRACE=1 scripts/gpu_ab.sh BUNDLE.tar.xz
# Logs to LOG_DIR (default /tmp/gpu_handoff); summary.txt says what passed. Where $OUT is set (a
# device call), summary.txt and all the logs as gpu_handoff.tgz are copied there (two files).
set -uo pipefail

bundle=$1
out=${2:-/tmp/gpu_handoff}
mkdir -p "$out"
. "$(dirname "$0")/bundle_env.sh"
unpack_bundle "$bundle"
bin=$(dirname "$vi")
t0=$SECONDS
{
  date -u +"date: %Y-%m-%d %H:%M UTC"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | sed 's/^/gpu: /'
} | tee "$out/summary.txt"

fails=0
suite() {  # suite NAME [ENV=VALUE ...] -- [gtest args]
  local name=$1 envs=() args=()
  shift
  while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
  [ "${1:-}" = -- ] && shift
  args=("$@")
  local exe=$bin/cuda_test_$name log=$out/$name${envs:+.${envs[*]// /_}}.log
  if [ ! -x "$exe" ]; then
    echo "$name: not in the bundle" | tee -a "$out/summary.txt"
    fails=$((fails + 1))
    return
  fi
  timeout 480 env "${envs[@]}" stdbuf -oL -eL "$exe" "${args[@]}" > "$log" 2>&1
  local rc=$?
  echo "$name ${envs[*]} ${args[*]}: rc=$rc, $(grep -cE '^\[       OK' "$log") ok, $(grep -cE '^\[  FAILED  \] [A-Za-z]' "$log") failed, $(grep -cE '^\[  SKIPPED' "$log") skipped ($((SECONDS - t0)) s)" |
    tee -a "$out/summary.txt"
  [ $rc = 0 ] || fails=$((fails + 1))
}
suite gemv_handoff
suite gemv_handoff VI_GEMV_HANDOFF_ACQUIRE=1  # every receiver acquiring: tells a stale L1 line from the rest
suite deferred_norm
suite pdl
suite gdn_conv_step
suite models_gpu VI_GEMV_HANDOFF=3

make_27b q4_k "$out/make.log"
echo "make-model q4_k: rc=$? ($((SECONDS - t0)) s)" | tee -a "$out/summary.txt"
for spec in off mtp; do
  for level in 0 1 2 3; do
    VI_GEMV_HANDOFF=$level timeout 180 "$vi" generate -m "$m" --device cuda --kernel-profile native \
      --cache-type-k int8 --cache-type-v int8 -p "def quicksort(xs):" -n 48 --temp 0.8 -s 7 --spec $spec \
      > "$out/gen_${spec}_$level.txt" 2> "$out/gen_${spec}_$level.err"
    echo "generate --spec $spec level $level: rc=$?" >> "$out/summary.txt"
  done
  same=1
  for level in 1 2 3; do cmp -s "$out/gen_${spec}_0.txt" "$out/gen_${spec}_$level.txt" || same=0; done
  if [ $same = 1 ] && [ -s "$out/gen_${spec}_0.txt" ]; then
    echo "generate --spec $spec: the same text at levels 0 to 3" | tee -a "$out/summary.txt"
  else
    echo "generate --spec $spec: TEXTS DIFFER (or are empty) between levels" | tee -a "$out/summary.txt"
    fails=$((fails + 1))
  fi
done
if [ "${GOLDEN:-1}" = 1 ]; then
  here=$(cd "$(dirname "$0")/.." && pwd)
  gdir=$(mktemp -d)  # the fixture and its reference logits: large, not logs
  if timeout 240 "$here/scripts/golden_q4k.sh" make "$gdir" > "$out/golden_make.log" 2>&1; then
    VI_GEMV_HANDOFF=3 timeout 240 "$here/scripts/golden_q4k.sh" run "$gdir" "$vi" 3e-2 -- --device cuda \
      --kernel-profile native > "$out/golden.log" 2>&1
    rc=$?
    sed 's/^/golden (level 3): /' "$out/golden.log" | tee -a "$out/summary.txt"
    [ $rc = 0 ] || fails=$((fails + 1))
  else
    echo "golden_q4k make failed: $(tail -2 "$out/golden_make.log")" | tee -a "$out/summary.txt"
    fails=$((fails + 1))
  fi
  rm -rf "$gdir"
fi
echo "failures: $fails ($((SECONDS - t0)) s)" | tee -a "$out/summary.txt"
rm -rf "$bundle_tmp"
if [ -n "${OUT:-}" ] && [ "$OUT" != "$out" ]; then
  cp "$out/summary.txt" "$OUT/summary.txt"
  tar -C "$(dirname "$out")" -czf "$OUT/gpu_handoff.tgz" "$(basename "$out")"
fi
exit $((fails > 0))
