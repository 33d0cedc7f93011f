#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz/) with clang-14, AddressSanitizer and UBSan in
# a separate build folder, then runs each target for N seconds (default 30) starting from
# the committed seeds. Exits non-zero if any target finds a crash, leak, or UB; the
# offending input is left in build-fuzz/artifacts/.
#
#   scripts/fuzz.sh [seconds] [target...]      e.g. scripts/fuzz.sh 60 fuzz_gguf
set -euo pipefail

secs=${1:-30}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(fuzz_gguf fuzz_safetensors)

root=$(cd "$(dirname "$0")/.." && pwd)
build=${VI_FUZZ_BUILD:-$root/build-fuzz}
san="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"

cmake -S "$root" -B "$build" -G Ninja \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
  -DCMAKE_C_FLAGS="$san -fsanitize=fuzzer-no-link" \
  -DCMAKE_CXX_FLAGS="$san -fsanitize=fuzzer-no-link" \
  -DCMAKE_EXE_LINKER_FLAGS="$san" \
  -DVI_FUZZ=ON -DVI_TESTS=OFF -DVI_NATIVE=OFF >/dev/null
ninja -C "$build" -j"${VI_FUZZ_JOBS:-2}" "${targets[@]}"

mkdir -p "$build/artifacts"
status=0
for t in "${targets[@]}"; do
  corpus="$root/tests/fuzz/corpus-$t"  # grows across runs; git-ignored
  mkdir -p "$corpus"
  echo "== $t for ${secs}s"
  if ! "$build/tests/fuzz/$t" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 \
      -print_final_stats=1 -artifact_prefix="$build/artifacts/$t-" \
      "$corpus" "$root/tests/fuzz/seeds/$t"; then
    echo "!! $t failed; see $build/artifacts/" >&2
    status=1
  fi
done
exit $status
