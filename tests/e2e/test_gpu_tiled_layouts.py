"""On a GPU only (VOLTINFER_GPU=1 and a CUDA build): the tiled layouts the native profile makes
from Q4_K and Q8_0 matrices of whole 16-row tiles (Q4_KT, Q8_0T; and for Q4_K's gate|up stack
Q4_KTS, gate and up rows paired in each tile) against the row layouts (Q4_KR, Q8_0R: VI_TILED=0)
and the CPU, end to end.

A 2-layer Qwen3.5 of the 0.8b preset's widths (hidden 1024: its projections and the head take
the tiled layout; Q4_K's FFN down, K = 3584, stays in the file layout) gives the same logits in
both layouts bit for bit, the tiled kernels adding the same sums in the same order, in the decode
path (one token a step: the tensor-core GEMVs), in steps of 4 tokens (-b 4: T = 4) and as one
prompt (T = 11: the GEMM path on dequantized tiles); and the CPU's logits within the golden
tests' GPU tolerance (max |difference| / row max <= 3e-2, f16 activations). The bit-for-bit
comparison runs both layouts with the same ops (VI_DEFER_NORM=0): the deferred norm
(ops/deferred_norm.h) fuses only on the tiled layouts and rounds in other places, so the
default tiled path is held to the CPU tolerance instead.

    VOLTINFER_GPU=1 python3 -m pytest tests/e2e/test_gpu_tiled_layouts.py    (or run this file)
"""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import BIN, run  # noqa: E402

pytestmark = pytest.mark.skipif(os.environ.get("VOLTINFER_GPU") != "1", reason="needs a GPU (VOLTINFER_GPU=1)")

TOKENS = "5,300,17,901,44,260,3,77,512,1000,9"
LAYOUTS = {"q4_k": ("q4_kt", "q4_kr"), "q8_0": ("q8_0t", "q8_0r")}


def check_tiled_layout(tmp: Path, dtype: str) -> None:
    tiled_name, row_name = LAYOUTS[dtype]
    model = tmp / f"{dtype}.gguf"
    run(["make-model", "--arch", "qwen3_5", "--preset", "0.8b", "--dtype", dtype, "--seed", "3", "--layers", "2",
         "--vocab", "4096", "-o", model])

    def logits(name: str, extra: list[str], env: dict | None = None) -> tuple[np.ndarray, str]:
        out = tmp / f"{dtype}-{name}.safetensors"
        proc = run(["logits", "-m", model, "--tokens", TOKENS, "--out", out, "--log-level", "debug", *extra], env=env)
        return load_file(str(out))["logits"], proc.stderr

    cpu, _ = logits("cpu", ["--device", "cpu"])
    same_ops = {"VI_DEFER_NORM": "0"}
    for mode, extra in [("decode", ["--decode"]), ("steps of 4", ["-b", "4"]), ("prompt", [])]:
        tiled, log_t = logits(f"tiled-{mode}", ["--device", "cuda", *extra], {"VI_TILED": "1", **same_ops})
        rows, log_r = logits(f"rows-{mode}", ["--device", "cuda", *extra], {"VI_TILED": "0", **same_ops})
        default, _ = logits(f"default-{mode}", ["--device", "cuda", *extra], {"VI_TILED": "1"})
        assert f"-> {tiled_name}" in log_t and f"-> {row_name}" in log_r and f"-> {tiled_name}" not in log_r, \
            "layouts not as asked"
        if dtype == "q4_k":
            assert "ffn_gate_up.weight [7168, 1024]: q4_k -> q4_kts" in log_t, "the gate|up stack is not paired"
        np.testing.assert_array_equal(tiled, rows, err_msg=f"{dtype} {mode}: {tiled_name} and {row_name} logits differ")
        err = float((np.abs(tiled - cpu).max(axis=1) / np.abs(cpu).max(axis=1)).max())
        err_default = float((np.abs(default - cpu).max(axis=1) / np.abs(cpu).max(axis=1)).max())
        print(f"{dtype} {mode}: {tiled_name} == {row_name} bit for bit; against the CPU max |diff| / row max = "
              f"{err:.2e}, {err_default:.2e} with the deferred norm")
        assert err <= 3e-2, f"{dtype} {mode}: {err} against the CPU"
        assert err_default <= 3e-2, f"{dtype} {mode}: {err_default} against the CPU with the deferred norm"


@pytest.mark.parametrize("dtype", sorted(LAYOUTS))
def test_tiled_layout_matches_row_layout_and_cpu(tmp_path, dtype):
    if not BIN.exists():
        pytest.fail(f"{BIN} is missing: build first")
    check_tiled_layout(tmp_path, dtype)


if __name__ == "__main__":
    for dt in sorted(LAYOUTS):
        with tempfile.TemporaryDirectory() as d:
            check_tiled_layout(Path(d), dt)
    print("ok")
