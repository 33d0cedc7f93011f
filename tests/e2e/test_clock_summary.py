"""scripts/clock_summary.py: the line the device scripts print beside a timed run on what the GPU's
clocks and power did meanwhile, from nvidia-smi's CSV samples (no GPU needed: samples written
here in nvidia-smi's format)."""

from __future__ import annotations

import datetime
import subprocess
import sys

from conftest import ROOT, load_module

SCRIPT = ROOT / "scripts" / "clock_summary.py"


def load():
    return load_module(SCRIPT, "clock_summary")


def write_samples(path, rows, start=datetime.datetime(2026, 12, 6, 6, 6, 42)):
    """rows: (sm MHz, power W, reasons) every 250 ms from start; returns start as epoch seconds."""
    with open(path, "w", encoding="utf-8") as f:
        f.write("timestamp, clocks.current.sm [MHz], clocks.current.memory [MHz], power.draw [W], "
                "power.limit [W], temperature.gpu, clocks_event_reasons.active\n")  # a header: skipped
        for i, (sm, watts, reasons) in enumerate(rows):
            t = start + datetime.timedelta(milliseconds=250 * i)
            f.write(f"{t:%Y/%m/%d %H:%M:%S}.{t.microsecond // 1000:03d}, {sm} MHz, 2619 MHz, {watts:.2f} W, "
                    f"700.00 W, {40 + i % 5}, 0x{reasons:016x}\n")
        f.write("Unable to determine the device handle for GPU 0: Unknown Error\n")  # an error line: skipped
    return start.timestamp()


def test_samples_at_work_their_clocks_power_and_reasons(tmp_path):
    csv = tmp_path / "clocks.csv"
    # Idle before the run, a model load at low power, then the timed work, one sample held down.
    rows = ([(345, 71.2, 0x1)] * 4 + [(1980, 180.0, 0x0)] * 5 + [(1980, 672.0, 0x0)] * 9 +
            [(1965, 680.0, 0x4)] * 2 + [(1755, 699.0, 0x4 | 0x20)])
    t0 = write_samples(csv, rows)
    mod = load()
    line = mod.summary(mod.samples(csv, t0 + 1.0, t0 + 60))  # the four idle samples (1 s) left out
    assert line.startswith("12 of 17 samples at work, SM 1755..1980 MHz (1980 in 9), memory 2619 MHz, "), line
    assert "power 672 W median (699 max) of 700 W" in line, line
    assert line.endswith("reasons at work: sw power cap in 3, sw thermal in 1"), line
    # The idle samples are in the interval now, but not at work: the same samples count.
    line = mod.summary(mod.samples(csv, t0, t0 + 60))
    assert line.startswith("12 of 21 samples at work, SM 1755..1980 MHz") and "idle" not in line, line


def test_no_reasons_and_no_samples(tmp_path):
    csv = tmp_path / "clocks.csv"
    t0 = write_samples(csv, [(1980, 600.0, 0x0)] * 3)
    mod = load()
    assert mod.summary(mod.samples(csv, t0, t0 + 1)).endswith("no clock event reasons at work")
    assert mod.summary(mod.samples(csv, t0 + 10, t0 + 20)) == "no clock samples in this interval"


def test_command_line(tmp_path):
    csv = tmp_path / "clocks.csv"
    t0 = write_samples(csv, [(1980, 650.0, 0x0)] * 2)
    out = subprocess.run([sys.executable, str(SCRIPT), str(csv), str(t0), str(t0 + 5)], capture_output=True,
                         text=True, check=True).stdout
    assert out.startswith("2 of 2 samples at work, SM 1980..1980 MHz (1980 in 2)"), out
    bad = subprocess.run([sys.executable, str(SCRIPT), str(csv)], capture_output=True, text=True)
    assert bad.returncode != 0 and "clock_summary.py CSV T0 T1" in bad.stderr
