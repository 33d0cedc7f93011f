#!/usr/bin/env bash
# One-time setup on a fresh Debian 12 machine: build dependencies, the default model,
# and a Release build in build/. Re-running it is cheap (everything is incremental).
#   scripts/setup.sh           runtime + build
#   scripts/setup.sh --test    also the test dependencies (Python packages, fuzzing toolchain,
#                              the CUDA 11.8 toolkit where apt can install it)
set -euo pipefail
cd "$(dirname "$0")/.."
with_test=0
[ "${1:-}" = "--test" ] && with_test=1

pkgs=(build-essential cmake ninja-build pkg-config
      libfmt-dev libspdlog-dev nlohmann-json3-dev libpcre2-dev libicu-dev libcli11-dev libcpp-httplib-dev
      libgtest-dev libgmock-dev libbenchmark-dev)
[ $with_test = 1 ] && pkgs+=(clang-14 libclang-rt-14-dev)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  sudo_cmd=""
  [ "$(id -u)" != 0 ] && sudo_cmd=sudo
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if [ $with_test = 1 ]; then
  python3 -m pip install --quiet --disable-pip-version-check -r scripts/requirements-test.txt
  # CUDA 11.8 (Debian non-free, ~1.6 GB), for the sm_70 compile in scripts/test.sh. Only where
  # apt can install it (Debian 12, root or sudo, the mirror reachable); otherwise test.sh skips it.
  if ! scripts/install_cuda118.sh; then
    echo "setup: CUDA 11.8 not installed (reason above): scripts/test.sh will skip the sm_70 build"
  fi
fi

scripts/get_default_model.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C build voltinfer $([ $with_test = 1 ] && echo all)
