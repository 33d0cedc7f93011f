#!/usr/bin/env python3
"""Convert a golden HF fixture folder (config.json + model.safetensors) into a GGUF file laid out the
way llama.cpp's converter (convert_hf_to_gguf.py / conversion/{llama,qwen}.py) lays it out, so that
the GGUF loading paths of voltinfer can be checked against the same transformers reference.

Supported: LlamaForCausalLM (arch "llama"), Qwen3ForCausalLM ("qwen3"), Qwen3_5ForCausalLM ("qwen35").
What llama.cpp does, and this script reproduces (facts; code written independently):
  all     tensor names token_embd / blk.N.* / output_norm / output (absent when tied);
          1-D tensors, *_norm.weight, ssm_conv1d and names not ending in ".weight" stay f32,
          other matrices get the output type (Q8_0 falls back to F16 for rows not a multiple of 32).
  llama   attn_q / attn_k rows permuted within each head for ggml's adjacent-pair RoPE: HF row
          half*(hd/2) + i goes to GGUF row 2*i + half (attn_k uses the KV head count);
          extra keys: vocab_size, rope.dimension_count = head_dim.
  qwen3   no permutation; q_norm / k_norm -> attn_q_norm / attn_k_norm.
  qwen35  +1 folded into every *norm.weight except linear_attn.norm (zero-centred RMSNorm);
          A_log -> ssm_a = -exp(A_log); conv1d [C,1,K] -> [C,K]; dt_bias -> ssm_dt.bias;
          when H_v != H_k, the value-head axis goes from grouped (HF: head g*r+m) to tiled
          (GGUF: head m*H_k+g) in the V rows of in_proj_qkv, the rows of in_proj_z / in_proj_b /
          in_proj_a, A_log, dt_bias, the V channels of conv1d and the COLUMNS of out_proj;
          keys ssm.*, rope.dimension_sections (mrope_section padded to 4), rope.dimension_count =
          int(head_dim * partial_rotary_factor), full_attention_interval.

Layer pattern (qwen35): llama.cpp writes `full_attention_interval` from the config (default 4) and
ignores `layer_types`; its loader makes layer i recurrent iff (i+1) % interval != 0. A pattern that
no interval reproduces cannot be expressed in GGUF at all: this script raises Unsupported for it
(e.g. [full, linear, linear, full, linear]). When the config has no interval but `layer_types` is
periodic, the interval that reproduces it is written (llama.cpp would write 4: see README).

No tokenizer is written by default (`voltinfer logits --tokens` needs none); --byte-vocab adds a
minimal byte-level "gpt2" vocabulary so that tools which want one can open the file.

Usage:
  python3 tests/golden/hf_to_gguf.py tests/golden/qwen35_c /tmp/qwen35_c.gguf [--outtype f32|f16|q8_0]
      [--byte-vocab] [--break rope_permute|v_reorder|norm_plus_one|neg_exp_a (WRONG file, for tests)]
Exit status 0 written, 3 not expressible in GGUF.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

try:
    import gguf
    from gguf import quants as gguf_quants
except ImportError:  # pragma: no cover - reported to the user
    sys.exit("error: the `gguf` package is needed (pip install gguf)")

OUTTYPES = {
    "f32": (gguf.GGMLQuantizationType.F32, gguf.LlamaFileType.ALL_F32),
    "f16": (gguf.GGMLQuantizationType.F16, gguf.LlamaFileType.MOSTLY_F16),
    "q8_0": (gguf.GGMLQuantizationType.Q8_0, gguf.LlamaFileType.MOSTLY_Q8_0),
    "q4_k": (gguf.GGMLQuantizationType.Q4_K, gguf.LlamaFileType.MOSTLY_Q4_K_S),
}

FAMILY_BY_CLASS = {"LlamaForCausalLM": "llama", "Qwen3ForCausalLM": "qwen3", "Qwen3_5ForCausalLM": "qwen35"}


class Unsupported(Exception):
    """The model cannot be expressed in GGUF the way llama.cpp reads it."""


def load_safetensors(folder: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file
    files = sorted(folder.glob("*.safetensors"))
    files = [f for f in files if f.name != "reference.safetensors"]
    if not files:
        raise FileNotFoundError(f"{folder}: no model *.safetensors")
    out: dict[str, np.ndarray] = {}
    for f in files:
        for k, v in load_file(str(f)).items():
            if v.dtype != np.float32:
                v = v.astype(np.float32)  # llama.cpp upcasts before its transforms too
            out[k] = v
    return out


# ---------------------------------------------------------------------------------------------
# transforms


def rope_pair_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama q/k: inside each head, row half*(hd/2)+i -> row 2*i+half. w: [n_head*hd, d]."""
    rows = w.shape[0]
    hd = rows // n_head
    assert hd * n_head == rows and hd % 2 == 0, (rows, n_head)
    return w.reshape(n_head, 2, hd // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def grouped_to_tiled(w: np.ndarray, axis: int, n_k: int, r: int, width: int) -> np.ndarray:
    """Value-head axis (n_k*r heads of `width` entries each, along `axis`) from HF's grouped order
    (head g*r+m) to ggml's tiled order (head m*n_k+g)."""
    axis = axis % w.ndim
    shape = list(w.shape)
    assert shape[axis] == n_k * r * width, (shape, axis, n_k, r, width)
    v = w.reshape(*shape[:axis], n_k, r, width, *shape[axis + 1:])
    v = np.swapaxes(v, axis, axis + 1)
    return np.ascontiguousarray(v).reshape(shape)


def layer_interval(cfg: dict) -> int:
    """full_attention_interval for qwen35; raises Unsupported when layer_types has no period."""
    n = cfg["num_hidden_layers"]
    types = cfg.get("layer_types")
    if "full_attention_interval" in cfg:
        k = int(cfg["full_attention_interval"])
        if types is not None and types != ["full_attention" if (i + 1) % k == 0 else "linear_attention"
                                           for i in range(n)]:
            raise Unsupported(f"layer_types {types} disagree with full_attention_interval {k}")
        return k
    if types is None:
        return 4  # llama.cpp's default
    for k in range(1, n + 2):
        if types == ["full_attention" if (i + 1) % k == 0 else "linear_attention" for i in range(n)]:
            return k
    raise Unsupported(f"layer_types {types} is not 'every k-th layer is full attention' for any k: "
                      "GGUF (qwen35.full_attention_interval) cannot express it")


# ---------------------------------------------------------------------------------------------
# name mapping and per-family tensor lists


COMMON_LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}
QWEN35_LAYER_NAMES = {
    "post_attention_layernorm.weight": "post_attention_norm.weight",  # not ffn_norm for qwen35
    "linear_attn.in_proj_qkv.weight": "attn_qkv.weight",
    "linear_attn.in_proj_z.weight": "attn_gate.weight",
    "linear_attn.in_proj_b.weight": "ssm_beta.weight",
    "linear_attn.in_proj_a.weight": "ssm_alpha.weight",
    "linear_attn.conv1d.weight": "ssm_conv1d.weight",
    "linear_attn.dt_bias": "ssm_dt.bias",
    "linear_attn.A_log": "ssm_a",
    "linear_attn.norm.weight": "ssm_norm.weight",
    "linear_attn.out_proj.weight": "ssm_out.weight",
}


def gguf_name(hf: str, family: str) -> str:
    top = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
           "lm_head.weight": "output.weight"}
    if hf in top:
        return top[hf]
    parts = hf.split(".", 3)
    if len(parts) == 4 and parts[0] == "model" and parts[1] == "layers" and parts[2].isdecimal():
        rest = parts[3]
        table = dict(COMMON_LAYER_NAMES)
        table.update(QWEN35_LAYER_NAMES if family == "qwen35"
                     else {"post_attention_layernorm.weight": "ffn_norm.weight"})
        if rest in table:
            return f"blk.{parts[2]}.{table[rest]}"
    raise Unsupported(f"no GGUF name for HF tensor '{hf}' ({family})")


# Names of the transforms that `breaks` can switch off. Only for sensitivity tests: a GGUF made
# with one of them skipped is wrong, and the engine must then fail the golden comparison.
BREAKABLE = ("rope_permute", "v_reorder", "norm_plus_one", "neg_exp_a")


def transform(name: str, w: np.ndarray, family: str, cfg: dict, breaks: frozenset[str] = frozenset()) -> np.ndarray:
    """Apply llama.cpp's converter transforms to one HF tensor (float32)."""
    if family == "llama":
        if "rope_permute" in breaks:
            return w
        if name.endswith("self_attn.q_proj.weight"):
            return rope_pair_permute(w, cfg["num_attention_heads"])
        if name.endswith("self_attn.k_proj.weight"):
            return rope_pair_permute(w, cfg.get("num_key_value_heads", cfg["num_attention_heads"]))
        return w
    if family == "qwen3":
        return w
    # qwen35
    n_k, n_v = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
    d_k, d_v = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"]
    # llama.cpp skips the reorder when the ratio is 1 (it would be the identity)
    if "linear_attn." in name and n_k != n_v and "v_reorder" not in breaks:
        r = n_v // n_k
        qk = 2 * n_k * d_k
        if name.endswith("in_proj_qkv.weight"):
            w = np.concatenate([w[:qk], grouped_to_tiled(w[qk:], 0, n_k, r, d_v)], axis=0)
        elif name.endswith("in_proj_z.weight"):
            w = grouped_to_tiled(w, 0, n_k, r, d_v)
        elif name.endswith(("in_proj_b.weight", "in_proj_a.weight", ".A_log", ".dt_bias")):
            w = grouped_to_tiled(w, 0, n_k, r, 1)
        elif name.endswith("conv1d.weight"):
            c = w.reshape(w.shape[0], w.shape[-1])
            w = np.concatenate([c[:qk], grouped_to_tiled(c[qk:], 0, n_k, r, d_v)], axis=0)
        elif name.endswith("out_proj.weight"):
            w = grouped_to_tiled(w, 1, n_k, r, d_v)
    if name.endswith(".A_log"):
        w = w if "neg_exp_a" in breaks else -np.exp(w.astype(np.float32))
    elif name.endswith("conv1d.weight"):
        w = w.reshape(w.shape[0], w.shape[-1])  # [C, 1, K] -> [C, K] (ggml ne = {K, C})
    elif (name.endswith("norm.weight") and not name.endswith("linear_attn.norm.weight")
          and "norm_plus_one" not in breaks):
        w = w + np.float32(1.0)  # zero-centred (1 + w) RMSNorm: fold the 1 in
    return np.ascontiguousarray(w, dtype=np.float32)


def storage_type(gname: str, w: np.ndarray, want: gguf.GGMLQuantizationType) -> gguf.GGMLQuantizationType:
    if w.ndim <= 1 or gname.endswith("_norm.weight") or ".ssm_conv1d." in gname or not gname.endswith(".weight"):
        return gguf.GGMLQuantizationType.F32
    return want


def encode(w: np.ndarray, qtype: gguf.GGMLQuantizationType) -> tuple[np.ndarray, gguf.GGMLQuantizationType]:
    if qtype == gguf.GGMLQuantizationType.F32:
        return w.astype(np.float32), qtype
    if qtype == gguf.GGMLQuantizationType.F16:
        return w.astype(np.float16), qtype
    if qtype == gguf.GGMLQuantizationType.Q4_K:  # gguf-py has no Q4_K quantizer
        if w.shape[-1] % 256 != 0:
            return w.astype(np.float16), gguf.GGMLQuantizationType.F16
        return quantize_q4_k(w), qtype
    try:
        return gguf_quants.quantize(w, qtype), qtype
    except gguf.QuantError:  # row length not a multiple of the block: llama.cpp falls back to F16
        return w.astype(np.float16), gguf.GGMLQuantizationType.F16


def quantize_q4_k(w: np.ndarray) -> np.ndarray:
    """Q4_K blocks in ggml's layout (d, dmin as f16; 8 sub-blocks of 32 with 6-bit scales and mins
    packed into 12 bytes; nibbles of sub-blocks 2i and 2i+1 share bytes 32i..32i+31) by a plain
    min/max fit per sub-block: x ~ d*sc*q - dmin*m. Not llama.cpp's search for the best scales,
    only a valid file: the reference logits are computed from the values read back from it."""
    rows = w.reshape(-1, w.shape[-1]).astype(np.float32)
    x = rows.reshape(-1, 8, 32)                                   # [blocks, sub-block, value]
    lo = np.minimum(x.min(axis=2), 0.0)
    hi = x.max(axis=2)
    scale, mins = (hi - lo) / 15.0, -lo
    d = (scale.max(axis=1) / 63.0).astype(np.float16)
    dmin = (mins.max(axis=1) / 63.0).astype(np.float16)
    df, dminf = d.astype(np.float32)[:, None], dmin.astype(np.float32)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(df > 0, np.clip(np.rint(scale / df), 0, 63), 0).astype(np.uint8)
        m = np.where(dminf > 0, np.clip(np.rint(mins / dminf), 0, 63), 0).astype(np.uint8)
        step = (df * sc)[:, :, None]
        q = np.where(step > 0, np.clip(np.rint((x + (dminf * m)[:, :, None]) / step), 0, 15), 0).astype(np.uint8)
    scales = np.zeros((x.shape[0], 12), dtype=np.uint8)
    for j in range(4):
        scales[:, j] = (sc[:, j] & 63) | ((sc[:, j + 4] >> 4) << 6)
        scales[:, j + 4] = (m[:, j] & 63) | ((m[:, j + 4] >> 4) << 6)
        scales[:, j + 8] = (sc[:, j + 4] & 0xF) | ((m[:, j + 4] & 0xF) << 4)
    qs = (q[:, 0::2, :] | (q[:, 1::2, :] << 4)).reshape(-1, 128)
    blocks = np.concatenate([d.view(np.uint8).reshape(-1, 2), dmin.view(np.uint8).reshape(-1, 2), scales, qs], axis=1)
    return blocks.reshape(*w.shape[:-1], w.shape[-1] // 256 * 144)


# ---------------------------------------------------------------------------------------------


def add_byte_vocab(writer: gguf.GGUFWriter, n_vocab: int) -> None:
    """Minimal GPT-2 style byte-level BPE vocabulary: the 256 byte symbols, then two-letter merges
    ("t h" -> "th", ...) up to the model's vocabulary size."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    sym, extra = {}, 0
    for b in range(256):  # printable bytes stand for themselves, the others map to U+0100 onwards
        if b in printable:
            sym[b] = chr(b)
        else:
            sym[b] = chr(256 + extra)
            extra += 1
    tokens = [sym[b] for b in range(256)][:n_vocab]
    letters = "etaoinshrdlucmfwypvbgkjqxz"
    pairs = [a + b for a in letters for b in letters]
    merges = [f"{p[0]} {p[1]}" for p in pairs[:max(0, n_vocab - 256)]]
    tokens += pairs[:max(0, n_vocab - 256)]
    assert len(tokens) == n_vocab, "vocabulary larger than 256 + 26*26 is not needed here"
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.NORMAL] * n_vocab)
    if merges:
        writer.add_token_merges(merges)
    writer.add_add_bos_token(False)


def convert(folder: Path, out: Path, outtype: str = "f32", byte_vocab: bool = False,
            breaks: frozenset[str] = frozenset()) -> dict:
    """Write `out`; returns a summary. Raises Unsupported when GGUF cannot express the model.
    `breaks` (names from BREAKABLE) deliberately skips transforms, for sensitivity tests only."""
    unknown = set(breaks) - set(BREAKABLE)
    if unknown:
        raise ValueError(f"unknown transform(s) to break: {sorted(unknown)} (known: {BREAKABLE})")
    cfg = json.loads((folder / "config.json").read_text())
    cls = (cfg.get("architectures") or [""])[0]
    family = FAMILY_BY_CLASS.get(cls)
    if family is None:
        raise Unsupported(f"{folder}: architecture '{cls}' is not handled (llama, qwen3, qwen3_5 text)")
    if "text_config" in cfg:
        cfg = {**cfg, **cfg["text_config"]}
    want, ftype = OUTTYPES[outtype]
    interval = layer_interval(cfg) if family == "qwen35" else None
    hf = load_safetensors(folder)

    w = gguf.GGUFWriter(str(out), family)
    rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    head_dim = cfg.get("head_dim")
    # Key order follows llama.cpp's converter (general, base text keys, family keys).
    w.add_type(gguf.GGUFType.MODEL)
    w.add_name(folder.name)
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg.get("num_key_value_heads", cfg["num_attention_heads"]))
    if "mrope_section" in rope:
        w.add_rope_dimension_sections((list(rope["mrope_section"]) + [0, 0, 0, 0])[:4])
    theta = rope.get("rope_theta", cfg.get("rope_theta"))
    if theta is not None:
        w.add_rope_freq_base(float(theta))
    w.add_layer_norm_rms_eps(float(cfg["rms_norm_eps"]))
    if head_dim is not None:
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    w.add_file_type(ftype)
    if family == "llama":
        w.add_vocab_size(cfg["vocab_size"])
        w.add_rope_dimension_count(head_dim or cfg["hidden_size"] // cfg["num_attention_heads"])
    elif family == "qwen35":
        w.add_ssm_conv_kernel(cfg["linear_conv_kernel_dim"])
        w.add_ssm_state_size(cfg["linear_key_head_dim"])
        w.add_ssm_group_count(cfg["linear_num_key_heads"])
        w.add_ssm_time_step_rank(cfg["linear_num_value_heads"])
        w.add_ssm_inner_size(cfg["linear_value_head_dim"] * cfg["linear_num_value_heads"])
        w.add_full_attention_interval(interval)
        # llama.cpp: int(head_dim * partial_rotary_factor), the factor defaulting to 0.25
        prf = cfg.get("partial_rotary_factor", rope.get("partial_rotary_factor", 0.25))
        hd = head_dim or cfg["hidden_size"] // cfg["num_attention_heads"]
        w.add_rope_dimension_count(int(hd * prf))
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    if byte_vocab:
        add_byte_vocab(w, cfg["vocab_size"])

    # Tensors: sorted like save_pretrained's file (the order is irrelevant to readers).
    written, kinds = [], {}
    for name in sorted(hf):
        if name.startswith("mtp."):
            continue  # transformers drops MTP; the fixtures have none
        gname = gguf_name(name, family)
        t = transform(name, hf[name], family, cfg, breaks)
        data, qtype = encode(t, storage_type(gname, t, want))
        w.add_tensor(gname, data, raw_dtype=qtype)
        written.append(gname)
        kinds[qtype.name] = kinds.get(qtype.name, 0) + 1
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return {"arch": family, "tensors": len(written), "types": kinds, "full_attention_interval": interval,
            "tied": "output.weight" not in written}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", type=Path, help="HF folder (config.json + model.safetensors)")
    ap.add_argument("out", type=Path, help="output .gguf file")
    ap.add_argument("--outtype", choices=sorted(OUTTYPES), default="f32")
    ap.add_argument("--byte-vocab", action="store_true", help="also write a minimal byte-level vocabulary")
    ap.add_argument("--break", dest="breaks", action="append", default=[], choices=BREAKABLE,
                    help="skip one transform (makes a WRONG file; for sensitivity tests)")
    args = ap.parse_args()
    try:
        info = convert(args.folder, args.out, args.outtype, args.byte_vocab, frozenset(args.breaks))
    except Unsupported as e:
        print(f"unsupported: {e}", file=sys.stderr)
        return 3
    print(f"wrote {args.out}: {json.dumps(info)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
