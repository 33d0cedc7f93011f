"""The voltinfer command line, driven as a user would: chat, generate, errors."""

from __future__ import annotations

from conftest import run


def test_chat_answers_capital_of_france(voltinfer, default_model):
    out = run(["chat", "-m", default_model, "-p", "What is the capital of France?", "-st",
               "--temp", "0", "-n", "48"], input="")
    assert "Paris" in out.stdout, out.stdout


def test_chat_multi_turn_reads_stdin(voltinfer, default_model):
    out = run(["chat", "-m", default_model, "--temp", "0", "-n", "24"],
              input="What is the capital of France?\nAnd of Italy?\n")
    assert "Paris" in out.stdout and "Rome" in out.stdout, out.stdout


def test_generate_same_seed_same_text(voltinfer, default_model):
    args = ["generate", "-m", default_model, "-p", "Once upon a time", "-n", "24", "--temp", "1.0",
            "--top-k", "0", "--top-p", "1", "--min-p", "0"]
    a = run(args + ["--seed", "7"]).stdout
    b = run(args + ["--seed", "7"]).stdout
    c = run(args + ["--seed", "8"]).stdout
    assert a == b
    assert a != c  # 24 tokens at temperature 1 over the whole vocabulary: a tie is astronomically unlikely


def test_greedy_generation_is_deterministic_and_continues_prompt(voltinfer, default_model):
    out = run(["generate", "-m", default_model, "-p", "The capital of France is", "-n", "8", "--temp", "0"])
    assert out.stdout.startswith("The capital of France is")
    assert "Paris" in out.stdout


def test_prompt_longer_than_context_is_a_clear_error(voltinfer, default_model):
    out = run(["generate", "-m", default_model, "-p", "word " * 200, "-c", "64", "-n", "4"], check=False)
    assert out.returncode != 0
    assert "context" in out.stderr and "64" in out.stderr, out.stderr


def test_missing_model_is_a_clear_error(voltinfer, tmp_path):
    out = run(["generate", "-m", tmp_path / "nope.gguf", "-p", "hi"], check=False)
    assert out.returncode != 0
    assert "nope.gguf" in out.stderr and "does not exist" in out.stderr


def test_malformed_model_file_names_the_file(voltinfer, tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 20)
    out = run(["generate", "-m", bad, "-p", "hi"], check=False)
    assert out.returncode != 0
    assert "bad.gguf" in out.stderr, out.stderr


def test_help_lists_commands(voltinfer):
    out = run(["--help"])
    for cmd in ("chat", "generate", "logits", "perplexity"):
        assert cmd in out.stdout


def test_perplexity_matches_transformers(voltinfer, default_model):
    """`voltinfer perplexity` against the value transformers computed on the same text and tokens
    (tests/golden/smollm2_hf/perplexity.json, made by scripts/hf_perplexity.py)."""
    import hashlib
    import json
    import re
    from pathlib import Path

    from conftest import GOLDEN
    ref = json.loads((GOLDEN / "smollm2_hf" / "perplexity.json").read_text())
    text = Path("/usr/share/common-licenses/GPL-3")
    if not text.exists() or hashlib.sha256(text.read_bytes()).hexdigest() != ref["text_sha256"]:
        import pytest
        pytest.skip("the reference text (Debian's GPL-3) is not present in the same version")
    out = run(["perplexity", "-m", default_model, "-f", text, "-c", "512", "--chunks", "4"])
    running = [float(v) for v in re.findall(r"\[\d+\]([0-9.]+)", out.stdout)]
    assert len(running) == 4, out.stdout
    for ours, theirs in zip(running, ref["running_ppl"]):
        assert abs(ours - theirs) <= 1e-3 * theirs, (running, ref["running_ppl"])
