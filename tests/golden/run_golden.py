#!/usr/bin/env python3
"""Run `voltinfer logits` on every golden fixture and compare with the transformers reference.

For a fixture folder with config.json + model.safetensors (made by make_fixtures.py):
  - each sequence i as one prompt                         vs logits_<i>
  - the decode sequence fed one token at a time (--decode) vs logits_decode_<d>
  - the decode sequence in 16-token batches (-b 16: chunked prefill that crosses the 64-token GDN
    chunk, continuing from cached state)                   vs logits_<d>
For smollm2_hf: the prompt's token ids through models/SmolLM2-135M-Instruct.Q4_1.gguf vs logits.

Usage:
  python3 tests/golden/run_golden.py --voltinfer build-x/voltinfer [fixture ...] [--tol 1e-3]
Exit status 0 when every comparison passes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
COMPARE = ROOT / "scripts" / "compare_logits.py"
# Tolerance on max_rel_row (max |diff| / max |ref logit| per position). Everything here is float32:
# HF's own prefill vs decode paths differ by < 1e-5, and the CPU engine lands at ~1e-6..1e-5
# (SmolLM2 included: it dequantizes Q4_1 to f32 like transformers does). fp16 GPU paths, or an
# engine that quantizes activations (Q8 dot products, like llama.cpp), need --tol ~3e-2.
DEFAULT_TOL = 1e-3


def show_tokens(ref: Path, name: str) -> str:
    return subprocess.run([sys.executable, str(COMPARE), "--show-tokens", str(ref), "--ref-tensor", name],
                          check=True, capture_output=True, text=True).stdout.strip()


def run_case(voltinfer: Path, model: Path, tokens: str, extra: list[str], out: Path, ref: Path,
             ref_tensor: str, tol: float, threads: int) -> bool:
    cmd = [str(voltinfer), "logits", "-m", str(model), "--tokens", tokens, "--out", str(out),
           "-t", str(threads), *extra]
    p = subprocess.run(cmd, capture_output=True, text=True)
    label = f"{ref.parent.name}:{ref_tensor}{' ' + ' '.join(extra) if extra else ''}"
    if p.returncode != 0:
        print(f"[FAIL] {label}: voltinfer exited {p.returncode}\n  {p.stderr.strip()[-2000:]}")
        return False
    c = subprocess.run([sys.executable, str(COMPARE), str(out), str(ref), "--ref-tensor", ref_tensor,
                        "--tol", str(tol)], capture_output=True, text=True)
    lines = c.stdout.strip().splitlines()
    summary = " | ".join(l.strip() for l in lines[1:5])
    print(f"[{'ok' if c.returncode == 0 else 'FAIL'}] {label}: {summary}")
    if c.returncode != 0:
        print("  " + "\n  ".join(l for l in lines if l.startswith("FAIL")) + c.stderr)
    return c.returncode == 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("fixtures", nargs="*", help="fixture names (default: all under tests/golden)")
    ap.add_argument("--voltinfer", type=Path, default=Path(os.environ.get("VOLTINFER", ROOT / "build" / "voltinfer")))
    ap.add_argument("--tol", type=float, help="override the tolerance for every fixture")
    ap.add_argument("-t", "--threads", type=int, default=1)
    args = ap.parse_args()
    if not args.voltinfer.is_file():
        print(f"error: {args.voltinfer} not found (build it, or pass --voltinfer / set $VOLTINFER)", file=sys.stderr)
        return 2

    names = args.fixtures or sorted(p.parent.name for p in HERE.glob("*/reference.safetensors"))
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "ours.safetensors"
        for name in names:
            folder = HERE / name
            ref = folder / "reference.safetensors"
            if not ref.is_file():
                print(f"error: no fixture {folder}", file=sys.stderr)
                return 2
            tol = args.tol if args.tol is not None else DEFAULT_TOL
            meta = json.loads((folder / "meta.json").read_text())
            if name == "smollm2_hf":
                model = ROOT / "models" / meta["model_file"]
                if not model.is_file():
                    print(f"[skip] {name}: {model} missing (see scripts/hf_smollm2_logits.py)")
                    continue
                ok &= run_case(args.voltinfer, model, show_tokens(ref, "logits"), [], out, ref, "logits",
                               tol, args.threads)
                continue
            seqs = meta["sequences"]
            for i in range(len(seqs["lengths"])):
                ok &= run_case(args.voltinfer, folder, show_tokens(ref, f"logits_{i}"), [], out, ref,
                               f"logits_{i}", tol, args.threads)
            d = seqs["decode_seq"]
            toks = show_tokens(ref, f"logits_{d}")
            ok &= run_case(args.voltinfer, folder, toks, ["--decode"], out, ref, f"logits_decode_{d}",
                           tol, args.threads)
            ok &= run_case(args.voltinfer, folder, toks, ["-b", "16"], out, ref, f"logits_{d}",
                           tol, args.threads)
    print("ALL PASS" if ok else "SOME FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
