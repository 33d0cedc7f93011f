#!/usr/bin/env bash
# The int8-activation GEMV (Q4_KI, gemv_q4ki.cu) against the f16 one (Q4_KT) in one job, on a
# GPU machine (repository root), from a bundle of scripts/gpu_test.sh (bundle + pack):
#
#   scripts/gpu_int8_ab.sh BUNDLE.tar.xz [LOG_DIR]
#
# 1. scripts/gpu_ab.sh with A="--int8-activations" (Q4_KI for the projections a norm feeds) and
#    B="" (Q4_KT everywhere, f16 activations): hwcheck, make-model 27B Q4_K (seed 1), then
#    voltinfer bench (native profile, int8 KV, 8K and 128K, 1- and 4-token verify rounds)
#    alternating the two REPS_AB times.
# 2. The logits of both at every position of a 24-token decode (voltinfer logits --decode),
#    compared by scripts/compare_logits.py at the GPU golden tolerance (3e-2 of the row max).
# 3. With Q4K_DIR (scripts/golden_q4k.sh make): the Q4_K fixture against transformers, both ways.
# Env: NGEN (64), REPS (2), REPS_AB (2), DEPTHS (8192,131072). Logs to LOG_DIR (default $OUT).
set -uo pipefail

bundle=$1
out=${2:-${OUT:-/tmp/gpu_int8_ab}}
mkdir -p "$out"
t0=$SECONDS
A="--int8-activations" B="" DTYPE=q4_k "$(dirname "$0")/gpu_ab.sh" "$bundle" "$out" > /dev/null
m=/tmp/q27-q4_k.gguf  # gpu_ab.sh's model

. "$(dirname "$0")/bundle_env.sh"
unpack_bundle "$bundle"
tokens=$(python3 -c 'import random; r = random.Random(5); print(",".join(str(r.randrange(1000, 200000)) for _ in range(24)))')
for int8 in 1 0; do
  flag=(); [ $int8 = 1 ] && flag=(--int8-activations)
  timeout 150 "$vi" logits -m $m --device cuda --kernel-profile native "${flag[@]}" --decode --tokens "$tokens" \
    --out "$out/logits_int8_$int8.safetensors" > "$out/logits_$int8.log" 2>&1
  echo "logits int8 activations $int8: rc=$?" | tee -a "$out/summary.txt"
done
python3 scripts/compare_logits.py "$out/logits_int8_1.safetensors" "$out/logits_int8_0.safetensors" \
  --ref-tensor logits --tol 3e-2 2>&1 | tee -a "$out/summary.txt"
if [ -n "${Q4K_DIR:-}" ]; then
  for int8 in 1 0; do
    flag=(); [ $int8 = 1 ] && flag=(--int8-activations)
    scripts/golden_q4k.sh run "$Q4K_DIR" "$vi" 3e-2 -- --device cuda --kernel-profile native "${flag[@]}" 2>&1 |
      sed "s/^/golden q4k, int8 activations $int8: /" | tee -a "$out/summary.txt"
  done
fi
echo "total: $((SECONDS - t0)) s" >> "$out/summary.txt"
tail -n 30 "$out/summary.txt"
rm -rf "$bundle_tmp"
