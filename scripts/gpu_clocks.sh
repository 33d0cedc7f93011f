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
# the round, and the samples taken while the bench ran, counted by SM clock and reason).
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
# Newer drivers name the reasons clocks_event_reasons, older ones clocks_throttle_reasons.
reason=$(nvidia-smi --help-query-gpu | grep -oE "clocks_(event|throttle)_reasons\.active" | head -1)
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu${reason:+,$reason} \
  --format=csv,noheader -lms 250 > "$out/clocks.csv" 2>&1 &
smi=$!
sleep 1
start=$(date +%s.%N)
timeout 180 "$vi" bench -m "$m" --device cuda --kernel-profile native --cache-type-k int8 --cache-type-v int8 \
  -p 512 --prompt-style code -d "${DEPTH:-8192}" -n "${ROUNDS:-2500}" -r 1 > "$out/bench.txt" 2>&1
echo "bench: rc=$?" | tee -a "$out/summary.txt"
end=$(date +%s.%N)
sleep 1
kill "$smi" 2> /dev/null
grep -E '\| decode ' "$out/bench.txt" | cut -c1-220 | tee -a "$out/summary.txt"
# The samples inside the bench's run (its model load and warm-up included: the first seconds).
python3 - "$out/clocks.csv" "$start" "$end" << 'EOF' | tee -a "$out/summary.txt"
import collections, datetime, statistics, sys
rows, t0, t1 = [], float(sys.argv[2]), float(sys.argv[3])
for line in open(sys.argv[1]):
    f = [x.strip() for x in line.split(",")]
    try:
        t = datetime.datetime.strptime(f[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
    except (ValueError, IndexError):
        continue
    if t0 <= t <= t1:
        rows.append(f)
if not rows:
    sys.exit("no samples inside the bench's run")
count = collections.Counter((r[1], r[5] if len(r) > 5 else "") for r in rows)
print(f"{len(rows)} samples while the bench ran (SM clock, reasons: count):")
for (sm, why), n in count.most_common(8):
    print(f"  {sm}, {why}: {n}")
power = sorted(float(r[3].split()[0]) for r in rows)
print(f"power W: min {power[0]:.0f}, median {statistics.median(power):.0f}, max {power[-1]:.0f};"
      f" temperature C: {min(int(r[4]) for r in rows)}..{max(int(r[4]) for r in rows)}")
EOF
rm -rf "$bundle_tmp"
