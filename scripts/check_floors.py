#!/usr/bin/env python3
"""Issue #7's performance floors, read from the JSON lines of `voltinfer bench --json`:

    check_floors.py BENCH.jsonl [BENCH.jsonl ...] [--strict]

One table per configuration (device, weights, kernel profile, KV cache, int8 activations, SMs of
the graphs): decode MBU at 8K and 128K context, the 4-token verify round over the 1-token decode
round at each, prefill MFU of 8K and 32K prompts; each with its floor, the project's goal and a
verdict. Every figure is the mean over the files' repetitions and prompt styles (the bench's
own table gives a row per style; the spread is beside the mean). The round ratio divides the
4-token verify round's median by the decode round's mean, the figure each bench row carries. The floors hold for the native kernel profile; the volta profile's
figures are printed beside them without a verdict (issue #7 asks for them and for the reason of
any gap, not for a floor). A row whose MBU or MFU the bench refused (over 100%) is reported as
refused, never counted. Decode rounds of a partition (`bench --sms N`) are a proxy, labelled so.

Exit status: 0; with --strict, 1 when a native configuration on a whole card (not a proxy)
misses a floor it was measured against; 2 when the files hold no decode, verify or prefill row.
"""
from __future__ import annotations

import collections
import json
import statistics
import sys

# (name, kind, key, floor, goal): kind "mbu" / "mfu" higher is better, "ratio" lower is better.
FLOORS = [
    ("decode MBU at 8K", "mbu", 8192, 75.0, 85.0),
    ("decode MBU at 128K", "mbu", 131072, 65.0, 80.0),
    ("4-token round / 1-token round at 8K", "ratio", 8192, 1.3, 1.15),
    ("4-token round / 1-token round at 128K", "ratio", 131072, 1.3, 1.15),
    ("prefill MFU, 8K prompt", "mfu", 8192, 35.0, 55.0),
    ("prefill MFU, 32K prompt", "mfu", 32768, 35.0, 55.0),
]


def config_of(r: dict) -> tuple:
    sms = r.get("graph_sms")
    return (r.get("device", "?"), r.get("weight_format", "?"), r.get("kernel_profile", "?"),
            r.get("kv_dtype") or "?", bool(r.get("int8_activations")), sms, bool(r.get("cuda_graphs", True)))


def label(cfg: tuple) -> str:
    device, weights, profile, kv, i8act, sms, graphs = cfg
    parts = [device, f"weights {weights}", f"profile {profile}", f"KV {kv}"]
    if i8act:
        parts.append("int8 activations")
    if sms:
        parts.append(f"graphs on {sms} SMs (a proxy)")
    if not graphs:
        parts.append("no CUDA graphs")
    return ", ".join(parts)


def load(paths: list[str]) -> dict:
    """config -> {"decode": {ctx: [rec]}, "verify": {(ctx, T): [rec]}, "prefill": {P: [rec]}}"""
    groups: dict = collections.defaultdict(lambda: {"decode": collections.defaultdict(list),
                                                    "verify": collections.defaultdict(list),
                                                    "prefill": collections.defaultdict(list)})
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    r = json.loads(line)
                except json.JSONDecodeError as e:
                    raise SystemExit(f"{path}:{n}: not a JSON line ({e.msg})")
                test = r.get("test")
                if test not in ("decode", "verify", "prefill") or r.get("speculation", "none") != "none":
                    continue  # the ceilings row; speculative rounds are not the rounds the floors speak of
                g = groups[config_of(r)]
                if test == "decode":
                    g["decode"][r["context"]].append(r)
                elif test == "verify":
                    g["verify"][(r["context"], r["tokens"])].append(r)
                elif test == "prefill":
                    g["prefill"][r["prompt_tokens"]].append(r)
    return groups


def mean_spread(xs: list[float], fmt: str) -> str:
    m = statistics.fmean(xs)
    if len(xs) == 1:
        return fmt.format(m) + " (1 run)"
    return f"{fmt.format(m)} ({fmt.format(min(xs))}–{fmt.format(max(xs))}, {len(xs)} runs)"


def measure(g: dict, kind: str, key: int):
    """(value or None, text): the mean over runs, or why there is none."""
    if kind in ("mbu", "mfu"):
        recs = g["decode" if kind == "mbu" else "prefill"].get(key, [])
        if not recs:
            return None, "not measured"
        field, err = (f"{kind}_pct", f"{kind}_error")
        refused = [r[err] for r in recs if r.get(field) is None and r.get(err)]
        if refused:
            return None, f"refused by the bench: {refused[0]}"
        xs = [r[field] for r in recs if r.get(field) is not None]
        if not xs:
            return None, "not measured (no bandwidth or tensor peak in the run)"
        if max(xs) > 100:
            return None, f"refused: {max(xs):.1f}% > 100% is a measurement error"
        text = mean_spread(xs, "{:.1f}%")
        if kind == "mbu":
            text += f", {statistics.fmean(r['round_ms_mean'] for r in recs):.2f} ms a round"
        return statistics.fmean(xs), text
    one = g["decode"].get(key, [])
    four = g["verify"].get((key, 4), [])
    if not one or not four:
        return None, "not measured" + (" (no 4-token verify round)" if one else "")
    t1 = statistics.fmean(r["round_ms_mean"] for r in one)
    t4 = statistics.fmean(r["round_ms_median"] for r in four)
    return t4 / t1, f"{t4 / t1:.2f}x ({t4:.2f} / {t1:.2f} ms)"


def verdict(kind: str, value, floor: float, goal: float) -> str:
    if value is None:
        return "—"
    better = (lambda a, b: a >= b) if kind in ("mbu", "mfu") else (lambda a, b: a <= b)
    if better(value, goal):
        return "met, goal too"
    return "met" if better(value, floor) else "**not met**"


def report(groups: dict) -> tuple[str, int]:
    lines, missed = [], 0
    for cfg in sorted(groups, key=lambda c: tuple(str(x) for x in c)):
        g = groups[cfg]
        native, proxy = cfg[2] == "native", bool(cfg[5])
        lines += ["", f"### {label(cfg)}", "",
                  "| floor | measured | floor | goal | verdict |", "| --- | --- | ---: | ---: | --- |"]
        for name, kind, key, floor, goal in FLOORS:
            value, text = measure(g, kind, key)
            bound = f"≥ {floor:g}%" if kind != "ratio" else f"≤ {floor:g}x"
            aim = f"{goal:g}%" if kind != "ratio" else f"{goal:g}x"
            v = verdict(kind, value, floor, goal) if native else "beside (volta profile: no floor)"
            if native and v == "**not met**":
                if proxy:
                    v += " (proxy)"  # not the card the floor is for: not counted
                else:
                    missed += 1
            lines.append(f"| {name} | {text} | {bound} | {aim} | {v} |")
    return "\n".join(lines).lstrip("\n") + "\n", missed


def main(argv: list[str]) -> int:
    strict = "--strict" in argv
    paths = [a for a in argv if a != "--strict"]
    if not paths or any(a.startswith("-") for a in paths):
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    groups = load(paths)
    if not any(g["decode"] or g["verify"] or g["prefill"] for g in groups.values()):
        print("no decode, verify or prefill rows in " + ", ".join(paths), file=sys.stderr)
        return 2
    text, missed = report(groups)
    sys.stdout.write(text)
    if missed:
        print(f"\n{missed} floor(s) not met in the native profile.")
    return 1 if strict and missed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
