"""A Q4_K Qwen3.5 against transformers (scripts/golden_q4k.sh): the one golden fixture whose rows
the Q4_K GEMVs take (qwen35_k, hidden 1024), built on demand (too large to commit) as a Q4_K GGUF
with reference logits computed by transformers from the values stored in that file.

- CPU: the 70-token sequence as one prompt, token by token and in calls of 4, at the fp32
  tolerance (1e-3 of the row max). Checks the GGUF's Q4_K blocks, their reading and the model.
- GPU (VOLTINFER_GPU=1, a CUDA build): the same at the GPU golden tolerance (3e-2) with f16
  activations in both kernel profiles; with --int8-activations (opt-in) at 6e-2, the int8 KV
  cache's golden tolerance (measured 3.1e-2 on an H200, docs/PERFORMANCE.md).
Skips when torch/transformers are not installed (the fixture needs them).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from conftest import BIN, ROOT

SCRIPT = ROOT / "scripts" / "golden_q4k.sh"


@pytest.fixture(scope="module")
def q4k_dir(tmp_path_factory) -> Path:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    d = tmp_path_factory.mktemp("q4k")
    proc = subprocess.run([str(SCRIPT), "make", str(d)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"golden_q4k.sh make failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    assert (d / "q4k.gguf").stat().st_size > 1_000_000 and (d / "ref.safetensors").exists()
    return d


def check(q4k_dir: Path, tol: str, *extra: str) -> str:
    proc = subprocess.run([str(SCRIPT), "run", str(q4k_dir), str(BIN), tol, "--", *extra], capture_output=True,
                          text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"Q4_K golden check failed ({' '.join(extra) or 'cpu'}):\n{out}"
    assert out.count("PASS") == 3, out  # prompt, decode, calls of 4
    return out


def test_q4k_on_the_cpu(q4k_dir):
    check(q4k_dir, "1e-3")


gpu = pytest.mark.skipif(os.environ.get("VOLTINFER_GPU") != "1", reason="needs a GPU (VOLTINFER_GPU=1)")


@gpu
@pytest.mark.parametrize("profile", ["native", "volta"])
def test_q4k_on_the_gpu(q4k_dir, profile):
    check(q4k_dir, "3e-2", "--device", "cuda", "--kernel-profile", profile)


@gpu
def test_q4k_on_the_gpu_with_int8_activations(q4k_dir):
    check(q4k_dir, "6e-2", "--device", "cuda", "--kernel-profile", "native", "--int8-activations")
