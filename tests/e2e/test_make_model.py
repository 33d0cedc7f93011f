"""`voltinfer make-model`: random models of real shapes, checked from the outside.

- every (arch, format, dtype) loads in voltinfer and gives finite, varying logits;
- same seed -> same bytes (whatever the thread count), other seed -> other bytes;
- the GGUF reads with the PyPI `gguf` package (every tensor dequantizes, llama.cpp's
  metadata keys are there with llama.cpp's types, GPT-2 byte tokens first);
- the GGUF holds exactly the llama.cpp converter's transform of the safetensors model of the
  same seed (v-head re-tiling, +1 on norms but not ssm_norm, ssm_a = -exp(A_log), conv
  squeeze, llama q/k interleave) — re-derived here in numpy from the converter's formulas;
- both formats of one seed give the same logits in voltinfer, and the safetensors folder
  gives the same logits and tokens in Hugging Face transformers;
- bad flags are clear errors.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from conftest import run

gguf = pytest.importorskip("gguf")
from safetensors.numpy import load_file  # noqa: E402

GGUF_DTYPES = ["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q4_k", "q5_k", "q6_k"]
ST_DTYPES = ["f32", "f16", "bf16"]
TOKENS = "5,300,17,901,44,260,3,77,512,1000,9"


def make(tmp: Path, arch: str, fmt: str = "gguf", dtype: str = "f16", seed: int = 1, preset: str = "tiny",
         extra: list[str] | None = None, name: str | None = None) -> Path:
    out = tmp / (name or f"{arch}-{preset}-{dtype}-{seed}{'.gguf' if fmt == 'gguf' else ''}")
    run(["make-model", "--arch", arch, "--preset", preset, "--dtype", dtype, "--format", fmt, "--seed", seed,
         "-o", out, *(extra or [])])
    return out


def logits(model: Path, tmp: Path, tokens: str = TOKENS, extra: list[str] | None = None) -> np.ndarray:
    out = tmp / f"logits-{hashlib.md5(str(model).encode()).hexdigest()}.safetensors"
    run(["logits", "-m", model, "--tokens", tokens, "--out", out, *(extra or [])])
    return load_file(str(out))["logits"]


def check_logits(lg: np.ndarray, n_vocab: int) -> None:
    assert lg.shape == (len(TOKENS.split(",")), n_vocab)
    assert np.isfinite(lg).all()
    # Random weights through every layer: logits spread over the vocabulary (std ~3 by
    # construction), and differ between positions.
    assert (lg.std(axis=1) > 0.3).all(), lg.std(axis=1)
    assert np.abs(lg[1:] - lg[:-1]).max(axis=1).min() > 1e-2


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---- every arch / format / dtype loads and runs ----

@pytest.mark.parametrize("arch", ["qwen3_5", "llama"])
@pytest.mark.parametrize("dtype", GGUF_DTYPES)
def test_gguf_loads_and_runs(voltinfer, tmp_path, arch, dtype):
    m = make(tmp_path, arch, "gguf", dtype)
    check_logits(logits(m, tmp_path), 1024)
    out = run(["generate", "-m", m, "-p", "hello world", "-n", "4", "--temp", "0"])
    assert out.stdout.startswith("hello world")


@pytest.mark.parametrize("arch", ["qwen3_5", "llama"])
@pytest.mark.parametrize("dtype", ST_DTYPES)
def test_safetensors_loads_and_runs(voltinfer, tmp_path, arch, dtype):
    m = make(tmp_path, arch, "safetensors", dtype)
    assert {p.name for p in m.iterdir()} == {"config.json", "model.safetensors", "tokenizer.json",
                                             "tokenizer_config.json"}
    check_logits(logits(m, tmp_path), 1024)
    out = run(["generate", "-m", m, "-p", "hello world", "-n", "4", "--temp", "0"])
    assert out.stdout.startswith("hello world")


def test_decode_path_matches_prefill(voltinfer, tmp_path):
    # The GDN recurrent state and KV cache see the same random model token by token.
    m = make(tmp_path, "qwen3_5", "gguf", "f32")
    a = logits(m, tmp_path)
    b = logits(m, tmp_path, extra=["--decode"])
    np.testing.assert_allclose(a, b, atol=2e-3 * a.std())


# ---- determinism ----

@pytest.mark.parametrize("fmt,dtype", [("gguf", "q4_k"), ("gguf", "f16"), ("safetensors", "bf16")])
def test_same_seed_same_bytes_other_seed_other_bytes(voltinfer, tmp_path, fmt, dtype):
    a = make(tmp_path, "qwen3_5", fmt, dtype, seed=11, name="a", extra=["-t", "1"])
    b = make(tmp_path, "qwen3_5", fmt, dtype, seed=11, name="b", extra=["-t", "2"])
    c = make(tmp_path, "qwen3_5", fmt, dtype, seed=12, name="c")
    fa, fb, fc = (p if fmt == "gguf" else p / "model.safetensors" for p in (a, b, c))
    assert sha(fa) == sha(fb)
    assert sha(fa) != sha(fc)
    assert fa.stat().st_size == fc.stat().st_size


# ---- the GGUF as llama.cpp and gguf-py see it ----

def field(r, key):
    f = r.fields[key]
    if f.types[0] == gguf.GGUFValueType.ARRAY:
        return f.types, [f.parts[i] for i in f.data]
    return f.types, f.parts[f.data[0]]


def bytes_to_unicode() -> list[str]:
    """GPT-2's byte -> printable character table (as published with GPT-2's encoder)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return [table[b] for b in range(256)]


QWEN_U32_KEYS = ["context_length", "embedding_length", "block_count", "feed_forward_length",
                 "attention.head_count", "attention.head_count_kv", "attention.key_length",
                 "attention.value_length", "rope.dimension_count", "ssm.conv_kernel", "ssm.state_size",
                 "ssm.group_count", "ssm.time_step_rank", "ssm.inner_size", "full_attention_interval",
                 "nextn_predict_layers"]


@pytest.mark.parametrize("dtype", GGUF_DTYPES)
def test_gguf_reads_with_gguf_py(voltinfer, tmp_path, dtype):
    m = make(tmp_path, "qwen3_5", "gguf", dtype)
    r = gguf.GGUFReader(str(m))
    U32, F32 = gguf.GGUFValueType.UINT32, gguf.GGUFValueType.FLOAT32
    assert bytes(field(r, "general.architecture")[1]).decode() == "qwen35"
    for k in QWEN_U32_KEYS:  # llama.cpp's loader checks the value type, not only the key
        types, v = field(r, "qwen35." + k)
        assert types == [U32], (k, types)
    assert field(r, "qwen35.block_count")[1][0] == 4 + 1  # main layers + the MTP block
    assert field(r, "qwen35.nextn_predict_layers")[1][0] == 1
    assert field(r, "qwen35.ssm.inner_size")[1][0] == 8 * 32  # H_v * d_v
    assert field(r, "qwen35.ssm.state_size")[1][0] == 64  # d_k
    for k in ["attention.layer_norm_rms_epsilon", "rope.freq_base"]:
        assert field(r, "qwen35." + k)[0] == [F32]
    assert [int(x[0]) for x in field(r, "qwen35.rope.dimension_sections")[1]] == [3, 3, 2, 0]
    assert bytes(field(r, "tokenizer.ggml.model")[1]).decode() == "gpt2"
    toks = [bytes(t).decode() for t in field(r, "tokenizer.ggml.tokens")[1]]
    assert len(toks) == 1024 and len(set(toks)) == 1024
    assert toks[:256] == bytes_to_unicode()
    assert field(r, "tokenizer.ggml.eos_token_id")[1][0] < 1024

    names = {t.name for t in r.tensors}
    assert "output.weight" in names and "blk.4.nextn.eh_proj.weight" in names
    assert "blk.3.attn_q.weight" in names and "blk.0.ssm_a" in names
    for t in r.tensors:
        x = gguf.quants.dequantize(t.data, t.tensor_type)
        assert x.size == int(np.prod(t.shape)), t.name
        assert np.isfinite(x).all(), t.name
        big = len(t.shape) == 2 and "conv1d" not in t.name
        want = getattr(gguf.GGMLQuantizationType, dtype.upper()) if big else gguf.GGMLQuantizationType.F32
        assert t.tensor_type == want, (t.name, t.tensor_type)
    a = {t.name: t for t in r.tensors}["blk.0.ssm_a"]
    assert (gguf.quants.dequantize(a.data, a.tensor_type) < -0.99).all()  # -exp(A_log), A >= 1


def test_gguf_tied_preset_and_no_mtp(voltinfer, tmp_path):
    # 0.8b shapes cut to 2 layers: tied head (no output.weight), no MTP when asked.
    m = make(tmp_path, "qwen3_5", "gguf", "q8_0", preset="0.8b",
             extra=["--layers", "2", "--vocab", "1100", "--no-mtp"])
    r = gguf.GGUFReader(str(m))
    names = {t.name for t in r.tensors}
    assert "output.weight" not in names
    assert not any("nextn" in n for n in names)
    assert field(r, "qwen35.block_count")[1][0] == 2
    assert "qwen35.nextn_predict_layers" not in r.fields
    emb = {t.name: t for t in r.tensors}["token_embd.weight"]
    assert list(emb.shape) == [1024, 1100]  # ggml order: [hidden, vocab]
    check_logits(logits(m, tmp_path), 1100)


def test_row_width_fallback(voltinfer, tmp_path):
    # SmolLM2-135M shapes: 576-wide rows are not whole Q4_K blocks; they fall back to Q8_0.
    m = make(tmp_path, "llama", "gguf", "q4_k", preset="135m", extra=["--layers", "2", "--vocab", "1200"])
    r = gguf.GGUFReader(str(m))
    types = {t.name: t.tensor_type for t in r.tensors}
    assert types["blk.0.attn_q.weight"] == gguf.GGMLQuantizationType.Q8_0  # 576 columns
    assert types["blk.0.ffn_down.weight"] == gguf.GGMLQuantizationType.Q4_K  # 1536 columns
    check_logits(logits(m, tmp_path), 1200)


# ---- GGUF == llama.cpp converter(safetensors) for one seed ----

def reorder_v_heads(x: np.ndarray, dim: int, n_k: int, r: int, width: int) -> np.ndarray:
    """llama.cpp's converter: view `dim` as [n_k, r, width] and swap the first two axes."""
    shape = list(x.shape)
    y = x.reshape(shape[:dim] + [n_k, r, width] + shape[dim + 1:])
    return np.swapaxes(y, dim, dim + 1).reshape(shape)


def llama_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's converter for llama q/k: interleave the two RoPE halves of each head."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


QWEN_LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "post_attention_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight", "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight", "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight", "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight", "linear_attn.in_proj_qkv.weight": "attn_qkv.weight",
    "linear_attn.in_proj_z.weight": "attn_gate.weight", "linear_attn.in_proj_b.weight": "ssm_beta.weight",
    "linear_attn.in_proj_a.weight": "ssm_alpha.weight", "linear_attn.conv1d.weight": "ssm_conv1d.weight",
    "linear_attn.dt_bias": "ssm_dt.bias", "linear_attn.A_log": "ssm_a", "linear_attn.norm.weight": "ssm_norm.weight",
    "linear_attn.out_proj.weight": "ssm_out.weight",
}
LLAMA_LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight", "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight", "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
}
MTP_NAMES = {"mtp.fc.weight": "nextn.eh_proj.weight", "mtp.pre_fc_norm_embedding.weight": "nextn.enorm.weight",
             "mtp.pre_fc_norm_hidden.weight": "nextn.hnorm.weight", "mtp.norm.weight": "nextn.shared_head_norm.weight"}

MTP_INPUT_NORMS = {"mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight"}


def convert_like_llama_cpp(hf: dict[str, np.ndarray], cfg: dict) -> dict[str, np.ndarray]:
    """HF tensors -> the GGUF tensors llama.cpp's converter would write (f32)."""
    qwen = cfg["model_type"] == "qwen3_5_text"
    L = cfg["num_hidden_layers"]
    out = {}
    for name, w in hf.items():
        w = w.astype(np.float32)
        if name == "model.embed_tokens.weight":
            g = "token_embd.weight"
        elif name == "model.norm.weight":
            g = "output_norm.weight"
        elif name == "lm_head.weight":
            g = "output.weight"
        elif name in MTP_NAMES:
            g = f"blk.{L}." + MTP_NAMES[name]
        else:
            parts = name.split(".")
            if parts[0] == "mtp":  # mtp.layers.j.<rest>
                blk, rest = L + int(parts[2]), ".".join(parts[3:])
            else:  # model.layers.i.<rest>
                blk, rest = int(parts[2]), ".".join(parts[3:])
            g = f"blk.{blk}." + (QWEN_LAYER_NAMES if qwen else LLAMA_LAYER_NAMES)[rest]
            if qwen and rest.startswith("linear_attn."):
                n_k, n_v = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
                dv, key2 = cfg["linear_value_head_dim"], 2 * n_k * cfg["linear_key_head_dim"]
                r = n_v // n_k
                if rest.endswith("conv1d.weight"):
                    w = w.squeeze(1)
                if rest.endswith(("in_proj_qkv.weight", "conv1d.weight")):
                    w = np.concatenate([w[:key2], reorder_v_heads(w[key2:], 0, n_k, r, dv)])
                elif rest.endswith("in_proj_z.weight"):
                    w = reorder_v_heads(w, 0, n_k, r, dv)
                elif rest.endswith(("in_proj_b.weight", "in_proj_a.weight", "dt_bias", "A_log")):
                    w = reorder_v_heads(w, 0, n_k, r, 1)
                elif rest.endswith("out_proj.weight"):
                    w = reorder_v_heads(w, 1, n_k, r, dv)
                if rest.endswith("A_log"):
                    w = -np.exp(w.astype(np.float64)).astype(np.float32)
            if not qwen and rest == "self_attn.q_proj.weight":
                w = llama_permute(w, cfg["num_attention_heads"])
            if not qwen and rest == "self_attn.k_proj.weight":
                w = llama_permute(w, cfg["num_key_value_heads"])
        # Qwen3.5's (1 + w) norms: the converter adds the 1, except for the GDN gated norm;
        # the MTP input norms get it too (MODEL_QWEN35.md §3.3), though their names end otherwise.
        one_plus_w = name.endswith("norm.weight") or name in MTP_INPUT_NORMS
        if qwen and one_plus_w and not name.endswith("linear_attn.norm.weight"):
            w = w + np.float32(1)
        out[g] = w
    return out


@pytest.mark.parametrize("arch", ["qwen3_5", "llama"])
def test_gguf_is_the_converter_output_of_the_safetensors_model(voltinfer, tmp_path, arch):
    import json
    st = make(tmp_path, arch, "safetensors", "f32", seed=5)
    gg = make(tmp_path, arch, "gguf", "f32", seed=5)
    cfg = json.loads((st / "config.json").read_text())
    want = convert_like_llama_cpp(load_file(str(st / "model.safetensors")), cfg)
    r = gguf.GGUFReader(str(gg))
    got = {t.name: gguf.quants.dequantize(t.data, t.tensor_type) for t in r.tensors}
    assert set(got) == set(want)
    for name, w in want.items():
        assert got[name].shape == w.shape, name
        np.testing.assert_allclose(got[name], w, rtol=1e-6, atol=0, err_msg=name)


@pytest.mark.parametrize("arch", ["qwen3_5", "llama"])
def test_gguf_and_safetensors_of_one_seed_agree_in_voltinfer(voltinfer, tmp_path, arch):
    st = make(tmp_path, arch, "safetensors", "f32", seed=3)
    gg = make(tmp_path, arch, "gguf", "f32", seed=3)
    a, b = logits(st, tmp_path), logits(gg, tmp_path)
    # Same f32 weights, different layouts and norm/decay encodings: fp32 rounding only.
    np.testing.assert_allclose(a, b, atol=1e-3 * a.std(), rtol=0)


# ---- the safetensors folder in Hugging Face transformers ----

@pytest.mark.parametrize("arch", ["qwen3_5", "llama"])
def test_safetensors_folder_matches_transformers(voltinfer, tmp_path, arch):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    st = make(tmp_path, arch, "safetensors", "f32", seed=9)
    model = transformers.AutoModelForCausalLM.from_pretrained(str(st), dtype=torch.float32,
                                                              attn_implementation="eager")
    model.eval()
    ids = [int(x) for x in TOKENS.split(",")]
    with torch.no_grad():
        ref = model(torch.tensor([ids])).logits[0].double().numpy()
    ours = logits(st, tmp_path)
    # fp32 engine vs fp32 PyTorch (different summation orders and GDN chunking).
    err = np.abs(ours - ref).max()
    assert err < 2e-3 * ref.std(), err
    assert (ours.argmax(axis=1) == ref.argmax(axis=1)).mean() >= 0.9

    tok = transformers.AutoTokenizer.from_pretrained(str(st))
    text = "hello world, the cat sat"
    out = tmp_path / "tok.safetensors"
    run(["logits", "-m", st, "-p", text, "--out", out])
    assert load_file(str(out))["tokens"].tolist() == tok(text)["input_ids"]


# ---- errors ----

def test_unknown_preset_is_a_clear_error(voltinfer, tmp_path):
    out = run(["make-model", "--arch", "qwen3_5", "--preset", "13b", "--seed", "1", "-o", tmp_path / "x.gguf"],
              check=False)
    assert out.returncode != 0
    assert "13b" in out.stderr and "27b" in out.stderr and "tiny" in out.stderr, out.stderr
    assert not (tmp_path / "x.gguf").exists()


def test_unknown_arch_is_a_clear_error(voltinfer, tmp_path):
    out = run(["make-model", "--arch", "mamba", "--preset", "tiny", "--seed", "1", "-o", tmp_path / "x.gguf"],
              check=False)
    assert out.returncode != 0
    assert "mamba" in out.stderr and "qwen3_5" in out.stderr and "llama" in out.stderr, out.stderr


@pytest.mark.parametrize("arch,args,words", [
    ("qwen3_5", ["--format", "safetensors", "--dtype", "q4_k"], ["safetensors", "q4_k"]),
    ("qwen3_5", ["--dtype", "q3_k"], ["q3_k"]),
    ("llama", ["--mtp"], ["MTP"]),
    ("qwen3_5", ["--vocab", "100"], ["--vocab", "100"]),
])
def test_bad_flags_are_clear_errors(voltinfer, tmp_path, arch, args, words):
    out = run(["make-model", "--arch", arch, "--preset", "tiny", "--seed", "1", "-o", tmp_path / "x", *args],
              check=False)
    assert out.returncode != 0
    for w in words:
        assert w in out.stderr, out.stderr
    assert not (tmp_path / "x").exists() or not any((tmp_path / "x").iterdir())


def test_not_enough_disk_space_is_refused_up_front(voltinfer, tmp_path):
    # llama 70b in f32 is ~280 GB: refused before anything is written.
    out = run(["make-model", "--arch", "llama", "--preset", "70b", "--dtype", "f32", "--seed", "1",
               "-o", tmp_path / "big.gguf"], check=False)
    assert out.returncode != 0
    assert "disk space" in out.stderr and "GB" in out.stderr, out.stderr
    assert list(tmp_path.iterdir()) == []


# ---- every preset's real shapes load (cut to one layer: the loader checks every shape) ----

PRESETS = [("qwen3_5", p) for p in ["0.8b", "2b", "4b", "9b", "27b"]] + \
          [("llama", p) for p in ["135m", "1b", "3b", "8b", "70b"]]


@pytest.mark.parametrize("arch,preset", PRESETS)
def test_every_preset_loads(voltinfer, tmp_path, arch, preset):
    # One main layer (GDN for qwen3_5) plus, for qwen3_5, the full-attention MTP block; Q4_0
    # because every real row width is a multiple of 32. Up to ~0.5 GB, deleted afterwards.
    m = make(tmp_path, arch, "gguf", "q4_0", preset=preset, extra=["--layers", "1", "--vocab", "1100"])
    try:
        r = gguf.GGUFReader(str(m))
        shapes = {t.name: [int(x) for x in t.shape] for t in r.tensors}
        if arch == "qwen3_5":
            assert "blk.1.attn_q.weight" in shapes and "blk.0.ssm_out.weight" in shapes
        check_logits(logits(m, tmp_path), 1100)
    finally:
        m.unlink()
