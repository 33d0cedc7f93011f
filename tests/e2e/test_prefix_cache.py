"""Prefix cache through `voltinfer serve` (SmolLM2 and a tiny random Qwen3.5 with the real
tokenizer, also split over two CPU ranks): a 5-turn chat reuses the earlier turns (the engine's
log line `prompt N tokens = R reused + C computed in T ms` says so, and so does
usage.prompt_tokens_details.cached_tokens where the server reports it), two chats sharing
a system prompt share it, and every greedy answer equals the one from a server started
with --no-prefix-cache."""

from __future__ import annotations

import re

import httpx
import pytest

from conftest import DEFAULT_MODEL
from server_fixtures import API_KEY, qwen_dir, start_server  # noqa: F401  (fixture)

LINE = re.compile(r"prompt (\d+) tokens = (\d+) reused \+ (\d+) computed in ([\d.]+) ms")
BLOCK = 16  # the engine's default KV block size

SYSTEM = ("You are a careful assistant for a library. Answer briefly, cite the shelf number when you know "
          "it, and never invent titles. The library opens at nine and closes at six; the reading room is "
          "on the second floor; the archive needs an appointment made a day ahead.")
QUESTIONS = ["Where is the reading room?", "When do you open?", "Can I see the archive today?",
             "What about tomorrow?", "Thanks. Anything else I should know?"]


def prompt_lines(srv) -> list[tuple[int, int, int]]:
    return [tuple(map(int, m.groups()[:3])) for m in LINE.finditer(srv.log_path.read_text())]


def chat(srv, messages: list[dict]) -> tuple[str, dict]:
    r = httpx.post(srv.url + "/v1/chat/completions", headers=srv.headers(), timeout=300,
                   json={"model": "m", "messages": messages, "temperature": 0, "max_tokens": 12})
    assert r.status_code == 200, r.text
    body = r.json()
    return body["choices"][0]["message"]["content"] or "", body["usage"]


def converse(srv, system: str, questions: list[str]) -> tuple[list[str], list[tuple[int, int, int]], list[dict]]:
    before = len(prompt_lines(srv))
    messages = [{"role": "system", "content": system}]
    answers, usages = [], []
    for q in questions:
        messages.append({"role": "user", "content": q})
        answer, usage = chat(srv, messages)
        answers.append(answer)
        usages.append(usage)
        messages.append({"role": "assistant", "content": answer})
    return answers, prompt_lines(srv)[before:], usages


# qwen35_tp2: split over two CPU ranks (--tp 2), whose GDN states the cache snapshots rank by rank.
@pytest.fixture(scope="module", params=["smollm2", "qwen35", "qwen35_tp2"])
def servers(request, tmp_path_factory):
    if request.param == "smollm2":
        if not DEFAULT_MODEL.exists():
            pytest.skip("default model missing: run scripts/get_default_model.sh")
        model = DEFAULT_MODEL
    else:
        model = request.getfixturevalue("qwen_dir")
    args = ["-m", model, "-np", "2", "-c", "2048", "--alias", "m", "--log-level", "info"]
    if request.param == "qwen35_tp2":
        args += ["--tp", "2"]
    on = start_server(tmp_path_factory, request.param + "_cache", args + ["--cache-ram", "0.05"])
    off = start_server(tmp_path_factory, request.param + "_nocache", args + ["--no-prefix-cache"])
    yield on, off
    on.stop()
    off.stop()


def test_multi_turn_reuses_earlier_turns_and_matches_no_cache(servers):
    on, off = servers
    a_on, lines_on, usage_on = converse(on, SYSTEM, QUESTIONS)
    a_off, lines_off, _ = converse(off, SYSTEM, QUESTIONS)
    assert a_on == a_off
    assert len(lines_on) == len(QUESTIONS) and len(lines_off) == len(QUESTIONS)
    assert all(r == 0 for _, r, _ in lines_off)
    for i, (n, r, c) in enumerate(lines_on):
        assert r + c == n
        if i == 0:
            continue
        prev_n = lines_on[i - 1][0]
        # At least every full block of the previous prompt is reused (its answer too, when
        # the re-rendered answer tokenizes as generated); only the new turn is computed.
        assert r >= prev_n // BLOCK * BLOCK - BLOCK, (i, lines_on)
        assert c <= n - prev_n + BLOCK, (i, lines_on)
        details = usage_on[i].get("prompt_tokens_details") or {}
        if "cached_tokens" in details:
            assert details["cached_tokens"] == r


def test_conversations_sharing_a_system_prompt_share_it(servers):
    on, off = servers
    long_system = SYSTEM + " " + SYSTEM.upper()
    questions = ["Where is the reading room?", "Is the archive open on Sundays?", "Do you lend e-books?"]
    lines = []
    for q in questions:
        answer, new_lines, _ = converse(on, long_system, [q])
        lines += new_lines
        assert answer == converse(off, long_system, [q])[0]
    # (The first may reuse the start of SYSTEM from the other test.) Attention-only models share the system prompt's blocks from the second conversation
    # on; a hybrid model needs a state snapshot where the prompts part, which the second
    # conversation takes, so the third one resumes there.
    assert lines[2][1] >= 64 and lines[2][1] > lines[0][1], lines


def test_metrics_report_hit_rate_and_pool_sizes(servers):
    on, off = servers
    converse(on, SYSTEM, ["What do you keep?", "And how long?"])
    text = httpx.get(on.url + "/metrics", headers=on.headers(), timeout=60).text
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    assert values["voltinfer_prefix_cache_token_hit_rate"] > 0
    assert 0 < values["voltinfer_prefix_cache_request_hit_rate"] <= 1
    assert values["voltinfer_prompt_tokens_cached_total"] > 0
    capacity = values['voltinfer_kv_blocks{tier="device",state="capacity"}']
    assert capacity > 0 and values['voltinfer_kv_blocks{tier="device",state="used"}'] <= capacity
    assert values['voltinfer_cache_pool_bytes{tier="device"}'] > 0
    off_text = httpx.get(off.url + "/metrics", headers=off.headers(), timeout=60).text
    assert "voltinfer_prompt_tokens_cached_total 0" in off_text
