#!/usr/bin/env bash
# GPU benchmark of the CUDA backend on random-weight 27B-shaped Qwen3.5 models, in two steps
# so the slow compile happens off the GPU:
#
#   scripts/gpu_bench.sh bundle BUILD_DIR BUNDLE_DIR   (build machine) voltinfer and the shared
#       libraries it needs, as BUNDLE_DIR/bundle.tar.xz.
#   scripts/gpu_bench.sh run BUNDLE_DIR|BUNDLE.tar.xz [OUT_DIR]   (GPU machine, repository root)
#       1. hwcheck (table + JSON);
#       2. make-model 27B Q4_K and Q8_0 (seeded random weights, the real shapes);
#       3. for each model and kernel profile (native, volta): bench — prefill, decode at
#          several contexts (synthetic fill), verification rounds of 1/2/4/8 tokens, the
#          per-op profile of a decode round and its kernel trace (CUPTI);
#       4. the plot (scripts/plot_bench.py) and a summary, with issue #7's floors per
#          configuration (scripts/check_floors.py).
#     Every step runs under its own timeout and a step that fails does not stop the others;
#     the whole run is sized to stay under 6 minutes on an H200 (see Knobs). Outputs in OUT_DIR (default
#     $OUT): hwcheck.{txt,json}, make.log, bench.log, bench.jsonl, bench.md, bench.png, summary.txt
#     (eight files: what the device tool brings back); the summary has a line on the SM clock and
#     power during each bench run (bundle_env.sh clocks_start; the samples in /tmp).
#
# Knobs (environment): CONFIGS (weights:KV pairs, "q4_k:int8 q8_0:int8"; add q4_k:f16 for the
# f16 cache), PROFILES (native volta; "native:nograph" adds a run with --no-cuda-graphs), DEPTHS (512,8192,32768,131072), PREFILL (2048), TRACE (1: the
# kernel trace, with libcupti from the toolkit or the Python package nvidia-cuda-cupti; 0: none),
# TRACE_TOKENS (1: decode rounds; "1,4" adds a table of the 4-token verify round), STYLES
# (code,zh), VERIFY (1,2,4,8), NGEN (16), REPS (2), STEP_TIMEOUT (seconds per bench, 75), BUDGET
# (no bench starts that could end after this many seconds, 300), KEEP_MODELS (set: the models
# stay in MODEL_DIR, default /tmp/vi_models, for a later run of another binary), BENCH_EXTRA (more
# bench arguments, e.g. --int8-activations). With the defaults: about 4
# minutes on an H200 (2 models, 4 bench runs), never more than ~5.
set -uo pipefail

bundle() {
  local build=$1 dst=$2 tmp
  tmp=$(mktemp -d)
  mkdir -p "$tmp/bin" "$tmp/lib" "$dst"
  cp "$build/voltinfer" "$tmp/bin/" && strip --strip-unneeded "$tmp/bin/voltinfer"
  # Shared libraries outside glibc/libstdc++ and the CUDA toolkit travel with the binary.
  ldd "$tmp/bin/voltinfer" | awk '/=> \// {print $3}' | sort -u |
    grep -Ev '/(libc|libm|libdl|librt|libpthread|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so|/libcu' |
    while read -r lib; do cp -L "$lib" "$tmp/lib/"; done
  strip --strip-unneeded "$tmp"/lib/* 2>/dev/null
  # Compressed: ICU's data alone is ~30 MB, the working tree that travels is limited.
  tar -C "$tmp" -cJf "$dst/bundle.tar.xz" bin lib
  rm -rf "$tmp"
  du -sh "$dst"
}

run() {
  local b=$1 out=${2:-${OUT:-/tmp/gpu_bench}}
  mkdir -p "$out"
  rm -f "$out"/bench.log "$out"/make.log  # appended to below: a warm machine may hold an earlier job's
  . "$(dirname "$0")/bundle_env.sh"  # clocks_start / clocks_since, copy_gbs_of
  local tarball=
  if [ -f "$b/bundle.tar.xz" ]; then tarball=$b/bundle.tar.xz; elif [ -f "$b" ]; then tarball=$b; fi
  if [ -n "$tarball" ]; then
    mkdir -p /tmp/vi_bundle && tar -C /tmp/vi_bundle -xJf "$tarball" && b=/tmp/vi_bundle
  fi
  if [ ! -x "$b/bin/voltinfer" ]; then
    echo "gpu_bench.sh run: no bin/voltinfer in $1 (give the bundle folder, its bundle.tar.xz, or a" \
      "folder with bin/ and lib/)" >&2
    return 2
  fi
  local cublas_dir
  cublas_dir=$(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null)
  export LD_LIBRARY_PATH="$b/lib:/usr/local/cuda/lib64:${cublas_dir}:${LD_LIBRARY_PATH:-}"
  local vi="$b/bin/voltinfer" models=${MODEL_DIR:-/tmp/vi_models}
  local configs=${CONFIGS:-q4_k:int8 q8_0:int8} profiles=${PROFILES:-native volta}
  local styles=${STYLES:-code,zh} budget=${BUDGET:-300}
  local depths=${DEPTHS:-512,8192,32768,131072} prefill=${PREFILL:-2048} verify=${VERIFY:-1,2,4,8}
  local ngen=${NGEN:-16} reps=${REPS:-2} step_timeout=${STEP_TIMEOUT:-75}
  local trace_flag=()
  if [ "${TRACE:-1}" = 1 ]; then
    trace_flag=(--trace-kernels --trace-tokens "${TRACE_TOKENS:-1}")
    if [ -z "${VI_CUPTI:-}" ]; then  # else the loader's search (bench says what it tried)
      VI_CUPTI=$(ls /usr/local/cuda/extras/CUPTI/lib64/libcupti.so /usr/local/cuda/lib64/libcupti.so 2>/dev/null | head -1)
      [ -n "$VI_CUPTI" ] || VI_CUPTI=$(python3 -c 'import glob, site
for p in site.getsitepackages():
    for f in sorted(glob.glob(p + "/nvidia/**/libcupti.so*", recursive=True)):
        print(f); raise SystemExit' 2>/dev/null)
      export VI_CUPTI
    fi
  fi
  mkdir -p "$models"
  local t0=$SECONDS
  {
    date -u +"date: %Y-%m-%d %H:%M UTC"
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem,power.draw --format=csv,noheader |
      sed 's/^/gpu: /'
    echo "commit: $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet HEAD 2>/dev/null || echo ' (+ local changes)')"
  } > "$out/summary.txt"

  # On one GPU, two ranks share it so the peer-matrix code path still runs (a 2x2 matrix).
  local ranks_flag=()
  [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -eq 1 ] && ranks_flag=(--ranks 2)
  timeout 90 "$vi" hwcheck "${ranks_flag[@]}" > "$out/hwcheck.txt" 2>&1
  echo "hwcheck: rc=$?" >> "$out/summary.txt"
  timeout 90 "$vi" hwcheck --json > "$out/hwcheck.json" 2>> "$out/hwcheck.txt"
  local bw
  bw=$(copy_gbs_of "$out/hwcheck.json")
  echo "copy bandwidth for MBU: ${bw} GB/s (hwcheck)" >> "$out/summary.txt"
  clocks_start /tmp/gpu_bench_clocks.csv  # not in OUT_DIR: its eight files are what comes back
  [ ${#trace_flag[@]} -gt 0 ] && echo "kernel trace: libcupti ${VI_CUPTI:-(none found: the loader searches)}" >> "$out/summary.txt"
  local bw_flag=()
  [ "${bw%.*}" -gt 0 ] 2>/dev/null && bw_flag=(--bandwidth-gbs "$bw")

  # Models in the order the configurations name them; each is deleted after its last use
  # (the disk holds one 27B model comfortably, not all of them).
  local dtypes
  dtypes=$(for c in $configs; do echo "${c%%:*}"; done | awk '!seen[$0]++')
  for dt in $dtypes; do
    local m="$models/q27-$dt.gguf"
    if [ ! -s "$m" ]; then
      timeout 120 "$vi" make-model --arch qwen3_5 --preset 27b --dtype "$dt" --seed 1 -o "$m" >> "$out/make.log" 2>&1
      echo "make-model $dt: rc=$? ($((SECONDS - t0)) s)" >> "$out/summary.txt"
    fi
    [ -s "$m" ] || continue
    for c in $configs; do
      [ "${c%%:*}" = "$dt" ] || continue
      local kv=${c#*:}
      for prof_spec in $profiles; do
        # A profile may carry ":nograph" (decode steps op by op, --no-cuda-graphs) to compare.
        local prof=${prof_spec%%:*} graph_flag=()
        [ "$prof_spec" != "$prof" ] && graph_flag=(--no-cuda-graphs)
        # Never start a step that could not finish inside the whole run's budget.
        if [ $((SECONDS - t0 + step_timeout)) -gt "$budget" ]; then
          echo "bench $dt KV $kv $prof_spec: skipped (budget of $budget s)" >> "$out/summary.txt"
          continue
        fi
        echo "=== bench $dt KV $kv $prof_spec" >> "$out/bench.log"
        local since
        since=$(date +%s.%N)
        timeout "$step_timeout" stdbuf -oL -eL "$vi" bench -m "$m" --device cuda --kernel-profile "$prof" "${graph_flag[@]}" \
          --cache-type-k "$kv" --cache-type-v "$kv" -p "$prefill" --prompt-style "$styles" -d "$depths" --verify "$verify" -n "$ngen" \
          -r "$reps" --profile-ops --profile-rounds 4 "${trace_flag[@]}" "${bw_flag[@]}" ${BENCH_EXTRA:-} --json "$out/bench.jsonl" \
          --md "$out/bench.md" >> "$out/bench.log" 2>&1
        echo "bench $dt KV $kv $prof_spec: rc=$? ($((SECONDS - t0)) s)" >> "$out/summary.txt"
        echo "clocks $dt KV $kv $prof_spec (prefill and decode): $(clocks_since "$since")" >> "$out/summary.txt"
      done
    done
    [ -n "${KEEP_MODELS:-}" ] || rm -f "$m"
  done
  python3 scripts/plot_bench.py "$out/bench.jsonl" "$out/bench.png" >> "$out/summary.txt" 2>&1
  # Issue #7's floors, met or not, per configuration (PREFILL=8192,32768 for the prefill ones).
  python3 scripts/check_floors.py "$out/bench.jsonl" >> "$out/summary.txt" 2>&1
  # The decode rows of every table, last, so the reply's tail shows them.
  grep -hE '^===|^\| .* (decode|verify|prefill) ' "$out/bench.log" | cut -c1-200 >> "$out/summary.txt"
  echo "total: $((SECONDS - t0)) s" >> "$out/summary.txt"
  cat "$out/summary.txt"
}

case "${1:-}" in
  bundle) bundle "$2" "$3" ;;
  run) run "$2" "${3:-}" ;;
  *) sed -n '2,22p' "$0"; exit 2 ;;
esac
