"""`voltinfer serve --tp 3`: the bundled SmolLM2 split over three CPU ranks (its 3 KV heads, one
each), driven through the official `openai` and `anthropic` SDKs. Greedy answers must be the
unsplit server's — one at a time, as concurrent streams (the ranks run batches of several
sequences), and through the Anthropic route — and a split that cannot be made is refused at
start-up with the reason."""

from __future__ import annotations

import concurrent.futures as cf

import anthropic
import openai
import pytest

from conftest import BIN, DEFAULT_MODEL
from server_fixtures import API_KEY, smol_server, start_server  # noqa: F401  (fixture)

MODEL = "smollm2"
PROMPTS = [f"Write one sentence about the number {i}." for i in range(6)]


@pytest.fixture(scope="module")
def tp_server(tmp_path_factory):
    if not DEFAULT_MODEL.exists():
        pytest.skip("default model missing: run scripts/get_default_model.sh")
    srv = start_server(tmp_path_factory, "smol_tp3", ["--tp", "3", "-np", "4", "-c", "1024", "--alias", MODEL])
    yield srv
    srv.stop()


def oai(srv) -> openai.OpenAI:
    return openai.OpenAI(base_url=srv.url + "/v1", api_key=API_KEY, max_retries=0)


def answer(srv, prompt: str, stream: bool = False) -> str:
    kw = dict(model=MODEL, messages=[{"role": "user", "content": prompt}], temperature=0, max_tokens=24)
    if not stream:
        return oai(srv).chat.completions.create(**kw).choices[0].message.content
    with oai(srv).chat.completions.create(stream=True, **kw) as s:
        return "".join(c.choices[0].delta.content or "" for c in s if c.choices)


def test_split_answers_match_the_unsplit_server(smol_server, tp_server):
    want = [answer(smol_server, p) for p in PROMPTS]
    assert all(want)
    assert [answer(tp_server, p) for p in PROMPTS] == want
    with cf.ThreadPoolExecutor(len(PROMPTS)) as pool:  # several sequences in each pass of the ranks
        got = list(pool.map(lambda p: answer(tp_server, p, stream=True), PROMPTS))
    assert got == want
    m = anthropic.Anthropic(base_url=tp_server.url, api_key=API_KEY, max_retries=0).messages.create(
        model=MODEL, max_tokens=24, messages=[{"role": "user", "content": PROMPTS[0]}],
        extra_body={"temperature": 0})  # this SDK has no sampling arguments: the API field in the body
    assert m.content[0].text == want[0]


def test_a_split_that_cannot_be_made_is_refused(tmp_path):
    import subprocess
    if not DEFAULT_MODEL.exists():
        pytest.skip("default model missing: run scripts/get_default_model.sh")
    p = subprocess.run([str(BIN), "serve", "--port", "0", "--tp", "4"], capture_output=True, text=True, timeout=120)
    assert p.returncode != 0
    assert "needs at least 4 KV heads" in p.stderr and "its 3 KV heads" in p.stderr, p.stderr
