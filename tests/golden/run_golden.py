#!/usr/bin/env python3
"""Run `voltinfer logits` on every golden fixture and compare with the transformers reference.

Each tiny fixture is run in up to four forms (--formats):
  hf         the fixture folder itself (config.json + model.safetensors)
  gguf-f32   the folder converted by hf_to_gguf.py as llama.cpp's converter would (f32 tensors):
             checks the GGUF loading paths (llama q/k un-permutation, tiled GVA head order, folded
             norms, ssm_a) against the same f32 reference
  gguf-f16   the same with f16 / q8_0 matrices; compared with logits that transformers computes
  gguf-q8_0  from the weights read back out of that GGUF file (quant_reference.py), so that the
             fp32 tolerance still applies (needs torch + transformers)
and for each form these runs:
  - each sequence i as one prompt                         vs logits_<i>
  - the decode sequence fed one token at a time (--decode) vs logits_decode_<d>
  - the decode sequence in 16-token batches (-b 16: chunked prefill that crosses the 64-token GDN
    chunk, continuing from cached state)                   vs logits_<d>  (HF prefill)
  - the decode sequence in calls of 37 + 33 tokens (-b 37) vs logits_chunked_<d>: HF's own cached
    multi-token continuation (calls 37,1,1,1,1,1,28), an independent reference for that path
(gguf-f16/q8_0: every run of the decode sequence against the rounded-weight prefill logits.)
For smollm2_hf (form hf only): the prompt through models/SmolLM2-135M-Instruct.Q4_1.gguf vs logits.

Usage:
  python3 tests/golden/run_golden.py --voltinfer build-x/voltinfer [fixture ...] [--formats hf,gguf-f32]
Exit status 0 when every comparison passes (skips are listed and do not fail).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
COMPARE = ROOT / "scripts" / "compare_logits.py"
sys.path.insert(0, str(HERE))
# Tolerance on max_rel_row (max |diff| / max |ref logit| per position). Everything here is float32:
# HF's own prefill vs decode paths differ by < 1e-5, and the CPU engine lands at ~1e-6..1e-5
# (SmolLM2 included: it dequantizes Q4_1 to f32 like transformers does; the f16/q8_0 GGUFs are
# compared with transformers running the very same rounded weights). fp16 GPU paths, or an
# engine that quantizes activations (Q8 dot products, like llama.cpp), need --tol ~3e-2.
DEFAULT_TOL = 1e-3
FORMATS = ["hf", "gguf-f32", "gguf-f16", "gguf-q8_0"]
CHUNKED_BATCH = 37  # first call of the reference's chunks_<d> = [37, 1, 1, 1, 1, 1, 28]


class Skip(Exception):
    pass


@dataclass
class Case:
    tokens: str
    extra: list[str]
    ref: Path
    ref_tensor: str
    note: str = ""


@dataclass
class Result:
    ok: bool | None  # None: skipped
    line: str


def fixture_names() -> list[str]:
    return sorted(p.parent.name for p in HERE.glob("*/reference.safetensors"))


def show_tokens(ref: Path, name: str) -> str:
    return subprocess.run([sys.executable, str(COMPARE), "--show-tokens", str(ref), "--ref-tensor", name],
                          check=True, capture_output=True, text=True).stdout.strip()


# Flags added to every voltinfer call (--extra-args), e.g. "--device cuda".
EXTRA_ARGS: list[str] = []


def run_case(voltinfer: Path, model: Path, case: Case, out: Path, tol: float, threads: int,
             label: str) -> Result:
    cmd = [str(voltinfer), "logits", "-m", str(model), "--tokens", case.tokens, "--out", str(out),
           "-t", str(threads), *case.extra, *EXTRA_ARGS]
    p = subprocess.run(cmd, capture_output=True, text=True)
    label = f"{label}:{case.ref_tensor}{' ' + ' '.join(case.extra) if case.extra else ''}{case.note}"
    if p.returncode != 0:
        return Result(False, f"[FAIL] {label}: voltinfer exited {p.returncode}\n  {p.stderr.strip()[-2000:]}")
    c = subprocess.run([sys.executable, str(COMPARE), str(out), str(case.ref), "--ref-tensor", case.ref_tensor,
                        "--tol", str(tol)], capture_output=True, text=True)
    lines = c.stdout.strip().splitlines()
    summary = " | ".join(l.strip() for l in lines[1:5])
    text = f"[{'ok' if c.returncode == 0 else 'FAIL'}] {label}: {summary}"
    if c.returncode != 0:
        text += "\n  " + "\n  ".join(l for l in lines if l.startswith("FAIL")) + c.stderr
    return Result(c.returncode == 0, text)


def fixture_cases(folder: Path, ref: Path, per_sequence: bool = True) -> list[Case]:
    meta = json.loads((folder / "meta.json").read_text())
    seqs = meta["sequences"]
    d = seqs["decode_seq"]
    cases = []
    if per_sequence:
        cases += [Case(show_tokens(ref, f"logits_{i}"), [], ref, f"logits_{i}") for i in range(len(seqs["lengths"]))]
    toks = show_tokens(ref, f"logits_{d}")
    cases += [Case(toks, ["--decode"], ref, f"logits_decode_{d}"),
              Case(toks, ["-b", "16"], ref, f"logits_{d}"),
              Case(toks, ["-b", str(CHUNKED_BATCH)], ref, f"logits_chunked_{d}",
                   f" (HF calls {list(seqs['chunks'])})")]
    return cases


def plan(name: str, fmt: str, work: Path) -> tuple[Path, list[Case]] | None:
    """The model to load and the comparisons to make for one fixture in one form; None when the
    form does not apply to the fixture; raises Skip when it applies but cannot run here."""
    folder = HERE / name
    ref = folder / "reference.safetensors"
    if not ref.is_file():
        raise FileNotFoundError(f"no fixture {folder}")
    meta = json.loads((folder / "meta.json").read_text())
    if name == "smollm2_hf":
        if fmt != "hf":
            return None  # already a GGUF model
        model = ROOT / "models" / meta["model_file"]
        if not model.is_file():
            raise Skip(f"{model} missing (see scripts/hf_smollm2_logits.py)")
        return model, [Case(show_tokens(ref, "logits"), [], ref, "logits")]
    if fmt == "hf":
        return folder, fixture_cases(folder, ref)

    import hf_to_gguf
    outtype = fmt.removeprefix("gguf-")
    model = work / f"{name}.{outtype}.gguf"
    try:
        hf_to_gguf.convert(folder, model, outtype)
    except hf_to_gguf.Unsupported as e:
        raise Skip(f"not expressible in GGUF: {e}") from None
    if outtype == "f32":
        return model, fixture_cases(folder, ref)
    try:
        import quant_reference
    except ImportError as e:  # torch / transformers missing
        raise Skip(f"needs torch + transformers for the rounded-weight reference ({e})") from None
    qref = work / f"{name}.{outtype}.reference.safetensors"
    try:
        quant_reference.write_reference(folder, model, qref)
    except ImportError as e:
        raise Skip(f"needs torch + transformers for the rounded-weight reference ({e})") from None
    except SystemExit as e:  # make_fixtures refuses to run with kernel packages installed
        raise Skip(f"rounded-weight reference not computed: {e}") from None
    d = meta["sequences"]["decode_seq"]
    toks = show_tokens(ref, f"logits_{d}")
    return model, [Case(toks, extra, qref, f"logits_{d}", " (rounded-weight HF reference)")
                   for extra in ([], ["--decode"], ["-b", "16"], ["-b", str(CHUNKED_BATCH)])]


def run_fixture(voltinfer: Path, name: str, fmt: str, work: Path, tol: float | None = None,
                threads: int = 1) -> list[Result]:
    label = name if fmt == "hf" else f"{name}[{fmt}]"
    try:
        p = plan(name, fmt, work)
    except Skip as e:
        return [Result(None, f"[skip] {label}: {e}")]
    if p is None:
        return []
    model, cases = p
    out = work / "ours.safetensors"
    return [run_case(voltinfer, model, c, out, tol if tol is not None else DEFAULT_TOL, threads, label)
            for c in cases]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("fixtures", nargs="*", help="fixture names (default: all under tests/golden)")
    ap.add_argument("--voltinfer", type=Path, default=Path(os.environ.get("VOLTINFER", ROOT / "build" / "voltinfer")))
    ap.add_argument("--formats", default=",".join(FORMATS),
                    help=f"comma-separated forms to run (default: all of {','.join(FORMATS)})")
    ap.add_argument("--tol", type=float, help="override the tolerance for every comparison")
    ap.add_argument("-t", "--threads", type=int, default=1)
    ap.add_argument("--extra-args", default="",
                    help='flags passed to every voltinfer call, e.g. "--device cuda --kernel-profile volta"')
    args = ap.parse_args()
    EXTRA_ARGS[:] = shlex.split(args.extra_args)
    if not args.voltinfer.is_file():
        print(f"error: {args.voltinfer} not found (build it, or pass --voltinfer / set $VOLTINFER)", file=sys.stderr)
        return 2
    formats = [f for f in args.formats.split(",") if f]
    bad = [f for f in formats if f not in FORMATS]
    if bad:
        print(f"error: unknown format(s) {bad}; known: {', '.join(FORMATS)}", file=sys.stderr)
        return 2
    names = args.fixtures or fixture_names()
    for n in names:
        if not (HERE / n / "reference.safetensors").is_file():
            print(f"error: no fixture {HERE / n}", file=sys.stderr)
            return 2

    n_ok = n_fail = n_skip = 0
    with tempfile.TemporaryDirectory() as tmp:
        for fmt in formats:
            for name in names:
                for r in run_fixture(args.voltinfer, name, fmt, Path(tmp), args.tol, args.threads):
                    print(r.line, flush=True)
                    n_ok += r.ok is True
                    n_fail += r.ok is False
                    n_skip += r.ok is None
    print(f"{n_ok} passed, {n_fail} failed, {n_skip} skipped")
    print("ALL PASS" if n_fail == 0 else "SOME FAILED")
    return 0 if n_fail == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
