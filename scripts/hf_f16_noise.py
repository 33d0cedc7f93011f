#!/usr/bin/env python3
"""How far float16 inference moves the golden fixtures' logits in Hugging Face transformers itself.

The GPU model test `GoldenOnGpu.RecordedStepsMatchOpByOpSteps` (tests/unit/cuda/test_models_gpu.cpp)
feeds fresh random tokens (a 250-token prefill, then one token a step up to 520) to a golden model
in f16 on the GPU and in f32 on the CPU, and bounds max |Δlogit| / row max. Whether a rare large
value there is f16 rounding or a fault of our kernels needs a measure of what f16 alone does to
these tiny random models: this script runs the same protocol through transformers, the model
once in float32 and once in float16 on the same device (on a GPU with TF32 and cuBLAS's reduced-
precision f16 reductions off), with its own cache, and prints per draw the error of the prefill's
last row and the median, 90th percentile and worst of the decode steps' errors.

Usage (a machine with torch and transformers; the CPU by default, as docs/GPU_TESTS.md's figures):
  python3 scripts/hf_f16_noise.py [--draws 4] [--device cpu|cuda] [fixture ...]
  python3 scripts/hf_f16_noise.py --prefill 37 --end 41 --all-prefill-rows   (the protocol of
      PrefillThenDecodeMatchesCpu: a 37-token prompt, all its rows compared, then 4 steps)
Prints one line per draw and a summary per fixture; --json FILE writes every value. On the CPU
a draw of 520 tokens takes ~8 s.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden"
PREFILL, END = 250, 520  # RecordedStepsMatchOpByOpSteps' protocol (PrefillThenDecodeMatchesCpu: 37, 41)


def worst_rel(a, b) -> float:
    """max over rows of max |a - b| / max |b| (b the f32 logits), inf for a non-finite a."""
    import torch
    a, b = a.double(), b.double()
    if not torch.isfinite(a).all():
        return math.inf
    return float(((a - b).abs().amax(dim=-1) / b.abs().amax(dim=-1)).max())


def load(folder: Path, dtype, device):
    import transformers
    cfg = json.loads((folder / "config.json").read_text())
    cls = getattr(transformers, cfg["architectures"][0])
    return cls.from_pretrained(folder, dtype=dtype, attn_implementation="eager").to(device).eval()


def step(model, ids, cache, all_rows: bool = False):
    out = model(input_ids=ids, cache=cache, use_cache=True)
    for name in ("cache", "past_key_values"):  # the output's name for it differs between versions
        if getattr(out, name, None) is not None:
            cache = getattr(out, name)
            break
    return out.logits[0, slice(None) if all_rows else slice(-1, None)].float(), cache


def run_draw(m32, m16, vocab: int, gen, device, prefill: int = PREFILL, end: int = END,
             all_rows: bool = False) -> dict:
    import torch
    from transformers import DynamicCache
    toks = torch.randint(0, vocab, (1, end), generator=gen).to(device)
    c32, c16 = DynamicCache(config=m32.config), DynamicCache(config=m16.config)
    errs, worst, at = [], 0.0, 0
    with torch.no_grad():
        l32, c32 = step(m32, toks[:, :prefill], c32, all_rows)
        l16, c16 = step(m16, toks[:, :prefill], c16, all_rows)
        prefill_err = worst_rel(l16, l32)
        for pos in range(prefill, end):
            l32, c32 = step(m32, toks[:, pos:pos + 1], c32)
            l16, c16 = step(m16, toks[:, pos:pos + 1], c16)
            e = worst_rel(l16, l32)
            errs.append(e)
            if e > worst:
                worst, at = e, pos
    errs.sort()
    return {"prefill": prefill_err, "decode_worst": worst, "decode_worst_at": at,
            "decode_median": errs[len(errs) // 2], "decode_p90": errs[int(0.9 * len(errs))]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("fixtures", nargs="*", help="golden fixture names (default: every Qwen3.5 one)")
    ap.add_argument("--draws", type=int, default=4, help="token draws per fixture")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--prefill", type=int, default=PREFILL, help="prompt tokens, then one token a step")
    ap.add_argument("--end", type=int, default=END, help="tokens in all")
    ap.add_argument("--all-prefill-rows", action="store_true",
                    help="the prefill's error over all its rows (PrefillThenDecodeMatchesCpu), not the last")
    ap.add_argument("--json", help="write every draw's values here")
    a = ap.parse_args()
    if a.draws < 1 or a.prefill < 1 or a.end <= a.prefill:
        print(f"need --draws >= 1 and 1 <= --prefill < --end (got {a.draws}, {a.prefill}, {a.end})", file=sys.stderr)
        return 2
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    names = a.fixtures or sorted(p.name for p in GOLDEN.glob("qwen35_*") if (p / "config.json").exists())
    if not names:
        print(f"no fixtures under {GOLDEN}", file=sys.stderr)
        return 1
    missing = [n for n in names if not (GOLDEN / n / "config.json").exists()]
    if missing:
        print(f"no golden fixture {', '.join(missing)} under {GOLDEN}", file=sys.stderr)
        return 2
    results = {}
    for name in names:
        folder = GOLDEN / name
        m32, m16 = load(folder, torch.float32, a.device), load(folder, torch.float16, a.device)
        vocab = m32.config.vocab_size
        gen = torch.Generator().manual_seed(a.seed)
        rows = []
        for d in range(a.draws):
            r = run_draw(m32, m16, vocab, gen, a.device, a.prefill, a.end, a.all_prefill_rows)
            rows.append(r)
            print(f"{name} draw {d}: prefill {r['prefill']:.2e}, decode steps: median {r['decode_median']:.2e}, "
                  f"90th percentile {r['decode_p90']:.2e}, worst {r['decode_worst']:.2e} at {r['decode_worst_at']}",
                  flush=True)
        w = sorted(r["decode_worst"] for r in rows)
        med = sorted(r["decode_median"] for r in rows)
        both = sorted(max(r["prefill"], r["decode_worst"]) for r in rows)
        print(f"{name}: HF f16 against f32 over {len(w)} draws of {a.end} tokens: worst decode step per draw "
              f"min {w[0]:.2e}, median {w[len(w) // 2]:.2e}, max {w[-1]:.2e}; median decode step per draw "
              f"max {med[-1]:.2e}; worst of prefill and steps per draw: median {both[len(both) // 2]:.2e}, "
              f"99th percentile {both[int(0.99 * len(both))]:.2e}, max {both[-1]:.2e}", flush=True)
        results[name] = rows
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
