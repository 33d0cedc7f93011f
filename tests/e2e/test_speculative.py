"""Speculative decoding through the real binary, on a random Qwen3.5 made by `make-model` (tiny
preset, with its MTP head):

- the MTP head (`voltinfer logits --draft`) against a reference written here in torch from
  MODEL_QWEN35.md section 7.2 (fc over [enorm(embedding) | hnorm(hidden)], one gated
  full-attention block over the head's own cache, mtp.norm, the shared LM head), fed the final
  hidden states transformers computes for the same tokens (which are compared too);
- `generate --spec mtp` and `--spec ngram` print exactly what `--spec off` prints, greedy and
  sampled, from GGUF and HF files;
- a model without an MTP head refuses `--spec mtp` with a clear error.

Every CPU run also runs split over two ranks (`--tp 2`). With VOLTINFER_GPU=1 (a CUDA build on a
GPU machine) the same runs again with --device cuda in both kernel profiles; the head is then held
to the golden tests' GPU tolerance (3e-2 of the row max: f16 activations).
"""

from __future__ import annotations

import json
import os
import re

import pytest

from conftest import run

# cpu-tp2: the model (and its MTP head) split over two CPU ranks.
DEVICES = [[], ["--tp", "2"]]
DEVICE_IDS = ["cpu", "cpu-tp2"]
if os.environ.get("VOLTINFER_GPU") == "1":
    DEVICES += [["--device", "cuda", "--kernel-profile", "native"], ["--device", "cuda", "--kernel-profile", "volta"]]
    DEVICE_IDS += ["cuda-native", "cuda-volta"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, voltinfer):
    d = tmp_path_factory.mktemp("spec")
    run(["make-model", "--arch", "qwen3_5", "--preset", "tiny", "--seed", "11", "--dtype", "f32",
         "--format", "safetensors", "-o", d / "hf"])
    run(["make-model", "--arch", "qwen3_5", "--preset", "tiny", "--seed", "11", "--dtype", "q8_0",
         "-o", d / "q.gguf"])
    run(["make-model", "--arch", "qwen3_5", "--preset", "tiny", "--seed", "11", "--no-mtp",
         "-o", d / "nomtp.gguf"])
    return d


def rms1p(torch, x, w, eps):
    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + w.float())


def mtp_reference(torch, W, cfg, tokens, hidden):
    """Draft logits [T-1, V]: slot t from hidden[t] and tokens[t + 1], position t."""
    eps = cfg["rms_norm_eps"]
    d, hd = cfg["hidden_size"], cfg["head_dim"]
    Hq, Hkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    rot = int(hd * cfg["partial_rotary_factor"])
    theta = cfg["rope_parameters"]["rope_theta"]
    embed = W["model.embed_tokens.weight"].float()
    lm_head = W["lm_head.weight"].float() if "lm_head.weight" in W else embed
    T = len(tokens) - 1
    e = rms1p(torch, embed[torch.tensor(tokens[1:])], W["mtp.pre_fc_norm_embedding.weight"], eps)
    h = rms1p(torch, hidden[:T], W["mtp.pre_fc_norm_hidden.weight"], eps)
    x = torch.cat([e, h], dim=-1) @ W["mtp.fc.weight"].float().T
    p = "mtp.layers.0."
    n = rms1p(torch, x, W[p + "input_layernorm.weight"], eps)
    qg = (n @ W[p + "self_attn.q_proj.weight"].float().T).view(T, Hq, 2 * hd)
    q, gate = qg[..., :hd], qg[..., hd:].reshape(T, Hq * hd)
    k = (n @ W[p + "self_attn.k_proj.weight"].float().T).view(T, Hkv, hd)
    v = (n @ W[p + "self_attn.v_proj.weight"].float().T).view(T, Hkv, hd)
    q = rms1p(torch, q, W[p + "self_attn.q_norm.weight"], eps)
    k = rms1p(torch, k, W[p + "self_attn.k_norm.weight"], eps)
    # Partial NeoX RoPE on the first `rot` dims (text positions: every mrope section alike).
    inv = theta ** (-torch.arange(0, rot, 2, dtype=torch.float64) / rot)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    cos, sin = ang.cos().float()[:, None, :], ang.sin().float()[:, None, :]

    def rope(t):
        a, b, rest = t[..., : rot // 2], t[..., rot // 2: rot], t[..., rot:]
        return torch.cat([a * cos - b * sin, b * cos + a * sin, rest], dim=-1)

    q, k = rope(q), rope(k)
    g = Hq // Hkv
    k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    s = torch.einsum("thd,shd->hts", q, k) / hd ** 0.5
    s = s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
    att = torch.einsum("hts,shd->thd", s.softmax(-1), v).reshape(T, Hq * hd)
    att = att * torch.sigmoid(gate)
    x = x + att @ W[p + "self_attn.o_proj.weight"].float().T
    n = rms1p(torch, x, W[p + "post_attention_layernorm.weight"], eps)
    gu = torch.nn.functional.silu(n @ W[p + "mlp.gate_proj.weight"].float().T) * (n @ W[p + "mlp.up_proj.weight"].float().T)
    x = x + gu @ W[p + "mlp.down_proj.weight"].float().T
    return rms1p(torch, x, W["mtp.norm.weight"], eps) @ lm_head.T


@pytest.mark.parametrize("device", DEVICES, ids=DEVICE_IDS)
def test_mtp_head_matches_reference(voltinfer, tiny, tmp_path, device):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    st = pytest.importorskip("safetensors.torch")
    folder = tiny / "hf"
    cfg = json.loads((folder / "config.json").read_text())
    W = st.load_file(str(folder / "model.safetensors"))
    assert any(k.startswith("mtp.") for k in W), "make-model wrote no MTP head"
    tokens = [3, 141, 59, 26, 535, 89, 79, 323, 84, 62, 643, 383, 279, 50, 28, 84, 19, 716]
    out = tmp_path / "d.safetensors"
    run(["logits", "-m", folder, "--tokens", ",".join(map(str, tokens)), "--draft", "-b", "5", "--out", out, *device])
    tol = 3e-2 if "--device" in device else 1e-3
    got = st.load_file(str(out))
    assert got["draft_logits"].shape == (len(tokens) - 1, cfg["vocab_size"])

    model = transformers.AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    with torch.no_grad():
        base = model.model(input_ids=torch.tensor([tokens]))
    hf_hidden = base.last_hidden_state[0].float()
    err_h = (got["hidden"] - hf_hidden).abs().max() / hf_hidden.abs().max()
    assert err_h < tol, f"final hidden states: max |diff| / max |h| = {err_h:.2e}"

    with torch.no_grad():
        ref = mtp_reference(torch, W, cfg, tokens, hf_hidden)
    rel = ((got["draft_logits"] - ref).abs().max(-1).values / ref.abs().max(-1).values).max()
    print(f"MTP head: hidden {err_h:.2e}, draft logits {rel:.2e}")
    assert rel < tol, f"draft logits: max |diff| / row max = {rel:.2e}"
    assert (got["draft_logits"].argmax(-1) == ref.argmax(-1)).float().mean() > 0.9
    # The check can fail: the same comparison with the fc's column blocks swapped (hidden first,
    # the order a converter could get wrong) is far off.
    W2 = dict(W)
    fc = W["mtp.fc.weight"]
    W2["mtp.fc.weight"] = torch.cat([fc[:, fc.shape[1] // 2:], fc[:, : fc.shape[1] // 2]], dim=1)
    with torch.no_grad():
        wrong = mtp_reference(torch, W2, cfg, tokens, hf_hidden)
    assert ((got["draft_logits"] - wrong).abs().max(-1).values / wrong.abs().max(-1).values).max() > 1e-2


def generated(voltinfer, model, spec, *extra):  # extra: sampling and device flags
    proc = run(["generate", "-m", model, "-p", "one two three one two three one two", "-n", "64", "--spec", spec,
                *extra])
    stats = re.search(r"drafts: (\d+) of (\d+) kept", proc.stderr)
    return proc.stdout, (int(stats.group(1)), int(stats.group(2))) if stats else (0, 0)


@pytest.mark.parametrize("device", DEVICES, ids=DEVICE_IDS)
@pytest.mark.parametrize("form", ["hf", "q.gguf"])
@pytest.mark.parametrize("sampling", [["--temp", "0"], ["--temp", "0.9", "--seed", "7"]], ids=["greedy", "sampled"])
def test_spec_prints_what_plain_prints(voltinfer, tiny, form, sampling, device):
    model = tiny / form
    plain, _ = generated(voltinfer, model, "off", *sampling, *device)
    for spec in ("mtp", "ngram"):
        for k in ("1", "3", "7"):
            text, (kept, drafted) = generated(voltinfer, model, spec, "--draft-max", k, *sampling, *device)
            assert text == plain, f"--spec {spec} --draft-max {k} changed the output"
            assert kept <= drafted
            if spec == "mtp":
                assert drafted > 0, "the MTP head proposed no drafts"


def test_spec_mtp_needs_a_head(voltinfer, tiny):
    proc = run(["generate", "-m", tiny / "nomtp.gguf", "-p", "hi", "-n", "4", "--spec", "mtp"], check=False)
    assert proc.returncode != 0
    assert "has no MTP head" in proc.stderr
    proc = run(["generate", "-m", tiny / "q.gguf", "-p", "hi", "-n", "4", "--spec", "eagle"], check=False)
    assert proc.returncode != 0 and "off, ngram, mtp" in proc.stderr
    proc = run(["generate", "-m", tiny / "q.gguf", "-p", "hi", "-n", "4", "--spec", "ngram", "--draft-max", "9"],
               check=False)
    assert proc.returncode != 0 and "1 to 7 draft tokens" in proc.stderr
