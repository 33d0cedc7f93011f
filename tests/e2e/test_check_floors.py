"""scripts/check_floors.py: issue #7's floors from `voltinfer bench --json` lines (no GPU needed:
rows written here in the bench's format)."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import ROOT

SCRIPT = ROOT / "scripts" / "check_floors.py"
DEVICE = "NVIDIA H200 (sm_90, 132 SMs)"


def base(profile="native", **kw):
    r = {"device": DEVICE, "weight_format": "q4_k 100%", "kernel_profile": profile, "kv_dtype": "i8",
         "int8_activations": False, "graph_sms": None, "cuda_graphs": True, "speculation": "none"}
    r.update(kw)
    return r


def decode(ctx, mbu, ms, rep, **kw):
    return base(test="decode", context=ctx, mbu_pct=mbu, mbu_error=None, round_ms_mean=ms, rep=rep, **kw)


def verify(ctx, tokens, ms, **kw):
    return base(test="verify", context=ctx, tokens=tokens, round_ms_median=ms, **kw)


def prefill(p, mfu, **kw):
    return base(test="prefill", prompt_tokens=p, mfu_pct=mfu, mfu_error=None, **kw)


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True)


def row(out, name):
    lines = [l for l in out.splitlines() if l.startswith(f"| {name} |")]
    assert len(lines) == 1, out
    return lines[0]


def test_each_floor_met_missed_or_absent(tmp_path):
    rows = [
        {"test": "ceilings", "device": DEVICE, "kv_dtype": ""},  # no table of its own
        decode(8192, 76.0, 5.30, 0), decode(8192, 78.0, 5.20, 1),   # mean 77.0: met
        decode(131072, 64.0, 6.90, 0),                              # 64.0: missed
        verify(8192, 1, 5.3), verify(8192, 4, 6.30),                # 6.30 / 5.25 = 1.20x: met
        verify(131072, 4, 7.80),                                    # 7.80 / 6.90 = 1.13x: goal too
        prefill(8192, 40.0), prefill(8192, 50.0),                   # 45.0: met
        # no 32K prompt: not measured
        decode(8192, 99.0, 1.0, 0, speculation="mtp"),              # speculative: left out
    ]
    out = run(write(tmp_path / "b.jsonl", rows))
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert text.count("### ") == 1, text
    assert "profile native, KV i8" in text
    assert "77.0% (76.0%–78.0%, 2 runs), 5.25 ms a round" in row(text, "decode MBU at 8K")
    assert row(text, "decode MBU at 8K").endswith("| met |")
    assert row(text, "decode MBU at 128K").endswith("| **not met** |")
    assert "1.20x (6.30 / 5.25 ms)" in row(text, "4-token round / 1-token round at 8K")
    assert row(text, "4-token round / 1-token round at 8K").endswith("| met |")
    assert row(text, "4-token round / 1-token round at 128K").endswith("| met, goal too |")
    assert row(text, "prefill MFU, 8K prompt").endswith("| met |")
    assert "not measured" in row(text, "prefill MFU, 32K prompt")
    assert "1 floor(s) not met" in text
    strict = run(tmp_path / "b.jsonl", "--strict")
    assert strict.returncode == 1 and strict.stdout == text


def test_volta_beside_refused_rows_and_proxies(tmp_path):
    rows = [
        decode(8192, 30.0, 12.0, 0, kernel_profile="volta"),
        base(test="decode", context=131072, mbu_pct=None, mbu_error="computed 103.2% > 100%", round_ms_mean=5.0),
        decode(8192, 72.5, 6.1, 0, graph_sms=94),
    ]
    out = run(write(tmp_path / "b.jsonl", rows), "--strict")
    assert out.returncode == 0, out.stdout + out.stderr  # no whole-card native floor was missed
    text = out.stdout
    sections = text.split("### ")[1:]
    assert len(sections) == 3, text
    volta = next(s for s in sections if "profile volta" in s)
    assert "beside (volta profile: no floor)" in row(volta, "decode MBU at 8K")
    plain = next(s for s in sections if "profile native" in s and "SMs (a proxy)" not in s.splitlines()[0])
    assert "refused by the bench: computed 103.2% > 100%" in row(plain, "decode MBU at 128K")
    assert row(plain, "decode MBU at 128K").endswith("| — |")
    proxy = next(s for s in sections if "graphs on 94 SMs (a proxy)" in s)
    assert row(proxy, "decode MBU at 8K").endswith("| **not met** (proxy) |")  # shown, not counted
    assert "not met in the native profile" not in text


def test_no_rows_and_bad_lines(tmp_path):
    empty = run(write(tmp_path / "e.jsonl", [{"test": "ceilings"}]))
    assert empty.returncode == 2 and "no decode, verify or prefill rows" in empty.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"test": "decode"\n', encoding="utf-8")
    out = run(bad)
    assert out.returncode != 0 and "bad.jsonl:1: not a JSON line" in out.stderr
    assert run().returncode == 2
