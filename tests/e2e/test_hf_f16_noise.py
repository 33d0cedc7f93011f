"""scripts/hf_f16_noise.py: transformers' own f16 error on the protocol of the GPU model test, the
evidence behind that test's f16 bounds (docs/GPU_TESTS.md, Tolerances). Runs on the CPU; skips
without torch/transformers."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from conftest import ROOT, load_module

SCRIPT = ROOT / "scripts" / "hf_f16_noise.py"


def load():
    return load_module(SCRIPT, "hf_f16_noise")


def test_error_measure_rows_and_non_finite():
    torch = pytest.importorskip("torch")
    m = load()
    ref = torch.tensor([[1.0, -4.0, 2.0], [0.5, 0.25, -0.5]])
    got = ref + torch.tensor([[0.0, 0.4, 0.0], [0.0, 0.0, 0.05]])
    # Row 0: 0.4 / 4; row 1: 0.05 / 0.5; the worst row counts.
    assert m.worst_rel(got, ref) == pytest.approx(0.1)
    assert m.worst_rel(ref, ref) == 0.0
    got[1, 2] = float("nan")
    assert m.worst_rel(got, ref) == math.inf


def test_one_draw_on_a_fixture(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    out = tmp_path / "noise.json"
    r = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--draws", "1", "--json", str(out),
                        "qwen35_b"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "qwen35_b: HF f16 against f32 over 1 draws" in r.stdout
    row = json.loads(out.read_text())["qwen35_b"][0]
    # f16 moves the logits (a run that compared f32 with itself would give 0), but its typical
    # step stays far inside the GPU test's median bound of 1e-2 (measured 2.5-3.0e-3 on this
    # fixture, 30 draws).
    assert 0 < row["decode_median"] < 1e-2
    assert row["decode_median"] <= row["decode_p90"] <= row["decode_worst"]
    assert 250 <= row["decode_worst_at"] < 520
    assert 0 < row["prefill"] < 5e-2


def test_unknown_fixture_or_empty_protocol_is_an_error():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    r = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--draws", "1", "no_such_fixture"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert "no golden fixture no_such_fixture" in r.stderr
    r = subprocess.run([sys.executable, str(SCRIPT), "--prefill", "41", "--end", "41", "qwen35_a"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "1 <= --prefill < --end" in r.stderr


def test_short_protocol_counts_every_prompt_row(tmp_path):
    """PrefillThenDecodeMatchesCpu's protocol (37-token prompt, all its rows, then 4 steps)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    out = tmp_path / "short.json"
    args = [sys.executable, str(SCRIPT), "--device", "cpu", "--draws", "2", "--prefill", "37", "--end", "41",
            "--json", str(out), "qwen35_a"]
    r = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    last_row = json.loads(out.read_text())["qwen35_a"]
    r = subprocess.run(args + ["--all-prefill-rows"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    all_rows = json.loads(out.read_text())["qwen35_a"]
    for one, every in zip(last_row, all_rows):
        # Same tokens (same seed): the decode steps agree exactly, and the prompt's worst row over
        # all 37 rows is at least its last row's error.
        assert every["decode_worst"] == one["decode_worst"]
        assert 37 <= every["decode_worst_at"] < 41
        assert every["prefill"] >= one["prefill"] > 0
