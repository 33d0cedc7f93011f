#!/usr/bin/env bash
# Installs the CUDA 11.8 toolkit Debian 12 ships in non-free (nvidia-cuda-toolkit), the one
# toolkit we can install that still targets sm_70 (V100), plus g++-11, a host compiler it
# accepts. Enables the contrib and non-free components of the existing Debian sources.
# Download: about 1.6 GB (58 packages, checked 2026-11-29 with apt-get --print-uris).
#
# Build with it afterwards (Debian's ptxas must come before CUDA 13's on PATH, or nvcc calls
# CUDA 13's ptxas and fails with "sm_70 is not defined"):
#   PATH=/usr/lib/nvidia-cuda-toolkit/bin:$PATH cmake -S . -B build-cuda118 -G Ninja -DVI_CUDA=ON \
#     -DCMAKE_CUDA_COMPILER=/usr/lib/nvidia-cuda-toolkit/bin/nvcc -DCMAKE_CUDA_HOST_COMPILER=g++-11 \
#     -DCMAKE_CUDA_ARCHITECTURES=70
#   PATH=/usr/lib/nvidia-cuda-toolkit/bin:$PATH ninja -C build-cuda118
set -euo pipefail

if [ "$(id -u)" -ne 0 ]; then
  echo "run as root (apt-get)" >&2
  exit 1
fi
src=/etc/apt/sources.list.d/debian.sources
if [ -f "$src" ]; then
  # deb822 sources: add the components to every Debian stanza that has only main.
  sed -i -E 's/^Components: main$/Components: main contrib non-free non-free-firmware/' "$src"
elif [ -f /etc/apt/sources.list ]; then
  # one-line sources: append the components to every Debian line that has only main.
  sed -i -E 's/^(deb .*debian[^ ]* [a-z-]+) main$/\1 main contrib non-free non-free-firmware/' /etc/apt/sources.list
else
  echo "no Debian apt sources found to enable contrib/non-free in" >&2
  exit 1
fi
apt-get update
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends nvidia-cuda-toolkit g++-11
/usr/lib/nvidia-cuda-toolkit/bin/nvcc --version | tail -2
