#!/usr/bin/env bash
# Two settings of one voltinfer binary, alternated in one job on a GPU machine (repository root),
# so the comparison does not ride on the ~3% the round moves between device jobs:
#
#   A="VI_PDL=1" B="VI_PDL=0" scripts/gpu_ab.sh BUNDLE.tar.xz [LOG_DIR]
#   (C="..." and D="..." add a third and fourth setting to each alternation)
#
# A and B are each a list of environment assignments (NAME=value), voltinfer bench flags (words
# starting with -) and at most one bin=NAME (run bin/NAME of the bundle instead of bin/voltinfer:
# two builds side by side), e.g. A="bin=voltinfer" B="bin=voltinfer_base" or
# B="--int8-activations". BUNDLE.tar.xz holds a folder with bin/voltinfer and lib/
# (scripts/gpu_test.sh bundle + pack makes one).
# 1. hwcheck (copy bandwidth for MBU); make-model 27B (seed 1, DTYPE q4_k).
# 2. voltinfer bench, PROFILE (native; or volta) kernel profile, int8 KV, DEPTHS (8192,131072),
#    1- and 4-token verify rounds,
#    A then B, REPS_AB (2) times; NGEN (64) tokens, REPS (2) repetitions each.
# 3. TRACE=1: then one traced run of each (the per-op kernel tables, trace_A.md and trace_B.md;
#    TRACE_TOKENS=1,4 traces the 4-token verify round too).
# Logs to LOG_DIR (default $OUT): summary.txt ends with each run's decode and verify rows (and the
# traces' per-op rows); after each run a line on the SM clock and power while it ran (clocks.csv:
# every sample; the GEMVs run at the SM clock, so a run the card held down is not comparable).
set -uo pipefail

bundle=$1
out=${2:-${OUT:-/tmp/gpu_ab}}
mkdir -p "$out"
# A second job on a warm machine finds the first one's logs in a fixed LOG_DIR: bench.log is
# appended to, so its rows would join this job's summary. Start from none of them.
rm -f "$out"/bench.log "$out"/summary.txt "$out"/bench_*.jsonl "$out"/trace_*.md "$out"/clocks.csv
. "$(dirname "$0")/bundle_env.sh"
unpack_bundle "$bundle"
t0=$SECONDS
{
  date -u +"date: %Y-%m-%d %H:%M UTC"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | sed 's/^/gpu: /'
  echo "profile: ${PROFILE:-native}, weights: ${DTYPE:-q4_k}"
  echo "A: ${A:-}"
  echo "B: ${B:-}"
  if [ -n "${C:-}" ]; then echo "C: $C"; fi
  if [ -n "${D:-}" ]; then echo "D: $D"; fi
} | tee "$out/summary.txt"
bw=$(copy_bandwidth "$out")
echo "copy bandwidth: $bw GB/s" | tee -a "$out/summary.txt"
clocks_start "$out/clocks.csv"
dtype=${DTYPE:-q4_k}
make_27b "$dtype" "$out/make.log"
echo "make-model $dtype: rc=$? ($((SECONDS - t0)) s)" | tee -a "$out/summary.txt"

# One setting: bin=NAME picks the binary, other NAME=value words go to env, the rest to bench.
# With a third argument "trace": one shorter traced run (per-op kernel table) into trace_NAME.md.
run_setting() {
  local name=$1 spec=$2 mode=${3:-} envs=() flags=() word exe=$vi
  for word in $spec; do
    if [[ $word == bin=* ]]; then exe=$(dirname "$vi")/${word#bin=}
    elif [[ $word == -* ]]; then flags+=("$word")
    else envs+=("$word"); fi
  done
  local run=(-n "${NGEN:-64}" -r "${REPS:-2}" --verify 1,4 --json "$out/bench_$name.jsonl")
  [ "$mode" = trace ] && run=(-n 32 -r 1 --verify 1 --trace-kernels --trace-tokens "${TRACE_TOKENS:-1}" --md "$out/trace_$name.md")
  echo "=== $name${mode:+ ($mode)}: $spec" >> "$out/bench.log"
  [ -x "$exe" ] || { echo "bench $name: no $exe in the bundle" | tee -a "$out/summary.txt"; return; }
  local since
  since=$(date +%s.%N)
  timeout 200 env "${envs[@]}" stdbuf -oL -eL "$exe" bench -m $m --device cuda --kernel-profile "${PROFILE:-native}" "${flags[@]}" \
    --cache-type-k int8 --cache-type-v int8 -p 512 --prompt-style code -d "${DEPTHS:-8192,131072}" \
    --bandwidth-gbs "$bw" "${run[@]}" >> "$out/bench.log" 2>&1
  echo "bench $name${mode:+ ($mode)}: rc=$? ($((SECONDS - t0)) s)" | tee -a "$out/summary.txt"
  echo "clocks $name${mode:+ ($mode)}: $(clocks_since "$since")" | tee -a "$out/summary.txt"
}
# C and D: optional third and fourth settings, run after B in each alternation.
names="A B"
[ -n "${C:-}" ] && names="$names C"
[ -n "${D:-}" ] && names="$names D"
for rep in $(seq "${REPS_AB:-2}"); do
  for name in $names; do run_setting $name "${!name:-}"; done
done
grep -hE '^===|^\| .* (decode|verify) ' "$out/bench.log" | grep -v ' (trace)' | cut -c1-200 >> "$out/summary.txt"
# TRACE=1: a traced run of each setting; its per-op rows and the round of each depth go to the
# summary (whole tables in trace_A.md, trace_B.md). Traced rounds are slower: compare them with
# each other, not with the untraced rows above.
if [ "${TRACE:-0}" = 1 ]; then
  for name in $names; do
    run_setting $name "${!name:-}" trace
    echo "--- kernel trace $name (µs a round)" >> "$out/summary.txt"
    grep -E '^\| ' "$out/trace_$name.md" 2>/dev/null | grep -E '[0-9]+(\.[0-9]+)? \| [0-9]' |
      grep -vE '\| (decode|verify) [0-9]' | cut -c1-200 | head -n 60 >> "$out/summary.txt"
  done
fi
echo "total: $((SECONDS - t0)) s" >> "$out/summary.txt"
# The rounds (and the traced rounds) to the console; the per-op rows stay in summary.txt.
grep -E '^(===|---|clocks )|^\| .* (decode|verify) |\*\*round' "$out/summary.txt" | cut -c1-200 | tail -n 48
rm -rf "$bundle_tmp"
