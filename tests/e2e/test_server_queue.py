"""`voltinfer serve` under load (SmolLM2, 2 sequence slots, a queue of 1, 32-token steps),
through the official SDKs: the request that finds every slot and the queue taken gets a 503
in its API's error shape while the held requests still complete; time to first token is
measured from the request's arrival, so a queued request's wait shows in it and in the
queue-time histogram; a long prompt is prefilled in chunks while a running stream keeps
decoding."""

from __future__ import annotations

import threading
import time

import anthropic
import openai
import pytest

from conftest import DEFAULT_MODEL
from server_fixtures import API_KEY, start_server

MODEL = "smollm2"
ESSAY = [{"role": "user", "content": "Write a long essay about rivers."}]


@pytest.fixture(scope="module")
def busy_server(tmp_path_factory):
    if not DEFAULT_MODEL.exists():
        pytest.skip("default model missing: run scripts/get_default_model.sh")
    srv = start_server(tmp_path_factory, "busy", ["-np", "2", "--max-queue", "1", "-b", "32", "-c", "2048",
                                                  "--alias", MODEL])
    yield srv
    srv.stop()


def wait_for(cond, timeout=10.0) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return False


def oai(srv) -> openai.OpenAI:
    return openai.OpenAI(base_url=srv.url + "/v1", api_key=API_KEY, max_retries=0)


class HeldStream:
    """A streaming chat completion read chunk by chunk on demand (the connection stays open
    while the test does other things)."""

    def __init__(self, srv, max_tokens: int, messages=ESSAY, **kw):
        self.max_tokens = max_tokens
        self.stream = oai(srv).chat.completions.create(
            model=MODEL, messages=messages, max_tokens=max_tokens, temperature=0, stream=True,
            stream_options={"include_usage": True}, extra_body={"ignore_eos": True}, **kw)
        self.it = iter(self.stream)
        self.text, self.finish, self.usage = "", None, None

    def next(self):
        chunk = next(self.it)
        if chunk.usage is not None:
            self.usage = chunk.usage
        for c in chunk.choices:
            self.text += c.delta.content or ""
            self.finish = c.finish_reason or self.finish
        return chunk

    def until_content(self) -> None:
        """Reads until the first generated text: the request holds a slot."""
        while not self.text:
            self.next()

    def finish_all(self) -> None:
        while True:
            try:
                self.next()
            except StopIteration:
                return


def test_full_queue_is_503_and_held_requests_complete(busy_server):
    before = busy_server.metrics()
    running = [HeldStream(busy_server, 150), HeldStream(busy_server, 150)]
    for s in running:
        s.until_content()
    # Both slots are busy: the next request waits in the queue (its role chunk arrives at
    # once, its text only when a slot frees).
    waiting = HeldStream(busy_server, 20)
    t_waiting = time.monotonic()
    waiting.next()
    assert wait_for(lambda: busy_server.metrics()["voltinfer_queue_depth"] == 1)  # the gauge moves at a step

    # Slots and queue are full: 503 in each API's shape, before any byte of an answer.
    with pytest.raises(openai.APIStatusError) as e:
        oai(busy_server).chat.completions.create(model=MODEL, messages=ESSAY, max_tokens=4)
    assert e.value.status_code == 503
    assert e.value.body["type"] == "server_overloaded" and "queue" in e.value.body["message"]
    with pytest.raises(openai.APIStatusError) as e:
        for _ in oai(busy_server).chat.completions.create(model=MODEL, messages=ESSAY, max_tokens=4, stream=True):
            pass
    assert e.value.status_code == 503
    with pytest.raises(openai.APIStatusError) as e:
        oai(busy_server).completions.create(model=MODEL, prompt="Rivers", max_tokens=4)
    assert e.value.status_code == 503
    ant = anthropic.Anthropic(base_url=busy_server.url, api_key=API_KEY, max_retries=0)
    with pytest.raises(anthropic.APIStatusError) as e2:
        ant.messages.create(model=MODEL, max_tokens=4, messages=ESSAY)
    assert e2.value.status_code == 503
    assert e2.value.body["type"] == "error" and e2.value.body["error"]["type"] == "overloaded_error"

    # The held requests are unharmed: all complete, with every token asked for.
    for s in [*running, waiting]:
        s.finish_all()
        assert s.finish == "length" and s.usage.completion_tokens == s.max_tokens and s.text
    waited = time.monotonic() - t_waiting

    after = busy_server.metrics()
    assert after['voltinfer_http_responses_total{route="/v1/chat/completions",status="503"}'] - before.get(
        'voltinfer_http_responses_total{route="/v1/chat/completions",status="503"}', 0) == 2
    assert after['voltinfer_http_responses_total{route="/v1/messages",status="503"}'] >= 1
    assert after["voltinfer_max_queue"] == 1
    assert after["voltinfer_running_sequences"] == 0 and after["voltinfer_queue_depth"] == 0

    # Time to first token counts from arrival: the queued request's wait is in it.
    d = {k: after[k] - before.get(k, 0) for k in after}
    assert d["voltinfer_queue_time_seconds_count"] == 3 and d["voltinfer_time_to_first_token_seconds_count"] == 3
    assert d["voltinfer_queue_time_seconds_sum"] > 0.3, d["voltinfer_queue_time_seconds_sum"]
    assert d["voltinfer_queue_time_seconds_sum"] < waited + 1
    assert d["voltinfer_time_to_first_token_seconds_sum"] >= d["voltinfer_queue_time_seconds_sum"]
    # Only the request that found no free slot waited long.
    assert d['voltinfer_queue_time_seconds_bucket{le="1"}'] == 2


def test_long_prompt_is_prefilled_between_decode_steps(busy_server):
    """With 32-token steps, a ~900-token prompt needs ~30 steps; a stream already running
    must get a token in each of them instead of waiting for the whole prefill."""
    before = busy_server.metrics()
    a = HeldStream(busy_server, 200, logprobs=True)
    a.until_content()
    times: list[float] = []

    def read_a():
        while True:
            try:
                chunk = a.next()
            except StopIteration:
                return
            for c in chunk.choices:
                n = len(c.logprobs.content) if c.logprobs and c.logprobs.content else 0
                times.extend([time.monotonic()] * n)

    reader = threading.Thread(target=read_a)
    reader.start()
    long_prompt = "The river flows past the old mill and under the stone bridge. " * 70
    t0 = time.monotonic()
    b = oai(busy_server).chat.completions.create(model=MODEL, messages=[{"role": "user", "content": long_prompt}],
                                                 max_tokens=1, temperature=0, stream=True)
    t_first = None
    for chunk in b:
        if chunk.choices and chunk.choices[0].delta.content:
            t_first = time.monotonic()
    t_first = t_first or time.monotonic()
    reader.join(timeout=120)
    assert not reader.is_alive()
    after = busy_server.metrics()
    n_prompt = after["voltinfer_prompt_tokens_total"] - before["voltinfer_prompt_tokens_total"]
    assert n_prompt > 800  # A's prompt is short; B's is the long one
    during = sum(1 for t in times if t0 < t < t_first)
    assert during >= 10, f"the running stream got {during} tokens while a {n_prompt}-token prompt was prefilled"
    assert a.finish == "length" and a.usage.completion_tokens == 200


def test_completion_stream_usage_in_last_chunk(busy_server):
    client = oai(busy_server)
    chunks = list(client.completions.create(model=MODEL, prompt="Rivers are", max_tokens=7, temperature=0,
                                            stream=True, stream_options={"include_usage": True}))
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 7
    assert all(c.usage is None for c in chunks[:-1])
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    full = client.completions.create(model=MODEL, prompt="Rivers are", max_tokens=7, temperature=0)
    assert text == full.choices[0].text and chunks[-1].usage.prompt_tokens == full.usage.prompt_tokens
