"""Golden comparison of the real binary against transformers (tests/golden/), under pytest.

- every fixture in every form (HF folder; GGUF f32 / f16 / q8_0 made by tests/golden/hf_to_gguf.py)
  through tests/golden/run_golden.py: prefill per sequence, --decode, -b 16, and -b 37 against HF's
  own chunked continuation; any failing comparison fails the test, with the comparison's report;
- sensitivity: a GGUF converted with one llama.cpp transform left out must FAIL the comparison,
  so a passing GGUF run really exercises the loader's un-permutation / head order / norm / ssm_a;
- the converter's llama layout against transformers' own GGUF loader (independent code);
- the self-test of scripts/compare_logits.py (tests/golden/test_compare_logits.py).
SmolLM2 skips when models/SmolLM2-135M-Instruct.Q4_1.gguf is absent; the f16/q8_0 forms and the
transformers checks skip when torch/transformers are not installed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from conftest import GOLDEN, load_module

sys.path.insert(0, str(GOLDEN))
import hf_to_gguf  # noqa: E402
import run_golden  # noqa: E402


def applicable() -> list[tuple[str, str]]:
    out = []
    for name in run_golden.fixture_names():
        for fmt in run_golden.FORMATS:
            if name == "smollm2_hf" and fmt != "hf":
                continue  # already a GGUF file
            out.append((name, fmt))
    return out


@pytest.mark.parametrize("name,fmt", applicable(), ids=lambda v: v)
def test_golden(voltinfer, tmp_path, name, fmt):
    results = run_golden.run_fixture(voltinfer, name, fmt, tmp_path)
    assert results, f"no comparisons for {name} [{fmt}]"
    if all(r.ok is None for r in results):
        pytest.skip("; ".join(r.line for r in results))
    failed = [r.line for r in results if r.ok is False]
    assert not failed, f"{len(failed)} of {len(results)} comparisons failed:\n" + "\n".join(failed)
    assert all(r.ok for r in results)


# Split over a tensor-parallel group of CPU ranks (--tp): the same comparisons against transformers,
# in the forms that cut differently — HF f32 (o_proj / down cut anywhere) and GGUF q8_0 (cut on the
# 32-value blocks, or kept in f32 off them) — and the real SmolLM2 GGUF (Q4_1, 3 KV heads over 3 ranks).
# Qwen3.5: GDN key heads with their value heads, in HF's grouped order and in the GGUF's tiled one;
# qwen35_b and qwen35_c have one KV head, which both ranks hold (as SmolLM2's 3 on 6 ranks, 2 each).
TP_CASES = [("llama_tiny", "hf", 2), ("qwen2_tiny", "hf", 2), ("qwen3_tiny", "hf", 2), ("qwen3_tiny", "gguf-q8_0", 2),
            ("llama_tiny", "gguf-f32", 2), ("smollm2_hf", "hf", 3), ("qwen35_a", "hf", 2), ("qwen35_a", "gguf-f32", 2),
            ("qwen35_a", "gguf-q8_0", 2), ("qwen35_b", "hf", 2), ("qwen35_c", "gguf-f32", 2), ("smollm2_hf", "hf", 6)]


@pytest.mark.parametrize("name,fmt,tp", TP_CASES, ids=lambda v: str(v))
def test_golden_tensor_parallel(voltinfer, tmp_path, monkeypatch, name, fmt, tp):
    monkeypatch.setattr(run_golden, "EXTRA_ARGS", ["--tp", str(tp)])
    results = run_golden.run_fixture(voltinfer, name, fmt, tmp_path, threads=2)
    assert results, f"no comparisons for {name} [{fmt}]"
    if all(r.ok is None for r in results):
        pytest.skip("; ".join(r.line for r in results))
    failed = [r.line for r in results if r.ok is False]
    assert not failed, f"{len(failed)} of {len(results)} comparisons failed with --tp {tp}:\n" + "\n".join(failed)


# (fixture, transform left out): each one is a real converter step our GGUF loader must undo or
# rely on; qwen35_c has H_v/H_k = 3 and odd sizes, qwen35_a H_v/H_k = 2 and a tied head.
BROKEN = [("llama_tiny", "rope_permute"), ("qwen35_c", "v_reorder"), ("qwen35_a", "v_reorder"),
          ("qwen35_a", "norm_plus_one"), ("qwen35_c", "neg_exp_a")]


@pytest.mark.parametrize("name,broken", BROKEN, ids=lambda v: v)
def test_gguf_missing_a_transform_fails(voltinfer, tmp_path, name, broken):
    folder = GOLDEN / name
    ref = folder / "reference.safetensors"
    model = tmp_path / "broken.gguf"
    hf_to_gguf.convert(folder, model, "f32", breaks=frozenset({broken}))
    case = run_golden.Case(run_golden.show_tokens(ref, "logits_2"), [], ref, "logits_2")
    r = run_golden.run_case(voltinfer, model, case, tmp_path / "ours.safetensors", run_golden.DEFAULT_TOL, 1,
                            f"{name}[broken {broken}]")
    assert r.ok is False, f"a GGUF without '{broken}' still matched the reference:\n{r.line}"


def test_layer_pattern_without_interval_is_refused(tmp_path):
    # qwen35_b: [full, linear, linear, full, linear] has no full_attention_interval.
    with pytest.raises(hf_to_gguf.Unsupported, match="cannot express"):
        hf_to_gguf.convert(GOLDEN / "qwen35_b", tmp_path / "b.gguf")
    assert not (tmp_path / "b.gguf").exists()


def test_llama_layout_matches_transformers_gguf_loader(tmp_path):
    """transformers' GGUF loader (its own un-permutation of attn_q/attn_k) must get back exactly
    the HF weights from our llama GGUF."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from safetensors.numpy import load_file
    transformers.logging.set_verbosity_error()
    hf_to_gguf.convert(GOLDEN / "llama_tiny", tmp_path / "llama_tiny.gguf", "f32")
    model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file="llama_tiny.gguf",
                                                              dtype=torch.float32)
    sd = model.state_dict()
    ref = load_file(str(GOLDEN / "llama_tiny" / "model.safetensors"))
    for k, v in ref.items():
        assert k in sd, k
        assert torch.equal(sd[k], torch.from_numpy(v)), f"{k} differs after transformers' GGUF load"


def test_gguf_byte_vocab_tokenizes(voltinfer, tmp_path):
    """With --byte-vocab the GGUF carries a usable tokenizer: 'the hen' -> t·h merge, e, space, h, e·n."""
    from conftest import run
    from safetensors.numpy import load_file
    model = tmp_path / "a.gguf"
    hf_to_gguf.convert(GOLDEN / "qwen35_a", model, "f32", byte_vocab=True)
    out = tmp_path / "o.safetensors"
    run(["logits", "-m", model, "-p", "the hen", "--out", out, "-t", "1"])
    letters = "etaoinshrdlucmfwypvbgkjqxz"
    pair = lambda a, b: 256 + letters.index(a) * 26 + letters.index(b)  # noqa: E731
    assert load_file(str(out))["tokens"].tolist() == [pair("t", "h"), ord("e"), ord(" "), ord("h"), pair("e", "n")]


def test_compare_logits_self_test():
    load_module(GOLDEN / "test_compare_logits.py", "golden_test_compare_logits").test_all()
