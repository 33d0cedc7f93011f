#!/usr/bin/env bash
# CPU speed of the default model with the conditions docs/PERFORMANCE.md records:
# machine, load, threads, prompt style and lengths, repetitions. Prints a markdown table;
# raw samples go to bench-cpu.jsonl. Run it on an otherwise idle machine.
#   scripts/bench_cpu.sh [extra voltinfer bench flags]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${VOLTINFER_BIN:-build/voltinfer}
echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p') x $(nproc) hardware threads"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
for t in 1 "$(nproc)"; do
  "$bin" bench -t "$t" -p 128,512 -n 128 -r 4 --prompt-style code --json "bench-cpu-t$t.jsonl" "$@" 2>/dev/null
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
