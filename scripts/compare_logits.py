#!/usr/bin/env python3
"""Compare two logits tensors stored in safetensors files (ours vs a reference).

Typical use, with a golden fixture:
  voltinfer logits -m tests/golden/qwen35_c --tokens "$(scripts/compare_logits.py --show-tokens \\
      tests/golden/qwen35_c/reference.safetensors --ref-tensor logits_2)" --out /tmp/ours.safetensors
  scripts/compare_logits.py /tmp/ours.safetensors tests/golden/qwen35_c/reference.safetensors --ref-tensor logits_2

Both tensors must be float [T, vocab] (ours defaults to `logits`, as `voltinfer logits` writes it).
If both files hold the token ids (`tokens` in ours; `tokens_<i>` or `tokens` next to the reference) they
must be equal. Printed per comparison:
  max_abs        max |ours - ref|
  max_rel_row    max over positions of max_v |ours - ref| / max_v |ref|   (scale-free; the pass criterion)
  max_rel_elem   max |ours - ref| / |ref| over elements with |ref| >= tiny * max_v |ref| of their row
  argmax         positions whose argmax agrees; a disagreement is tolerated only where the reference's
                 top-2 margin is <= 2 * tol * row max (a near-tie that in-tolerance errors can swap),
                 unless --strict-argmax
Exit status: 0 within tolerance, 1 over tolerance / argmax failure / token mismatch, 2 bad input.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np


class InputError(Exception):
    pass


def load_tensor(path: Path, name: str) -> np.ndarray:
    from safetensors import safe_open
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    try:
        with safe_open(str(path), framework="numpy") as f:
            names = list(f.keys())
            if name not in names:
                raise InputError(f"{path}: no tensor '{name}' (has: {', '.join(sorted(names))})")
            return f.get_tensor(name)
    except InputError:
        raise
    except Exception as e:  # corrupt header, unsupported dtype, ...
        raise InputError(f"{path}: cannot read safetensors file: {e}") from e


def maybe_tensor(path: Path, name: str) -> np.ndarray | None:
    try:
        return load_tensor(path, name)
    except InputError:
        return None


def tokens_name_for(logits_name: str) -> str:
    """logits_2 / logits_decode_2 / logits_chunked_2 -> tokens_2; logits -> tokens."""
    m = re.fullmatch(r"logits(?:_[a-z]+)?_(\d+)", logits_name)
    return f"tokens_{m.group(1)}" if m else "tokens"


def compare(ours: np.ndarray, ref: np.ndarray, tiny: float, tol: float) -> dict:
    a = ours.astype(np.float64)
    r = ref.astype(np.float64)
    d = np.abs(a - r)                                   # [T, V]
    row_scale = np.maximum(np.abs(r).max(axis=1), 1e-30)  # [T]
    row_err = d.max(axis=1)                             # [T]
    rel_row = row_err / row_scale
    big = np.abs(r) >= tiny * row_scale[:, None]
    rel_elem = np.where(big, d / np.maximum(np.abs(r), 1e-30), 0.0)
    am_ours, am_ref = a.argmax(axis=1), r.argmax(axis=1)
    top2 = np.sort(r, axis=1)[:, -2:] if r.shape[1] > 1 else np.concatenate([r, r], axis=1)
    margin = top2[:, 1] - top2[:, 0]                    # reference top-1 minus top-2
    disagree = np.nonzero(am_ours != am_ref)[0]
    # Errors within the tolerance (tol * row max each way) can swap two leaders only when their
    # reference margin is below 2 * tol * row max: such flips are near-ties, the others are real.
    tie_limit = 2.0 * tol * row_scale
    near_tie = [int(t) for t in disagree if margin[t] <= tie_limit[t]]
    hard = [int(t) for t in disagree if margin[t] > tie_limit[t]]
    worst_t = int(rel_row.argmax())
    return {
        "T": a.shape[0], "V": a.shape[1],
        "max_abs": float(d.max()),
        "max_rel_row": float(rel_row.max()),
        "worst_pos": worst_t,
        "worst_vocab": int(d[worst_t].argmax()),
        "max_rel_elem": float(rel_elem.max()),
        "argmax_agree": int(a.shape[0] - len(disagree)),
        "argmax_near_tie": near_tie,
        "argmax_hard": hard,
        "margin": margin, "am_ours": am_ours, "am_ref": am_ref,
        "rel_row": rel_row,
        "finite": bool(np.isfinite(a).all()),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ours", type=Path, nargs="?", help="our safetensors file")
    ap.add_argument("ref", type=Path, help="reference safetensors file")
    ap.add_argument("--ours-tensor", default="logits", help="tensor name in OURS (default: logits)")
    ap.add_argument("--ref-tensor", default="logits", help="tensor name in REF (default: logits)")
    ap.add_argument("--tol", type=float, default=1e-3, help="max allowed max_rel_row (default 1e-3)")
    ap.add_argument("--tiny", type=float, default=1e-2,
                    help="elements with |ref| < tiny * row max are left out of max_rel_elem (default 1e-2)")
    ap.add_argument("--strict-argmax", action="store_true", help="fail on any argmax disagreement")
    ap.add_argument("--no-token-check", action="store_true", help="do not compare stored token ids")
    ap.add_argument("--per-position", action="store_true", help="print one line per position")
    ap.add_argument("--show-tokens", action="store_true",
                    help="only print REF's token ids for --ref-tensor as 1,2,3 (for voltinfer --tokens)")
    args = ap.parse_args(argv)

    try:
        if args.show_tokens:
            # With --show-tokens the single positional argument is the reference file.
            path = args.ref if args.ours is None else args.ours
            toks = load_tensor(path, tokens_name_for(args.ref_tensor))
            print(",".join(str(int(t)) for t in toks))
            return 0
        if args.ours is None:
            ap.error("need OURS and REF files")
        ours = load_tensor(args.ours, args.ours_tensor)
        ref = load_tensor(args.ref, args.ref_tensor)
        for path, name, t in ((args.ours, args.ours_tensor, ours), (args.ref, args.ref_tensor, ref)):
            if t.ndim != 2 or not np.issubdtype(t.dtype, np.floating):
                raise InputError(f"{path}: tensor '{name}' is {t.dtype} {list(t.shape)}, want float [T, vocab]")
        if ours.shape != ref.shape:
            raise InputError(f"shape mismatch: ours '{args.ours_tensor}' {list(ours.shape)} vs "
                             f"ref '{args.ref_tensor}' {list(ref.shape)}")
        if not np.isfinite(ref).all():
            raise InputError(f"{args.ref}: reference '{args.ref_tensor}' has non-finite values")
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    failures = []
    if not args.no_token_check:
        t_ours = maybe_tensor(args.ours, "tokens")
        t_ref = maybe_tensor(args.ref, tokens_name_for(args.ref_tensor))
        if t_ours is not None and t_ref is not None:
            if t_ours.shape != t_ref.shape or not np.array_equal(t_ours.astype(np.int64), t_ref.astype(np.int64)):
                failures.append("token ids differ (ours 'tokens' vs ref "
                                f"'{tokens_name_for(args.ref_tensor)}'): the logits are for different inputs")

    s = compare(ours, ref, args.tiny, args.tol)
    if not s["finite"]:
        failures.append("our logits contain NaN/Inf")
    print(f"{args.ours.name}:{args.ours_tensor} vs {args.ref.name}:{args.ref_tensor}  [T={s['T']}, V={s['V']}]")
    print(f"  max_abs      {s['max_abs']:.3e}")
    print(f"  max_rel_row  {s['max_rel_row']:.3e}   (worst position {s['worst_pos']}, vocab id {s['worst_vocab']}; "
          f"tolerance {args.tol:g})")
    print(f"  max_rel_elem {s['max_rel_elem']:.3e}   (|ref| >= {args.tiny:g} x row max)")
    print(f"  argmax       {s['argmax_agree']}/{s['T']} positions agree"
          + (f"; near-tie flips at {s['argmax_near_tie']}" if s["argmax_near_tie"] else "")
          + (f"; FLIPS at {s['argmax_hard']}" if s["argmax_hard"] else ""))
    if args.per_position:
        for t in range(s["T"]):
            print(f"    pos {t:4d}  rel_row {s['rel_row'][t]:.3e}  argmax ours {s['am_ours'][t]:6d} "
                  f"ref {s['am_ref'][t]:6d}  ref margin {s['margin'][t]:.3e}")

    if not s["max_rel_row"] <= args.tol:  # also catches NaN
        failures.append(f"max_rel_row {s['max_rel_row']:.3e} > tolerance {args.tol:g}")
    if s["argmax_hard"]:
        failures.append(f"argmax differs at positions {s['argmax_hard']} where the reference top-2 margin "
                        "exceeds what in-tolerance errors can explain")
    if args.strict_argmax and s["argmax_near_tie"]:
        failures.append(f"argmax differs at near-tie positions {s['argmax_near_tie']} (--strict-argmax)")
    if failures:
        for f in failures:
            print(f"FAIL: {f}")
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
