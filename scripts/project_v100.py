#!/usr/bin/env python3
"""Projects a decode round of the volta kernel profile from an H200 `voltinfer bench
--profile-ops` markdown file (scripts/gpu_bench.sh's bench.md) onto V100s. A projection,
not a measurement: each op that moves more than 100 GB/s on the H200 costs the larger of
(a) its bytes over the V100's copy bandwidth and (b) its H200 time times the ratio of
SM-cycles per second; the other ops and the launch gaps keep their H200 time. TP2 halves the
bandwidth-bound ops and adds one all-reduce latency per all-reduce (two per layer).

  scripts/project_v100.py bench.md [--weights q4_k] [--v100-gbs 800] [--ctx 186000]"""

from __future__ import annotations

import argparse
import re


def tables(md: str, weights: str):
    """{context: (rows, unprofiled_ms)} of the volta-profile decode tables for `weights`."""
    out = {}
    for sec in re.split(r"^### ", md, flags=re.M):
        m = re.match(r"Decode round at context (\d+) .* profile volta, (\S+) ", sec)
        if not m or m.group(2) != weights:
            continue
        rows = []
        for line in sec.splitlines():
            c = [x.strip() for x in line.strip().strip("|").split("|")]
            if len(c) == 8 and c[3].replace(".", "").isdigit() and not c[0].startswith("**"):
                rows.append((c[0], c[2], float(c[4]), float(c[5])))  # op, shape, µs, MB
        unprof = float(re.search(r"unprofiled: [\d.]+ ms vs ([\d.]+) ms", sec).group(1))
        out[int(m.group(1))] = (rows, unprof)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bench_md")
    ap.add_argument("--weights", default="q4_k")
    ap.add_argument("--v100-gbs", type=float, default=800.0, help="V100 copy bandwidth (900 GB/s theoretical)")
    ap.add_argument("--cycle-ratio", type=float, default=132 * 1.98 / (80 * 1.53),
                    help="H200 / V100 SM-cycles per second")
    ap.add_argument("--ctx", type=int, default=186000, help="also project the largest table to this context")
    ap.add_argument("--allreduce-us", default="15,50", help="per all-reduce: NVLink, through host memory")
    a = ap.parse_args()
    t = tables(open(a.bench_md).read(), a.weights)
    if not t:
        raise SystemExit(f"no volta-profile decode tables for {a.weights} in {a.bench_md}")
    n_layers_allreduce = 128  # 64 layers x (mixer + MLP) for the 27B shape
    ar = [float(x) for x in a.allreduce_us.split(",")]
    print("| context | bytes/round GB | floor ms | 1 GPU ms (tok/s) | TP2 NVLink ms (tok/s) | TP2 no P2P ms (tok/s) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    largest = max(t)
    jobs = [(c, c, 1.0) for c in sorted(t)] + [(largest, a.ctx, a.ctx / largest)]
    for src, ctx, scale in jobs:
        rows, unprof = t[src]
        big = [r for r in rows if r[3] / r[2] > 0.1]  # MB/µs = TB/s: above 100 GB/s
        fixed = unprof - sum(r[2] for r in big) / 1000
        gb = ms = 0.0
        for op, _, us, mb in big:
            f = scale if op == "paged_attention" else 1.0
            b = mb * f / 1000
            gb += b
            ms += max(b / a.v100_gbs * 1000, us * f / 1000 * a.cycle_ratio)
        one = ms + fixed
        tp = [ms / 2 + fixed + n_layers_allreduce * x / 1000 for x in ar]
        print(f"| {ctx} | {gb:.2f} | {gb / a.v100_gbs * 1000:.1f} | {one:.1f} ({1000 / one:.1f}) | "
              f"{tp[0]:.1f} ({1000 / tp[0]:.1f}) | {tp[1]:.1f} ({1000 / tp[1]:.1f}) |")


if __name__ == "__main__":
    main()
