#!/usr/bin/env bash
# Installs the CUDA 11.8 toolkit Debian 12 ships in non-free (nvidia-cuda-toolkit), the one
# toolkit we can install that still targets sm_70 (V100), plus g++-11, the newest host
# compiler it accepts. Enables the contrib and non-free components of the existing Debian
# sources where they are missing. Download: about 1.6 GB (65 packages; 2.5 min on a cloud
# machine). Idempotent: does nothing when the toolkit is already there.
# Needs root, or sudo without a password.
#
# Build with it afterwards: scripts/build_cuda118.sh [BUILD_DIR]   (default build-cuda118)
set -euo pipefail

say() { echo "install_cuda118: $*"; }
die() { echo "install_cuda118: $*" >&2; exit 1; }

pkgs=(nvidia-cuda-toolkit g++-11)
installed() {
  for p in "${pkgs[@]}"; do
    [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] || return 1
  done
  local v
  v=$(/usr/bin/nvcc --version 2>/dev/null) || return 1
  grep -q 'release 11\.8' <<<"$v"
}
if installed; then
  say "already installed ($(/usr/bin/nvcc --version | sed -n 's/.*release \([0-9.]*\), \(V[0-9.]*\).*/CUDA \1, \2/p'), $(g++-11 --version | head -1))"
  exit 0
fi

# shellcheck disable=SC1091
. /etc/os-release 2>/dev/null || true
if [ "${ID:-}" != debian ] || [ "${VERSION_CODENAME:-}" != bookworm ]; then
  die "this installs Debian 12 (bookworm)'s CUDA 11.8 packages; this system is ${PRETTY_NAME:-unknown}"
fi
sudo=()
if [ "$(id -u)" -ne 0 ]; then
  sudo -n true 2>/dev/null || die "needs root for apt-get: run it as root or with passwordless sudo"
  sudo=(sudo -n)
fi

# Appends the components in $2.. to every line of file $1 that names Debian components and
# lacks them: deb822 'Components:' lines, or one-line 'deb URI SUITE COMPONENTS' lines of a
# Debian mirror. Changes the file only when something is missing.
enable_components() {
  local file=$1
  shift
  local tmp
  tmp=$(mktemp)
  awk -v want="$*" '
    function add(line,   n, i, w) {
      n = split(want, w, " ")
      for (i = 1; i <= n; i++)
        if (line !~ ("[ \t]" w[i] "([ \t]|$)")) line = line " " w[i]
      return line
    }
    /^Components:/ { print add($0); next }
    /^deb(-src)?[ \t]/ && /debian/ { print add($0); next }
    { print }' "$file" > "$tmp"
  if cmp -s "$file" "$tmp"; then
    rm -f "$tmp"
  else
    say "enabling ${*} in $file"
    "${sudo[@]}" cp "$tmp" "$file"
    rm -f "$tmp"
  fi
}
found=0
for f in /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list; do
  if [ -f "$f" ] && grep -qE '^(Components:|deb[ \t])' "$f"; then
    enable_components "$f" contrib non-free
    found=1
  fi
done
[ $found = 1 ] || die "no Debian apt sources found (/etc/apt/sources.list.d/debian.sources or /etc/apt/sources.list)"

log=$(mktemp)
trap 'rm -f "$log"' EXIT
export DEBIAN_FRONTEND=noninteractive
if ! "${sudo[@]}" apt-get update -qq >"$log" 2>&1; then
  tail -20 "$log" >&2
  die "apt-get update failed (output above)"
fi
policy=$(apt-cache policy nvidia-cuda-toolkit)  # (grep -q in a pipe would SIGPIPE it under pipefail)
if ! grep -q 'Candidate: [0-9]' <<<"$policy"; then
  die "apt offers no nvidia-cuda-toolkit even with contrib and non-free enabled (mirror or proxy?)"
fi
say "installing ${pkgs[*]} (about 1.6 GB download)"
if ! "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${pkgs[@]}" \
    >"$log" 2>&1; then
  tail -30 "$log" >&2
  die "apt-get install failed (output above)"
fi
installed || die "installed, but /usr/bin/nvcc does not report CUDA 11.8"
say "done: $(/usr/bin/nvcc --version | sed -n 's/.*release \([0-9.]*\), \(V[0-9.]*\).*/CUDA \1, \2/p')"
