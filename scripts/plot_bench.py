#!/usr/bin/env python3
"""Plot `voltinfer bench --json` samples: decode tok/s and MBU against context length,
one line per (model weights, kernel profile), mean over repetitions with min-max bars.

    scripts/plot_bench.py bench.jsonl bench.png

MBU samples the bench refused (> 100%: a measurement error) are left out, never drawn.
"""
import json
import sys
from collections import defaultdict


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    try:
        import matplotlib
    except ImportError:
        sys.exit("plot_bench.py needs matplotlib (pip install matplotlib)")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tok_s = defaultdict(lambda: defaultdict(list))
    mbu = defaultdict(lambda: defaultdict(list))
    device = ""
    with open(sys.argv[1], encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            s = json.loads(line)
            if s.get("test") != "decode":
                continue
            device = s.get("device", device)
            key = f"{s['model']} [{s.get('weight_format', '?')}], {s.get('kernel_profile', '?')}, KV {s.get('kv_dtype', '?')}"
            tok_s[key][s["context"]].append(s["tok_s"])
            if s.get("mbu_pct") is not None:
                mbu[key][s["context"]].append(s["mbu_pct"])
    if not tok_s:
        sys.exit(f"{sys.argv[1]}: no decode samples")

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5))
    for ax, data, label in ((ax1, tok_s, "decode tok/s"), (ax2, mbu, "MBU (% of measured copy bandwidth)")):
        for key, by_ctx in sorted(data.items()):
            xs = sorted(by_ctx)
            mean = [sum(by_ctx[x]) / len(by_ctx[x]) for x in xs]
            lo = [m - min(by_ctx[x]) for m, x in zip(mean, xs)]
            hi = [max(by_ctx[x]) - m for m, x in zip(mean, xs)]
            ax.errorbar(xs, mean, yerr=[lo, hi], marker="o", capsize=3, label=key)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("context length (tokens)")
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
    ax2.set_ylim(0, 100)
    ax1.legend(fontsize=7)
    fig.suptitle(f"voltinfer decode, one sequence, no speculation — {device}")
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)
    print(f"wrote {sys.argv[2]}")


if __name__ == "__main__":
    main()
