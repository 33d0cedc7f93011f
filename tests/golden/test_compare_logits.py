#!/usr/bin/env python3
"""Self-test of scripts/compare_logits.py on files it writes to a temporary folder.

Runs with plain python3 (no pytest needed; pytest also collects the test_* functions):
  python3 tests/golden/test_compare_logits.py
Each case builds a fresh random reference (odd sizes), derives "ours" from it with a known
perturbation, and checks the exit status and the printed max_abs against the perturbation itself.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "compare_logits.py"


def run(*args: str) -> tuple[int, str]:
    p = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def printed(out: str, key: str) -> float:
    m = re.search(rf"{key}\s+([0-9.e+-]+)", out)
    assert m, out
    return float(m.group(1))


def make_ref(rng: np.random.Generator, T: int = 13, V: int = 317) -> np.ndarray:
    ref = rng.normal(0.0, 3.0, size=(T, V)).astype(np.float32)
    # Give every row a clear winner so argmax is well defined.
    ref[np.arange(T), rng.integers(0, V, size=T)] += 30.0
    return ref


def write(tmp: Path, name: str, tensors: dict) -> Path:
    p = tmp / name
    save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, str(p))
    return p


def test_all() -> None:
    rng = np.random.default_rng()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        ref = make_ref(rng)
        T, V = ref.shape
        toks = rng.integers(0, V, size=T).astype(np.int32)
        rpath = write(tmp, "ref.safetensors", {"logits_1": ref, "tokens_1": toks})

        # identical -> pass, zero error
        p = write(tmp, "same.safetensors", {"logits": ref.copy(), "tokens": toks})
        rc, out = run(str(p), str(rpath), "--ref-tensor", "logits_1")
        assert rc == 0 and printed(out, "max_abs") == 0.0, out

        # small noise well under tolerance -> pass; reported max_abs equals the true one
        noise = rng.normal(0.0, 1e-5, size=ref.shape).astype(np.float32)
        ours = ref + noise
        true_max = float(np.abs(ours.astype(np.float64) - ref.astype(np.float64)).max())
        p = write(tmp, "small.safetensors", {"logits": ours, "tokens": toks})
        rc, out = run(str(p), str(rpath), "--ref-tensor", "logits_1")
        assert rc == 0, out
        assert abs(printed(out, "max_abs") - true_max) <= 1e-3 * true_max, (out, true_max)

        # one element off by 0.5 at a non-argmax place -> fails the default 1e-3, passes --tol 1
        ours = ref.copy()
        t, v = 5, int((ref[5].argmax() + 7) % V)
        ours[t, v] += 0.5
        p = write(tmp, "bump.safetensors", {"logits": ours})
        rc, out = run(str(p), str(rpath), "--ref-tensor", "logits_1")
        assert rc == 1 and "FAIL" in out, out
        assert abs(printed(out, "max_abs") - 0.5) < 1e-6, out
        assert f"worst position {t}, vocab id {v}" in out, out
        rc, out = run(str(p), str(rpath), "--ref-tensor", "logits_1", "--tol", "1")
        assert rc == 0, out

        # argmax flip with a margin far larger than the error elsewhere -> fails even with a loose tolerance
        ours = ref.copy()
        t = 3
        second = int(np.argsort(ref[t])[-2])
        ours[t, second] = ref[t].max() + 1.0
        p = write(tmp, "flip.safetensors", {"logits": ours})
        rc, out = run(str(p), str(rpath), "--ref-tensor", "logits_1", "--tol", "0.1")
        assert rc == 1 and "FLIPS at [3]" in out, out

        # near-tie: reference leaders 4e-5 apart (many ulps at ~30), ours swaps them -> tolerated unless --strict-argmax
        tie_ref = ref.copy()
        top = int(tie_ref[0].argmax())
        other = (top + 1) % V
        tie_ref[0, other] = tie_ref[0, top] - 4e-5
        tpath = write(tmp, "tie_ref.safetensors", {"logits": tie_ref})
        ours = tie_ref.copy()
        ours[0, other] = tie_ref[0, top] + 4e-5
        p = write(tmp, "tie.safetensors", {"logits": ours})
        rc, out = run(str(p), str(tpath))
        assert rc == 0 and "near-tie flips at [0]" in out, out
        rc, out = run(str(p), str(tpath), "--strict-argmax")
        assert rc == 1, out

        # wrong tokens -> fail; shape mismatch, missing tensor, NaN -> errors
        p = write(tmp, "badtok.safetensors", {"logits": ref.copy(), "tokens": toks[::-1].copy()})
        rc, out = run(str(p), str(rpath), "--ref-tensor", "logits_1")
        assert rc == 1 and "token ids differ" in out, out
        p = write(tmp, "short.safetensors", {"logits": ref[:-1].copy()})
        rc, out = run(str(p), str(rpath), "--ref-tensor", "logits_1")
        assert rc == 2 and "shape mismatch" in out, out
        rc, out = run(str(p), str(rpath), "--ref-tensor", "logits_9")
        assert rc == 2 and "no tensor 'logits_9'" in out, out
        nan = ref.copy()
        nan[2, 2] = np.nan
        p = write(tmp, "nan.safetensors", {"logits": nan})
        rc, out = run(str(p), str(rpath), "--ref-tensor", "logits_1", "--tol", "1e9")
        assert rc == 1, out
        rc, out = run(str(tmp / "missing.safetensors"), str(rpath))
        assert rc == 2 and "no such file" in out, out
        (tmp / "junk.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json")
        rc, out = run(str(tmp / "junk.safetensors"), str(rpath))
        assert rc == 2 and "cannot read" in out, out

        # --show-tokens prints the reference ids for voltinfer --tokens
        rc, out = run("--show-tokens", str(rpath), "--ref-tensor", "logits_decode_1")
        assert rc == 0 and out.strip() == ",".join(str(int(x)) for x in toks), out


if __name__ == "__main__":
    test_all()
    print("compare_logits self-test: OK")
