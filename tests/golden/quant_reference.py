#!/usr/bin/env python3
"""Transformers reference logits for a GGUF made by hf_to_gguf.py with rounded weights (f16, q8_0).

Comparing an f16 / q8_0 GGUF against the f32 fixture only bounds the error loosely (the rounding of
the weights moves the logits by ~1e-3 .. 1e-1 on these random models). Instead this script reads the
weights back from the GGUF file itself (gguf-py's reader and dequantizer), maps each tensor back to
the HF layout, loads them into the transformers model, and records its logits. An engine that
dequantizes weights and does fp32 math must then match at the fp32 tolerance (1e-3), exactly like
the f32 runs.

Mapping back: for tensors stored as f32 (norms, conv, ssm_a, ssm_dt) the HF values are kept (the file
is checked to hold exactly their transformed values); for the rounded matrices the layout change of
the converter is a pure permutation of elements, found by passing an index array through the same
transform, and inverted.

Usage:
  python3 tests/golden/quant_reference.py tests/golden/qwen35_c /tmp/qwen35_c.q8_0.gguf /tmp/ref.safetensors
Writes tokens_<d> and logits_<d> (prefill of the fixture's decode sequence).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import hf_to_gguf  # noqa: E402


def rounded_hf_weights(folder: Path, gguf_path: Path) -> tuple[dict[str, np.ndarray], dict]:
    """HF state dict holding the values the GGUF file actually stores. Returns it and stats."""
    import gguf
    from gguf import quants
    cfg = json.loads((folder / "config.json").read_text())
    family = hf_to_gguf.FAMILY_BY_CLASS[cfg["architectures"][0]]
    hf = hf_to_gguf.load_safetensors(folder)
    reader = gguf.GGUFReader(str(gguf_path))
    stored = {t.name: t for t in reader.tensors}
    out, max_change, types = {}, 0.0, {}
    for name, w in hf.items():
        gname = hf_to_gguf.gguf_name(name, family)
        t = stored.pop(gname)
        vals = quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        expect = hf_to_gguf.transform(name, w, family, cfg)
        vals = vals.reshape(expect.shape)
        types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + 1
        if t.tensor_type == gguf.GGMLQuantizationType.F32:
            if not np.array_equal(vals, expect):
                raise AssertionError(f"{gguf_path}: f32 tensor {gname} does not hold the transformed {name}")
            out[name] = w
            continue
        assert w.size < (1 << 24), "index array must be exact in float32"
        idx = np.arange(w.size, dtype=np.float64).reshape(w.shape).astype(np.float32)
        perm = hf_to_gguf.transform(name, idx, family, cfg).astype(np.int64).ravel()
        assert np.array_equal(np.sort(perm), np.arange(w.size)), f"{name}: layout is not a permutation"
        back = np.empty(w.size, dtype=np.float32)
        back[perm] = vals.ravel()
        out[name] = back.reshape(w.shape)
        max_change = max(max_change, float(np.abs(out[name] - w).max()))
    if stored:
        raise AssertionError(f"{gguf_path}: tensors without an HF source: {sorted(stored)}")
    return out, {"max_weight_change": max_change, "types": types}


def reference_logits(folder: Path, weights: dict[str, np.ndarray], tokens: np.ndarray) -> np.ndarray:
    # make_fixtures sets the deterministic environment (1 thread, no kernel packages, eager).
    import make_fixtures as mf
    import torch
    from transformers import AutoConfig
    cfg = AutoConfig.from_pretrained(folder)
    cfg._attn_implementation = "eager"
    family = {"llama": "llama", "qwen3": "qwen3"}.get(cfg.model_type, "qwen3_5")
    model = mf.model_class(family)(cfg).to(torch.float32).eval()
    sd = {k: torch.from_numpy(v) for k, v in weights.items()}
    missing, unexpected = model.load_state_dict(sd, strict=False)
    allowed_missing = {"lm_head.weight"} if cfg.tie_word_embeddings else set()
    if set(missing) - allowed_missing or unexpected:
        raise AssertionError(f"state dict mismatch: missing {missing}, unexpected {unexpected}")
    if cfg.tie_word_embeddings:
        model.tie_weights()
        assert torch.equal(model.lm_head.weight, sd["model.embed_tokens.weight"])
    logits, _ = mf.prefill_logits(model, tokens)
    return logits.numpy()


def write_reference(folder: Path, gguf_path: Path, out: Path) -> dict:
    from safetensors.numpy import load_file, save_file
    meta = json.loads((folder / "meta.json").read_text())
    d = meta["sequences"]["decode_seq"]
    ref = load_file(str(folder / "reference.safetensors"))
    tokens = ref[f"tokens_{d}"]
    weights, stats = rounded_hf_weights(folder, gguf_path)
    logits = reference_logits(folder, weights, tokens)
    save_file({f"tokens_{d}": tokens, f"logits_{d}": np.ascontiguousarray(logits)}, str(out))
    f32 = ref[f"logits_{d}"].astype(np.float64)
    stats["rel_row_vs_f32_reference"] = float((np.abs(logits - f32).max(axis=1) / np.abs(f32).max(axis=1)).max())
    return stats


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", type=Path)
    ap.add_argument("gguf", type=Path)
    ap.add_argument("out", type=Path)
    args = ap.parse_args()
    print(json.dumps(write_reference(args.folder, args.gguf, args.out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
