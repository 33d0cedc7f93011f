"""Broken model folders fail at load with a message naming the file and the tensor, and an
over-long prompt is a clear error — for the Qwen3.5 hybrid and the llama family alike."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from conftest import GOLDEN, run


def copy_fixture(name: str, tmp_path, edit) -> str:
    src = GOLDEN / name
    dst = tmp_path / name
    dst.mkdir()
    shutil.copy(src / "config.json", dst / "config.json")
    tensors = load_file(str(src / "model.safetensors"))
    edit(tensors)
    save_file(tensors, str(dst / "model.safetensors"))
    return str(dst)


@pytest.mark.parametrize("fixture,tensor", [
    ("qwen35_a", "model.layers.0.linear_attn.in_proj_qkv.weight"),
    ("qwen35_a", "model.layers.3.self_attn.q_norm.weight"),
    ("qwen35_a", "model.layers.1.linear_attn.A_log"),
    ("llama_tiny", "model.layers.2.mlp.down_proj.weight"),
])
def test_missing_tensor_is_named(voltinfer, tmp_path, fixture, tensor):
    model = copy_fixture(fixture, tmp_path, lambda t: t.pop(tensor))
    out = run(["logits", "-m", model, "--tokens", "1,2,3", "--out", tmp_path / "o.safetensors"], check=False)
    assert out.returncode != 0
    assert tensor in out.stderr and "missing" in out.stderr, out.stderr


@pytest.mark.parametrize("fixture,tensor", [
    ("qwen35_a", "model.layers.0.linear_attn.out_proj.weight"),
    ("qwen35_c", "model.layers.1.self_attn.q_proj.weight"),
    ("qwen35_c", "model.layers.0.linear_attn.conv1d.weight"),
])
def test_wrong_shape_is_named_with_both_shapes(voltinfer, tmp_path, fixture, tensor):
    def shrink(t):
        w = t[tensor]
        t[tensor] = np.ascontiguousarray(w[: w.shape[0] - 1])
    model = copy_fixture(fixture, tmp_path, shrink)
    out = run(["logits", "-m", model, "--tokens", "1,2,3", "--out", tmp_path / "o.safetensors"], check=False)
    assert out.returncode != 0
    assert tensor in out.stderr and "shape" in out.stderr, out.stderr


def test_truncated_weights_file_is_an_error_not_a_crash(voltinfer, tmp_path):
    dst = tmp_path / "cut"
    shutil.copytree(GOLDEN / "qwen35_a", dst)
    data = (dst / "model.safetensors").read_bytes()
    (dst / "model.safetensors").write_bytes(data[: len(data) // 2])
    out = run(["logits", "-m", dst, "--tokens", "1,2", "--out", tmp_path / "o.safetensors"], check=False)
    assert out.returncode == 1, out.stderr
    assert "model.safetensors" in out.stderr


def test_prompt_over_context_is_a_clear_error_for_qwen35(voltinfer, tmp_path):
    tokens = ",".join(str(i % 200 + 1) for i in range(40))
    out = run(["logits", "-m", GOLDEN / "qwen35_a", "--tokens", tokens, "-c", "16",
               "--out", tmp_path / "o.safetensors"], check=False)
    assert out.returncode != 0
    assert "context" in out.stderr and "16" in out.stderr, out.stderr


def test_token_outside_vocabulary_is_rejected(voltinfer, tmp_path):
    out = run(["logits", "-m", GOLDEN / "qwen35_a", "--tokens", "1,99999",
               "--out", tmp_path / "o.safetensors"], check=False)
    assert out.returncode != 0
    assert "99999" in out.stderr and "vocabulary" in out.stderr, out.stderr
