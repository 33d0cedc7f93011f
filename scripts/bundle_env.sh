# Sourced by the device-side scripts that take a bundle (a .tar.xz holding one folder with
# bin/voltinfer and lib/, as scripts/gpu_test.sh bundle + pack make it):
#   unpack_bundle BUNDLE.tar.xz
# unpacks it into a fresh temporary folder (bundle_tmp: remove it when done), sets vi to its
# bin/voltinfer and puts its lib/, the toolkit's and the Python cuBLAS wheel's libraries on
# LD_LIBRARY_PATH. Exits with a message if the bundle does not unpack or holds no voltinfer.
# After it, copy_bandwidth and make_27b (below) run that voltinfer; clocks_start / clocks_since
# record what the GPU's clocks and power do while something runs.
unpack_bundle() {
  local lib cublas_dir
  bundle_tmp=$(mktemp -d)
  tar -C "$bundle_tmp" -xJf "$1" || { echo "cannot unpack $1" >&2; exit 1; }
  vi=$(find "$bundle_tmp" -path '*/bin/voltinfer' | head -1)
  [ -x "$vi" ] || { echo "no bin/voltinfer in $1" >&2; exit 1; }
  # lib/ beside bin/, or one level up where scripts/gpu_test.sh bundle puts it (BUNDLE/lib for
  # BUNDLE/NAME/bin).
  lib=$(dirname "$(dirname "$vi")")/lib:$(dirname "$(dirname "$(dirname "$vi")")")/lib
  cublas_dir=$(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null)
  export LD_LIBRARY_PATH="$lib:/usr/local/cuda/lib64:${cublas_dir}:${LD_LIBRARY_PATH:-}"
}

# copy_bandwidth OUT: runs hwcheck (OUT/hwcheck.json, OUT/hwcheck.txt) and prints its median copy
# bandwidth in GB/s, the denominator of MBU (0 where hwcheck failed).
copy_bandwidth() {
  timeout 90 "$vi" hwcheck --json > "$1/hwcheck.json" 2> "$1/hwcheck.txt"
  copy_gbs_of "$1/hwcheck.json"
}
# copy_gbs_of JSON: the median copy bandwidth (GB/s) of a `hwcheck --json` output, 0 if unreadable.
copy_gbs_of() {
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["devices"][0]["copy_gbs"]["median"])' \
    "$1" 2>/dev/null || echo 0
}

# make_27b DTYPE LOG: sets m to the 27B-shaped Qwen3.5 (make-model, seed 1, with its MTP head) of
# DTYPE in /tmp, made once per machine (its output to LOG); returns make-model's status.
make_27b() {
  m=/tmp/q27-$1.gguf
  [ -s "$m" ] || timeout 150 "$vi" make-model --arch qwen3_5 --preset 27b --dtype "$1" --seed 1 -o "$m" > "$2" 2>&1
}

# clocks_start CSV: nvidia-smi samples the SM and memory clocks, the power draw and limit, the
# temperature and the clock event reasons every 250 ms into CSV, in the background until the
# calling script exits (an EXIT trap ends it; nothing where nvidia-smi is missing).
# clocks_since T0 then prints one line on the samples from T0 (seconds since the epoch,
# `date +%s.%N`) to now (scripts/clock_summary.py).
clocks_start() {
  clocks_csv=$1
  command -v nvidia-smi > /dev/null || return 0
  local reason
  reason=$(nvidia-smi --help-query-gpu 2> /dev/null | grep -oE "clocks_(event|throttle)_reasons\.active" | head -1)
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,power.limit,temperature.gpu${reason:+,$reason} \
    --format=csv,noheader -lms 250 > "$clocks_csv" 2>&1 &
  clocks_pid=$!
  trap 'kill "$clocks_pid" 2> /dev/null' EXIT
}
clocks_since() {
  [ -n "${clocks_csv:-}" ] && [ -s "$clocks_csv" ] || { echo "no clock samples"; return 0; }
  python3 "$(dirname "${BASH_SOURCE[0]}")/clock_summary.py" "$clocks_csv" "$1" "$(date +%s.%N)"
}
