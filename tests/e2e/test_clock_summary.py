"""scripts/clock_summary.py: the line the device scripts print beside a timed run on what the GPU's
clocks and power did meanwhile, from nvidia-smi's CSV samples (no GPU needed: samples written
here in nvidia-smi's format)."""

from __future__ import annotations

import datetime
import importlib.util
import subprocess
import sys

from conftest import ROOT

SCRIPT = ROOT / "scripts" / "clock_summary.py"


def load():
    spec = importlib.util.spec_from_file_location("clock_summary", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


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


def test_counts_the_top_clock_power_and_reasons(tmp_path):
    csv = tmp_path / "clocks.csv"
    rows = [(345, 71.2, 0x1)] * 4 + [(1980, 672.0, 0x0)] * 9 + [(1965, 680.0, 0x4)] * 2 + [(1755, 699.0, 0x4 | 0x20)]
    t0 = write_samples(csv, rows)
    mod = load()
    # The idle samples before the run (the first four: 1 s) are left out by the interval.
    line = mod.summary(mod.samples(csv, t0 + 1.0, t0 + 60))
    assert line.startswith("SM 1980 MHz in 9 of 12 samples (1755..1980), memory 2619 MHz, "), line
    assert "power 672 W median (699 max) of 700 W" in line, line
    assert line.endswith("reasons: sw power cap in 3, sw thermal in 1"), line
    # Every sample: the idle ones count, and their reason with them.
    line = mod.summary(mod.samples(csv, t0, t0 + 60))
    assert "in 9 of 16 samples (345..1980)" in line and "idle in 4" in line, line


def test_no_reasons_and_no_samples(tmp_path):
    csv = tmp_path / "clocks.csv"
    t0 = write_samples(csv, [(1980, 600.0, 0x0)] * 3)
    mod = load()
    assert mod.summary(mod.samples(csv, t0, t0 + 1)).endswith("no clock event reasons")
    assert mod.summary(mod.samples(csv, t0 + 10, t0 + 20)) == "no clock samples in this interval"


def test_command_line(tmp_path):
    csv = tmp_path / "clocks.csv"
    t0 = write_samples(csv, [(1980, 650.0, 0x0)] * 2)
    out = subprocess.run([sys.executable, str(SCRIPT), str(csv), str(t0), str(t0 + 5)], capture_output=True,
                         text=True, check=True).stdout
    assert out.startswith("SM 1980 MHz in 2 of 2 samples"), out
    bad = subprocess.run([sys.executable, str(SCRIPT), str(csv)], capture_output=True, text=True)
    assert bad.returncode != 0 and "clock_summary.py CSV T0 T1" in bad.stderr
