#!/usr/bin/env bash
# The GPU's clocks and power while it decodes (GPU machine, repository root), from a bundle made
# here (scripts/gpu_test.sh bundle + pack: a folder with bin/voltinfer and lib/):
#
#   scripts/gpu_clocks.sh BUNDLE.tar.xz [LOG_DIR]
#
# Why: the decode GEMVs are bound by their per-warp instruction chains (docs/notes/gemv.md), so
# they run at the SM clock; a card that reaches its power limit while it streams its weights
# lowers that clock, and the same kernels then reach a smaller share of its bandwidth.
# make-model's 27B (Q4_K, seed 1), then `voltinfer bench` at DEPTH (8192) keys, int8 KV, native
# profile, ROUNDS (2500) decode rounds in one repetition, while nvidia-smi samples the SM and
# memory clocks, the power draw, the temperature and the clock event reasons every 250 ms.
# Logs to LOG_DIR (default $OUT): clocks.csv (every sample), bench.txt, summary.txt (the limits,
# the round, and one line on the samples taken while the bench ran: scripts/clock_summary.py).
set -uo pipefail

bundle=$1
out=${2:-${OUT:-/tmp/gpu_clocks}}
mkdir -p "$out"
. "$(dirname "$0")/bundle_env.sh"
unpack_bundle "$bundle"
{
  date -u +"date: %Y-%m-%d %H:%M UTC"
  nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm,clocks.max.mem --format=csv,noheader |
    sed 's/^/gpu, power limit, max SM and memory clocks: /'
} | tee "$out/summary.txt"
make_27b q4_k "$out/make.log" || { echo "make-model failed (make.log)" | tee -a "$out/summary.txt"; exit 1; }
clocks_start "$out/clocks.csv"
sleep 1
since=$(date +%s.%N)
timeout 180 "$vi" bench -m "$m" --device cuda --kernel-profile native --cache-type-k int8 --cache-type-v int8 \
  -p 512 --prompt-style code -d "${DEPTH:-8192}" -n "${ROUNDS:-2500}" -r 1 > "$out/bench.txt" 2>&1
echo "bench: rc=$?" | tee -a "$out/summary.txt"
grep -E '\| decode ' "$out/bench.txt" | cut -c1-220 | tee -a "$out/summary.txt"
# The samples while the bench ran (its model load and warm-up included: the first seconds).
echo "clocks: $(clocks_since "$since")" | tee -a "$out/summary.txt"
rm -rf "$bundle_tmp"
