#!/usr/bin/env python3
"""Golden reference fixtures from Hugging Face transformers (tiny random-weight models).

For every model spec below this script builds a tiny model with seeded random weights, saves it
with `save_pretrained` (config.json + model.safetensors, float32, HF tensor names), reloads it from
that folder, and records reference outputs computed by transformers in float32 with eager
attention and the pure-PyTorch fallbacks (no flash-linear-attention, no causal-conv1d, no hub
kernels: the script refuses to run if any of them is importable, because each rounds differently).

Per model folder tests/golden/<name>/:
  config.json, model.safetensors   the model exactly as transformers saves it
  reference.safetensors            tokens_<i>        int32 [T_i]           fixed token ids
                                   logits_<i>        f32   [T_i, vocab]    one prefill call
                                   logits_decode_<d> f32   [T_d, vocab]    same tokens, one per call (cache)
                                   logits_chunked_<d> f32  [T_d, vocab]    calls of sizes chunks_<d> (cache)
                                   chunks_<d>        int32 [n_calls]       call sizes, sum = T_d
                                   hidden_<h>        f32   [L+2, T_h, d]   residual stream of a prefill call:
                                                     [0] embeddings, [l+1] after layer l, [L+1] after final norm
  meta.json                        versions, config summary, date, sums
Usage:
  python3 tests/golden/make_fixtures.py            # (re)write all fixtures
  python3 tests/golden/make_fixtures.py --check    # regenerate into a temp dir, compare byte-for-byte
  python3 tests/golden/make_fixtures.py --only llama_tiny
"""

from __future__ import annotations

import argparse
import datetime
import filecmp
import importlib.util
import json
import os
import platform
import shutil
import sys
import tempfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

# Deterministic CPU math: one thread (reduction order fixed), no hub kernels.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ["USE_HUB_KERNELS"] = "0"

# Optional kernel packages change numerics (see MODEL_QWEN35.md §11.17); the reference must be the
# plain torch path, so check they are absent *before* transformers is imported.
FORBIDDEN_PACKAGES = ["fla", "causal_conv1d", "flash_attn", "kernels", "mamba_ssm"]


def check_forbidden_packages() -> dict[str, bool]:
    present = {name: importlib.util.find_spec(name) is not None for name in FORBIDDEN_PACKAGES}
    bad = [n for n, p in present.items() if p]
    if bad:
        sys.exit(f"error: optional kernel package(s) installed: {bad}. They replace the torch reference "
                 f"path in transformers and change numerics; uninstall them (or use a clean venv).")
    return present


PACKAGES_PRESENT = check_forbidden_packages()

import numpy as np  # noqa: E402
import safetensors  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)

HERE = Path(__file__).resolve().parent
SEQ_LENGTHS = [7, 33, 70]       # 70 > one 64-token GDN chunk
DECODE_SEQ = 2                  # sequence whose token-by-token / chunked logits are also recorded
HIDDEN_SEQ = 1                  # sequence whose per-layer hidden states are recorded
CHUNKS = [37, 1, 1, 1, 1, 1, 28]  # prefill, five decode steps, multi-token continuation (sum 70)


@dataclass
class Spec:
    name: str
    family: str            # "qwen3_5" | "llama" | "qwen3"
    seed: int
    config: dict
    note: str
    init_std: float = 0.08                   # std of linear weights (also config.initializer_range)
    embed_std: float = 0.25                  # also the head's scale when tied: logit std ~ 2
    head_std: float = 0.25                   # untied lm_head
    extra: dict = field(default_factory=dict)


def qwen35_rope(theta: float, head_dim: int, factor: float = 0.25) -> dict:
    # mrope_section splits the rotary frequency pairs into T/H/W groups; for text all three
    # positions are equal so the split is irrelevant, but keep it consistent with the rotary dim.
    # Interleaved: pair j goes to T/H/W by j % 3 (27B: 32 pairs -> [11, 11, 10]).
    n_pairs = int(head_dim * factor) // 2
    t = -(-n_pairs // 3)
    h = -(-(n_pairs - 1) // 3)
    section = [t, h, n_pairs - t - h]
    return {"rope_type": "default", "rope_theta": theta, "partial_rotary_factor": factor,
            "mrope_section": section, "mrope_interleaved": True}


SPECS: list[Spec] = [
    Spec(
        name="qwen35_a",
        family="qwen3_5",
        seed=1001,
        note="default layer pattern (3 linear + 1 full, from full_attention_interval=4), tied lm_head, "
             "H_v/H_k=2, head_dim 32, partial rotary 0.25, rope_theta 1e7",
        config=dict(vocab_size=320, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                    linear_num_key_heads=2, linear_num_value_heads=4,
                    linear_key_head_dim=16, linear_value_head_dim=32, linear_conv_kernel_dim=4,
                    rms_norm_eps=1e-6, tie_word_embeddings=True, max_position_embeddings=4096,
                    rope_parameters=qwen35_rope(1e7, 32)),
    ),
    Spec(
        name="qwen35_b",
        family="qwen3_5",
        seed=1002,
        note="explicit layer_types [full, linear, linear, full, linear], untied lm_head, H_v/H_k=1, "
             "head_dim 64 (rotary 16), GQA 4:1, rope_theta 10000",
        config=dict(vocab_size=288, hidden_size=64, intermediate_size=96, num_hidden_layers=5,
                    layer_types=["full_attention", "linear_attention", "linear_attention",
                                 "full_attention", "linear_attention"],
                    num_attention_heads=4, num_key_value_heads=1, head_dim=64,
                    linear_num_key_heads=3, linear_num_value_heads=3,
                    linear_key_head_dim=16, linear_value_head_dim=16, linear_conv_kernel_dim=4,
                    rms_norm_eps=1e-6, tie_word_embeddings=False, max_position_embeddings=4096,
                    rope_parameters=qwen35_rope(10000.0, 64)),
    ),
    Spec(
        name="qwen35_c",
        family="qwen3_5",
        seed=1003,
        note="odd dims: hidden 80, intermediate 136, 3 q heads / 1 kv head, H_v/H_k=3 (2 k heads, 6 v heads), "
             "d_k 16, d_v 32, head_dim 32, untied, layer_types [linear, full, linear]",
        config=dict(vocab_size=257, hidden_size=80, intermediate_size=136, num_hidden_layers=3,
                    layer_types=["linear_attention", "full_attention", "linear_attention"],
                    num_attention_heads=3, num_key_value_heads=1, head_dim=32,
                    linear_num_key_heads=2, linear_num_value_heads=6,
                    linear_key_head_dim=16, linear_value_head_dim=32, linear_conv_kernel_dim=4,
                    rms_norm_eps=1e-6, tie_word_embeddings=False, max_position_embeddings=4096,
                    rope_parameters=qwen35_rope(1e6, 32)),
    ),
    Spec(
        name="llama_tiny",
        family="llama",
        seed=2001,
        note="LlamaForCausalLM, hidden 64, 3 layers, 4 q / 2 kv heads, head_dim 16, tied (like SmolLM2)",
        config=dict(vocab_size=300, hidden_size=64, intermediate_size=176, num_hidden_layers=3,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                    rms_norm_eps=1e-5, tie_word_embeddings=True, max_position_embeddings=2048,
                    rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                    attention_bias=False, mlp_bias=False),
    ),
    Spec(
        name="qwen3_tiny",
        family="qwen3",
        seed=3001,
        note="Qwen3ForCausalLM with q_norm/k_norm, hidden 64, 3 layers, 4 q / 2 kv heads, head_dim 32 "
             "(!= hidden/heads), untied, rope_theta 1e6",
        config=dict(vocab_size=352, hidden_size=64, intermediate_size=160, num_hidden_layers=3,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                    rms_norm_eps=1e-6, tie_word_embeddings=False, max_position_embeddings=4096,
                    rope_parameters={"rope_type": "default", "rope_theta": 1e6},
                    attention_bias=False, use_sliding_window=False),
    ),
    Spec(
        name="qwen2_tiny",
        family="qwen2",
        seed=4001,
        note="Qwen2ForCausalLM (q/k/v biases), hidden 64, 2 layers, 4 q / 2 kv heads, head_dim 16, untied",
        config=dict(vocab_size=288, hidden_size=64, intermediate_size=144, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2,
                    rms_norm_eps=1e-6, tie_word_embeddings=False, max_position_embeddings=4096,
                    rope_parameters={"rope_type": "default", "rope_theta": 1e6},
                    use_sliding_window=False),
    ),
]


# Built only when named (--only): too large to commit (~45 MB f32), made on demand for checks that
# need rows a K-quant GEMV takes (hidden size a multiple of 1024, every stacked projection part a
# multiple of 16 rows): scripts/golden_q4k.sh turns it into a Q4_K GGUF and its reference logits.
LARGE_SPECS: list[Spec] = [
    Spec(
        name="qwen35_k",
        family="qwen3_5",
        seed=1011,
        note="hidden 1024 for Q4_K rows (K % 1024 == 0): layer_types [linear, full], untied, 8 q / 2 kv "
             "heads of 64, GDN 4 k heads of 64 and 16 v heads of 32; linear weights N(0, 0.02^2), head 0.0625 "
             "(the small fixtures' scale times sqrt(64 / 1024))",
        config=dict(vocab_size=512, hidden_size=1024, intermediate_size=1024, num_hidden_layers=2,
                    layer_types=["linear_attention", "full_attention"],
                    num_attention_heads=8, num_key_value_heads=2, head_dim=64,
                    linear_num_key_heads=4, linear_num_value_heads=16,
                    linear_key_head_dim=64, linear_value_head_dim=32, linear_conv_kernel_dim=4,
                    rms_norm_eps=1e-6, tie_word_embeddings=False, max_position_embeddings=4096,
                    rope_parameters=qwen35_rope(1e7, 64)),
        init_std=0.02,
        head_std=0.0625,
    ),
]


def build_config(spec: Spec):
    if spec.family == "qwen3_5":
        from transformers import Qwen3_5TextConfig as C
    elif spec.family == "llama":
        from transformers import LlamaConfig as C
    elif spec.family == "qwen3":
        from transformers import Qwen3Config as C
    elif spec.family == "qwen2":
        from transformers import Qwen2Config as C
    else:
        raise ValueError(spec.family)
    cfg = C(**spec.config, initializer_range=spec.init_std)
    cfg._attn_implementation = "eager"
    return cfg


def model_class(family: str):
    if family == "qwen3_5":
        from transformers import Qwen3_5ForCausalLM as M
    elif family == "llama":
        from transformers import LlamaForCausalLM as M
    elif family == "qwen2":
        from transformers import Qwen2ForCausalLM as M
    else:
        from transformers import Qwen3ForCausalLM as M
    return M


def name_generator(seed: int, name: str) -> torch.Generator:
    # One generator per tensor name: weights do not depend on module construction order.
    g = torch.Generator()
    g.manual_seed((seed * 1_000_003 + zlib.crc32(name.encode())) & 0x7FFF_FFFF_FFFF)
    return g


def randomise_weights(model, spec: Spec) -> None:
    """Fill every parameter with seeded random values chosen so that activations stay O(1) and
    that common loader mistakes (missing/extra +1 on a norm, permuted heads, wrong A/dt) change
    the logits visibly."""
    zero_centred_norm = spec.family == "qwen3_5"  # Qwen3.5 RMSNorm multiplies by (1 + w)
    with torch.no_grad():
        for name, p in model.named_parameters():
            g = name_generator(spec.seed, name)
            shape = p.shape
            if name.endswith("embed_tokens.weight"):
                v = torch.randn(shape, generator=g) * spec.embed_std
            elif name == "lm_head.weight":
                v = torch.randn(shape, generator=g) * spec.head_std
            elif name.endswith("linear_attn.norm.weight"):
                v = 0.6 + 0.8 * torch.rand(shape, generator=g)              # plain multiplier ~1
            elif "norm" in name and name.endswith(".weight"):
                if zero_centred_norm:
                    v = -0.4 + 0.8 * torch.rand(shape, generator=g)         # offset, used as 1 + w
                else:
                    v = 0.6 + 0.8 * torch.rand(shape, generator=g)
            elif name.endswith("conv1d.weight"):
                v = torch.randn(shape, generator=g) * 0.4
            elif name.endswith("A_log"):
                v = torch.log(0.05 + 1.95 * torch.rand(shape, generator=g))  # A in [0.05, 2]
            elif name.endswith("dt_bias"):
                v = -1.0 + 2.0 * torch.rand(shape, generator=g)
            elif name.endswith(".weight") and p.dim() == 2:
                v = torch.randn(shape, generator=g) * spec.init_std
            elif name.endswith(".bias"):                                    # qwen2 q/k/v biases
                v = torch.randn(shape, generator=g) * 0.5
            else:
                raise RuntimeError(f"no init rule for parameter {name} {tuple(shape)}")
            p.copy_(v.to(p.dtype))


def make_tokens(spec: Spec, vocab: int) -> list[np.ndarray]:
    rng = np.random.Generator(np.random.PCG64(spec.seed))
    return [rng.integers(0, vocab, size=t, dtype=np.int64).astype(np.int32) for t in SEQ_LENGTHS]


def prefill_logits(model, ids: np.ndarray, hidden: bool = False):
    """Logits of one call over all of ids; with hidden=True also the residual stream
    [L+2, T, d]: [0] embedding output, [l+1] output of decoder layer l, [L+1] after the final norm.
    Captured with forward hooks so the layout does not depend on output_hidden_states conventions."""
    x = torch.from_numpy(ids.astype(np.int64))[None]
    captured: list[torch.Tensor] = []
    hooks = []
    if hidden:
        def keep(_mod, _inp, out):
            captured.append((out if torch.is_tensor(out) else out[0])[0].detach().clone())
        hooks.append(model.model.embed_tokens.register_forward_hook(keep))
        hooks += [layer.register_forward_hook(keep) for layer in model.model.layers]
        hooks.append(model.model.norm.register_forward_hook(keep))
    try:
        with torch.no_grad():
            out = model(input_ids=x, use_cache=False)
    finally:
        for h in hooks:
            h.remove()
    logits = out.logits[0].float().contiguous()
    hs = None
    if hidden:
        assert len(captured) == model.config.num_hidden_layers + 2, len(captured)
        hs = torch.stack(captured).float().contiguous()
    return logits, hs


def cached_logits(model, ids: np.ndarray, sizes: list[int]) -> torch.Tensor:
    """Run ids in consecutive calls of the given sizes, carrying transformers' own cache
    (DynamicCache: KV for attention layers, conv + recurrent state for GDN layers)."""
    from transformers import DynamicCache
    assert sum(sizes) == len(ids)
    cache = DynamicCache(config=model.config)
    x = torch.from_numpy(ids.astype(np.int64))[None]
    pieces, pos = [], 0
    with torch.no_grad():
        for n in sizes:
            out = model(input_ids=x[:, pos:pos + n], cache=cache, use_cache=True)
            cache = out.cache if getattr(out, "cache", None) is not None else cache
            pieces.append(out.logits[0].float())
            pos += n
    return torch.cat(pieces).contiguous()


def config_summary(cfg, family: str) -> dict:
    keys = ["vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "head_dim", "rms_norm_eps", "tie_word_embeddings", "rope_parameters",
            "layer_types", "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
            "linear_value_head_dim", "linear_conv_kernel_dim"]
    d = {k: getattr(cfg, k) for k in keys if hasattr(cfg, k)}
    d["family"] = family
    d["model_type"] = cfg.model_type
    return d


def generate(spec: Spec, out_root: Path, verbose: bool = True) -> dict:
    torch.manual_seed(spec.seed)  # HF's own init runs first; everything is then overwritten below
    cfg = build_config(spec)
    M = model_class(spec.family)
    model = M(cfg).to(torch.float32).eval()
    randomise_weights(model, spec)
    if cfg.tie_word_embeddings:
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()

    folder = out_root / spec.name
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    model.save_pretrained(folder, safe_serialization=True)
    for extra in ("generation_config.json",):
        (folder / extra).unlink(missing_ok=True)

    # Reload from disk: the reference must come from exactly the files we commit.
    model = M.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager").eval()
    assert model.config._attn_implementation == "eager"

    vocab = cfg.vocab_size
    seqs = make_tokens(spec, vocab)
    ref: dict[str, torch.Tensor] = {}
    stats = {}
    for i, ids in enumerate(seqs):
        logits, hs = prefill_logits(model, ids, hidden=(i == HIDDEN_SEQ))
        ref[f"tokens_{i}"] = torch.from_numpy(ids)
        ref[f"logits_{i}"] = logits
        if hs is not None:
            ref[f"hidden_{i}"] = hs
        stats[f"logits_{i}"] = {"std": float(logits.std()), "max_abs": float(logits.abs().max()),
                                "mean_row_std": float(logits.std(dim=-1).mean())}
    d = DECODE_SEQ
    ids = seqs[d]
    dec = cached_logits(model, ids, [1] * len(ids))
    chk = cached_logits(model, ids, CHUNKS)
    ref[f"logits_decode_{d}"] = dec
    ref[f"logits_chunked_{d}"] = chk
    ref[f"chunks_{d}"] = torch.tensor(CHUNKS, dtype=torch.int32)
    stats["decode_vs_prefill_max_abs"] = float((dec - ref[f"logits_{d}"]).abs().max())
    stats["chunked_vs_prefill_max_abs"] = float((chk - ref[f"logits_{d}"]).abs().max())
    stats["hidden_rms_per_layer"] = [float(h.pow(2).mean().sqrt()) for h in ref[f"hidden_{HIDDEN_SEQ}"]]

    save_file({k: v.contiguous() for k, v in ref.items()}, str(folder / "reference.safetensors"),
              # one metadata key only: safetensors writes its metadata map in hash order, so
              # two keys would make the file bytes differ from run to run
              metadata={"generator": f"tests/golden/make_fixtures.py:{spec.name}"})

    n_params = sum(p.numel() for p in model.parameters())
    meta = {
        "name": spec.name,
        "note": spec.note,
        "hf_class": M.__name__,
        "config_summary": config_summary(model.config, spec.family),
        "n_params": n_params,
        "seed": spec.seed,
        "weights": {"linear_std": spec.init_std, "embed_std": spec.embed_std,
                    "head_std_untied": spec.head_std,
                    "norm": "qwen3_5: w ~ U(-0.4,0.4) used as (1+w); others and linear_attn.norm: U(0.6,1.4)",
                    "conv1d": "N(0,0.4)", "A_log": "log U(0.05,2)", "dt_bias": "U(-1,1)"},
        "sequences": {"lengths": SEQ_LENGTHS, "decode_seq": DECODE_SEQ, "chunks": CHUNKS,
                      "hidden_seq": HIDDEN_SEQ},
        "hidden_layout": "hidden_<i> [L+2, T, d]: [0] embedding output, [l+1] output of decoder layer l "
                         "(residual stream), [L+1] after the final norm",
        "stats": stats,
        "environment": environment(),
        "generated": datetime.date.today().isoformat(),
    }
    (folder / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")

    if verbose:
        sizes = {p.name: p.stat().st_size for p in sorted(folder.iterdir())}
        total = sum(sizes.values())
        print(f"{spec.name:12s} {M.__name__:20s} params={n_params:8d} files={total/1e6:.2f} MB "
              f"logit std={stats['logits_2']['std']:.3f} max|l|={stats['logits_2']['max_abs']:.2f} "
              f"decode-prefill={stats['decode_vs_prefill_max_abs']:.2e} "
              f"chunked-prefill={stats['chunked_vs_prefill_max_abs']:.2e}")
        print(f"{'':12s} hidden rms per layer: " + " ".join(f"{x:.2f}" for x in stats["hidden_rms_per_layer"]))
        # Committed fixtures stay small; LARGE_SPECS are never committed.
        assert total < 2_000_000 or spec in LARGE_SPECS, f"{spec.name}: fixture folder is {total} bytes (> 2 MB)"
    return meta


def environment() -> dict:
    return {
        "python": platform.python_version(),
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "numpy": np.__version__,
        "safetensors": safetensors.__version__,
        "dtype": "float32",
        "attn_implementation": "eager",
        "torch_threads": torch.get_num_threads(),
        "optional_kernel_packages_present": PACKAGES_PRESENT,
    }


def compare_trees(a: Path, b: Path, names: list[str]) -> list[str]:
    diffs = []
    for name in names:
        for f in sorted((a / name).iterdir()):
            g = b / name / f.name
            if not g.exists():
                diffs.append(f"{name}/{f.name}: missing in second run")
            elif f.name == "meta.json":
                ja, jb = json.loads(f.read_text()), json.loads(g.read_text())
                ja.pop("generated"), jb.pop("generated")
                if ja != jb:
                    diffs.append(f"{name}/{f.name}: differs (beyond the date)")
            elif not filecmp.cmp(f, g, shallow=False):
                diffs.append(f"{name}/{f.name}: differs")
    return diffs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=HERE, help="output root (default: tests/golden)")
    ap.add_argument("--only", nargs="*", help="fixture names to build")
    ap.add_argument("--check", action="store_true",
                    help="regenerate into a temporary dir and compare with the committed files")
    args = ap.parse_args()

    specs = [s for s in SPECS if not args.only or s.name in args.only]
    specs += [s for s in LARGE_SPECS if args.only and s.name in args.only]
    if args.only and len(specs) != len(args.only):
        known = ", ".join(s.name for s in SPECS + LARGE_SPECS)
        ap.error(f"unknown fixture name in {args.only}; known: {known}")
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, float32, eager attention; "
          f"optional kernel packages present: {PACKAGES_PRESENT}")
    if args.check:
        with tempfile.TemporaryDirectory() as tmp:
            for s in specs:
                generate(s, Path(tmp), verbose=False)
            diffs = compare_trees(args.out, Path(tmp), [s.name for s in specs])
        if diffs:
            print("NOT reproducible / out of date:\n  " + "\n  ".join(diffs))
            return 1
        print(f"OK: {len(specs)} fixtures regenerate byte-identically")
        return 0
    for s in specs:
        generate(s, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
