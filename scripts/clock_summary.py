#!/usr/bin/env python3
"""One line on what the GPU's clocks and power did between two times, from the samples that
scripts/bundle_env.sh's clocks_start takes (nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,
power.draw,power.limit,temperature.gpu,<clock reasons> --format=csv,noheader):

    clock_summary.py CSV T0 T1      (T0, T1: seconds since the epoch, the machine's clock)

e.g. "104 of 106 samples at work, SM 1965..1980 MHz (1980 in 103), memory 2619 MHz, power 673 W
median (683 max) of 700 W, 37..58 C, reasons at work: sw power cap in 1". Decode kernels bound by their
instruction chains run at the SM clock, so a row timed while the card held its clock down is
not comparable with one timed at full clock: this line goes beside the row.
"""
import collections
import datetime
import statistics
import sys

# nvidia-smi's clock event reason bits (nvml.h, nvmlClocksEventReason*).
REASONS = {
    0x1: "idle",
    0x2: "application clocks",
    0x4: "sw power cap",
    0x8: "hw slowdown",
    0x10: "sync boost",
    0x20: "sw thermal",
    0x40: "hw thermal",
    0x80: "hw power brake",
    0x100: "display clocks",
}


def number(field):
    """The leading number of a field such as '1980 MHz' or '672.47 W', or None."""
    try:
        return float(field.split()[0])
    except (ValueError, IndexError):
        return None


def samples(path, t0, t1):
    rows = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            fields = [x.strip() for x in line.split(",")]
            if len(fields) < 6:
                continue
            try:
                t = datetime.datetime.strptime(fields[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            except ValueError:
                continue  # a header or an error line
            if t0 <= t <= t1:
                rows.append(fields)
    return rows


def summary(rows):
    """The samples at work (power at least half the interval's highest: a model load or an idle
    wait is not what a timed row ran at), their SM clocks, power and clock event reasons."""
    if not rows:
        return "no clock samples in this interval"
    power = [number(r[3]) for r in rows]
    top = max((w for w in power if w is not None), default=None)
    busy = [r for r, w in zip(rows, power) if top is None or (w is not None and w >= 0.5 * top)]
    sm = [v for v in (number(r[1]) for r in busy) if v is not None]
    mem = [v for v in (number(r[2]) for r in busy) if v is not None]
    watts = [v for v in (number(r[3]) for r in busy) if v is not None]
    limit = [v for v in (number(r[4]) for r in busy) if v is not None]
    temp = [v for v in (number(r[5]) for r in rows) if v is not None]
    parts = [f"{len(busy)} of {len(rows)} samples at work"]
    if sm:
        best = max(sm)
        parts.append(f"SM {min(sm):.0f}..{best:.0f} MHz ({best:.0f} in {sum(1 for v in sm if v == best)})")
    if mem:
        parts.append(f"memory {statistics.median(mem):.0f} MHz")
    if watts:
        text = f"power {statistics.median(watts):.0f} W median ({max(watts):.0f} max)"
        if limit:
            text += f" of {max(limit):.0f} W"
        parts.append(text)
    if temp:
        parts.append(f"{min(temp):.0f}..{max(temp):.0f} C")
    seen = collections.Counter()
    for r in busy:
        if len(r) > 6:
            try:
                bits = int(r[6], 16)
            except ValueError:
                continue
            for bit, name in REASONS.items():
                if bits & bit:
                    seen[name] += 1
    if seen:
        parts.append("reasons at work: " + ", ".join(f"{name} in {n}" for name, n in seen.most_common()))
    elif len(rows[0]) > 6:
        parts.append("no clock event reasons at work")
    return ", ".join(parts)


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    print(summary(samples(sys.argv[1], float(sys.argv[2]), float(sys.argv[3]))))


if __name__ == "__main__":
    main()
