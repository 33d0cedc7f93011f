#!/usr/bin/env bash
# One switch of the CUDA backend checked on a GPU machine (repository root), from a bundle that
# holds bin/voltinfer and the CUDA op tests named (scripts/gpu_test.sh bundle with TESTS, + pack):
#
#   SUITES="gemv_streaming deferred_norm" scripts/gpu_switch.sh BUNDLE.tar.xz SETTING [SETTING ...]
#
# A SETTING is a list of environment assignments ("VI_Q4KT_STREAM=0", "" for the defaults).
# 1. Each suite of SUITES (cuda_test_NAME) under every setting.
# 2. The 27B-shaped make-model (q4_k, seed 1): `voltinfer generate` sampled (temperature 0.8, seed
#    7, 48 tokens) plain and with --spec mtp (4-token verify rounds) under every setting: the texts
#    must be the same (a switch that only changes how the kernels meet changes no arithmetic).
# 3. scripts/golden_q4k.sh (qwen35_k as Q4_K against transformers; needs torch, and the Python
#    package gguf: where it is missing and .whl/ holds its wheel, it is installed from there) under
#    the first setting, tol 3e-2 (GOLDEN=0 skips it).
# Logs to LOG_DIR (default /tmp/gpu_switch); summary.txt says what passed. Where $OUT is set (a
# device call), summary.txt and all the logs as gpu_switch.tgz are copied there (two files).
# Exit status 1 if anything failed.
set -uo pipefail

bundle=$1
shift
settings=("$@")
[ ${#settings[@]} -ge 1 ] || { echo "usage: SUITES=... $0 BUNDLE.tar.xz SETTING [SETTING ...]" >&2; exit 2; }
out=${LOG_DIR:-/tmp/gpu_switch}
mkdir -p "$out"
here=$(cd "$(dirname "$0")/.." && pwd)
. "$here/scripts/bundle_env.sh"
unpack_bundle "$bundle"
bin=$(dirname "$vi")
t0=$SECONDS
{
  date -u +"date: %Y-%m-%d %H:%M UTC"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | sed 's/^/gpu: /'
  for i in "${!settings[@]}"; do echo "setting $i: ${settings[$i]:-(defaults)}"; done
} | tee "$out/summary.txt"

fails=0
for name in ${SUITES:-}; do
  for i in "${!settings[@]}"; do
    exe=$bin/cuda_test_$name log=$out/${name}_$i.log
    if [ ! -x "$exe" ]; then
      echo "$name: not in the bundle" | tee -a "$out/summary.txt"
      fails=$((fails + 1))
      break
    fi
    # shellcheck disable=SC2086  # a setting is a list of assignments
    timeout 480 env ${settings[$i]} stdbuf -oL -eL "$exe" > "$log" 2>&1
    rc=$?
    echo "$name, setting $i: rc=$rc, $(grep -cE '^\[       OK' "$log") ok, $(grep -cE '^\[  FAILED  \] [A-Za-z]' "$log") failed, $(grep -cE '^\[  SKIPPED \] [A-Za-z]' "$log") skipped ($((SECONDS - t0)) s)" |
      tee -a "$out/summary.txt"
    [ $rc = 0 ] || fails=$((fails + 1))
  done
done

make_27b q4_k "$out/make.log"
echo "make-model q4_k: rc=$? ($((SECONDS - t0)) s)" | tee -a "$out/summary.txt"
for spec in off mtp; do
  for i in "${!settings[@]}"; do
    # shellcheck disable=SC2086
    timeout 180 env ${settings[$i]} "$vi" generate -m "$m" --device cuda --kernel-profile native \
      --cache-type-k int8 --cache-type-v int8 -p "def quicksort(xs):" -n 48 --temp 0.8 -s 7 --spec $spec \
      > "$out/gen_${spec}_$i.txt" 2> "$out/gen_${spec}_$i.err"
    echo "generate --spec $spec, setting $i: rc=$?" >> "$out/summary.txt"
  done
  same=1
  for i in "${!settings[@]}"; do cmp -s "$out/gen_${spec}_0.txt" "$out/gen_${spec}_$i.txt" || same=0; done
  if [ $same = 1 ] && [ -s "$out/gen_${spec}_0.txt" ]; then
    echo "generate --spec $spec: the same text under every setting" | tee -a "$out/summary.txt"
  else
    echo "generate --spec $spec: TEXTS DIFFER (or are empty) between settings" | tee -a "$out/summary.txt"
    fails=$((fails + 1))
  fi
done

if [ "${GOLDEN:-1}" = 1 ]; then
  if ! python3 -c 'import gguf' 2>/dev/null && ls "$here"/.whl/gguf-*.whl > /dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --target /tmp/vi_site "$here"/.whl/gguf-*.whl &&
      export PYTHONPATH=/tmp/vi_site${PYTHONPATH:+:$PYTHONPATH}
  fi
  gdir=$(mktemp -d)  # the fixture and its reference logits: large, not logs
  if timeout 240 "$here/scripts/golden_q4k.sh" make "$gdir" > "$out/golden_make.log" 2>&1; then
    # shellcheck disable=SC2086
    timeout 240 env ${settings[0]} "$here/scripts/golden_q4k.sh" run "$gdir" "$vi" 3e-2 -- --device cuda \
      --kernel-profile native > "$out/golden.log" 2>&1
    rc=$?
    sed 's/^/golden (setting 0): /' "$out/golden.log" | tee -a "$out/summary.txt"
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
  tar -C "$(dirname "$out")" -czf "$OUT/gpu_switch.tgz" "$(basename "$out")"
fi
exit $((fails > 0))
