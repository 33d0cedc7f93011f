"""`voltinfer serve` with the default SmolLM2 model, driven through the official `openai`
and `anthropic` SDKs (httpx only where an SDK cannot express the case). Greedy answers
are compared across paths that share no code on the client side: streamed vs not, chat
vs Anthropic messages, the server vs `voltinfer chat`, 16 concurrent streams vs one
request at a time."""

from __future__ import annotations

import concurrent.futures as cf
import time

import anthropic
import httpx2 as httpx  # the HTTP client the openai/anthropic SDKs are built on
import openai
import pytest

from conftest import run
from server_fixtures import API_KEY, smol_server  # noqa: F401  (fixture)

MODEL = "smollm2"
# This anthropic SDK has no sampling arguments; the API fields go in the body.
GREEDY = {"temperature": 0}
QUESTION = "Name three colours of the rainbow."


def oai(srv, **kw) -> openai.OpenAI:
    return openai.OpenAI(base_url=srv.url + "/v1", api_key=kw.pop("api_key", API_KEY), max_retries=0, **kw)


def ant(srv, **kw) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=srv.url, api_key=kw.pop("api_key", API_KEY), max_retries=0, **kw)


def chat(client, content: str, **kw):
    return client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": content}],
                                          temperature=0, **kw)


def stream_chat(client, content: str, **kw):
    """Returns (text, finish_reason, usage, chunks) of a streamed chat completion."""
    text, finish, usage, chunks = "", None, None, []
    with client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": content}],
                                        temperature=0, stream=True, **kw) as stream:
        for chunk in stream:
            chunks.append(chunk)
            if chunk.usage is not None:
                usage = chunk.usage
            for choice in chunk.choices:
                text += choice.delta.content or ""
                finish = choice.finish_reason or finish
    return text, finish, usage, chunks


def test_models_list(smol_server):
    models = oai(smol_server).models.list()
    assert [m.id for m in models.data] == [MODEL]
    assert [m.id for m in ant(smol_server).models.list().data] == [MODEL]


def test_chat_matches_cli_and_stream(smol_server):
    client = oai(smol_server)
    r = chat(client, QUESTION, max_tokens=24)
    text = r.choices[0].message.content
    assert text and r.choices[0].message.role == "assistant"
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.usage.completion_tokens <= 24 and r.usage.prompt_tokens > 10
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    if r.choices[0].finish_reason == "length":
        assert r.usage.completion_tokens == 24

    # The same conversation through the CLI's single-sequence generate loop.
    cli = run(["chat", "--single-turn", "-p", QUESTION, "--temp", "0", "-n", "24"]).stdout
    assert cli.strip().endswith(text.strip()), (cli, text)

    s_text, s_finish, usage, chunks = stream_chat(client, QUESTION, max_tokens=24,
                                                  stream_options={"include_usage": True})
    assert s_text == text and s_finish == r.choices[0].finish_reason
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices == [] and usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens) == (r.usage.prompt_tokens, r.usage.completion_tokens)


def test_completions_and_logprobs(smol_server):
    client = oai(smol_server)
    prompt = "The capital of France is"
    r = client.completions.create(model=MODEL, prompt=prompt, max_tokens=12, temperature=0, logprobs=3)
    choice = r.choices[0]
    lp = choice.logprobs
    assert len(lp.tokens) == r.usage.completion_tokens == len(lp.token_logprobs)
    assert "".join(lp.tokens) == choice.text or choice.finish_reason == "stop"
    for tok, lpv, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert lpv <= 1e-6 and len(top) <= 3
        # Greedy: the chosen token is the most likely one.
        assert max(top.values()) == pytest.approx(lpv, abs=1e-5)
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model=MODEL, prompt=prompt, max_tokens=12, temperature=0, stream=True) if c.choices)
    assert streamed == choice.text


def test_stop_strings_across_tokens(smol_server):
    client = oai(smol_server)
    full = chat(client, "Write one sentence about the sea.", max_tokens=40).choices[0].message.content
    assert len(full) > 20
    stop = full[10:16]  # six characters from the middle: usually spans a token boundary
    expected = full[: full.index(stop)]
    r = chat(client, "Write one sentence about the sea.", max_tokens=40, stop=[stop, "\u2603never"])
    assert r.choices[0].message.content == expected and r.choices[0].finish_reason == "stop"
    text, finish, _, _ = stream_chat(client, "Write one sentence about the sea.", max_tokens=40, stop=stop)
    assert text == expected and finish == "stop"
    # Anthropic reports which sequence matched.
    m = ant(smol_server).messages.create(model=MODEL, max_tokens=40, extra_body=GREEDY, stop_sequences=[stop],
                                         messages=[{"role": "user", "content": "Write one sentence about the sea."}])
    assert m.stop_reason == "stop_sequence" and m.stop_sequence == stop
    assert "".join(b.text for b in m.content if b.type == "text") == expected


def test_seed_determinism(smol_server):
    client = oai(smol_server)
    kw = dict(model=MODEL, messages=[{"role": "user", "content": "Tell me a short story."}], max_tokens=24,
              temperature=1.0, top_p=1.0)
    a = client.chat.completions.create(seed=1234, **kw).choices[0].message.content
    b = client.chat.completions.create(seed=1234, **kw).choices[0].message.content
    assert a == b
    others = {client.chat.completions.create(seed=s, **kw).choices[0].message.content for s in (1, 2, 3)}
    assert others - {a}, "different seeds never changed the sampled text"


def test_sixteen_concurrent_streams(smol_server):
    client = oai(smol_server)
    prompts = [f"Count from {i} to {i + 5}." for i in range(16)]
    expected = [chat(client, p, max_tokens=20).choices[0].message.content for p in prompts]
    with cf.ThreadPoolExecutor(16) as pool:
        got = list(pool.map(lambda p: stream_chat(oai(smol_server), p, max_tokens=20)[0], prompts))
    assert got == expected
    m = smol_server.metrics()
    assert m["voltinfer_running_sequences"] == 0 and m["voltinfer_queue_depth"] == 0
    assert m['voltinfer_time_to_first_token_seconds_bucket{le="+Inf"}'] >= 32


def wait_for(cond, timeout=10.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return False


def test_disconnect_frees_the_sequence(smol_server):
    before = smol_server.metrics()
    client = oai(smol_server)
    with client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Write a long essay."}],
                                        max_tokens=900, stream=True, extra_body={"ignore_eos": True}) as stream:
        for i, _ in enumerate(stream):
            if i == 3:
                break  # leaving the block closes the connection mid-stream
    assert wait_for(lambda: smol_server.metrics()["voltinfer_client_disconnects_total"]
                    >= before["voltinfer_client_disconnects_total"] + 1)
    assert wait_for(lambda: smol_server.metrics()["voltinfer_running_sequences"] == 0)
    after = smol_server.metrics()
    assert after['voltinfer_requests_total{outcome="cancelled"}'] >= before['voltinfer_requests_total{outcome="cancelled"}'] + 1
    assert after["voltinfer_generated_tokens_total"] - before["voltinfer_generated_tokens_total"] < 900

    # A non-streaming client that gives up (timeout) is noticed too.
    with pytest.raises(openai.APITimeoutError):
        oai(smol_server, timeout=0.5).chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Write a long essay."}], max_tokens=900,
            extra_body={"ignore_eos": True})
    assert wait_for(lambda: smol_server.metrics()["voltinfer_client_disconnects_total"]
                    >= before["voltinfer_client_disconnects_total"] + 2)
    assert wait_for(lambda: smol_server.metrics()["voltinfer_running_sequences"] == 0)
    # And the server still answers.
    assert chat(client, "Hi", max_tokens=4).choices[0].message.content


def test_overlong_prompt(smol_server):
    long_text = "hello " * 1200  # > 1024 tokens
    with pytest.raises(openai.BadRequestError) as e:
        chat(oai(smol_server), long_text, max_tokens=4)
    assert e.value.status_code == 400
    msg = e.value.body["message"]
    assert "1024" in msg and str(e.value.body["message"]).count("tokens") >= 2
    with pytest.raises(anthropic.BadRequestError) as e2:
        ant(smol_server).messages.create(model=MODEL, max_tokens=4, messages=[{"role": "user", "content": long_text}])
    assert e2.value.status_code == 400 and "1024" in str(e2.value)


def test_wrong_or_missing_key(smol_server):
    with pytest.raises(openai.AuthenticationError):
        chat(oai(smol_server, api_key="wrong"), "Hi", max_tokens=2)
    with pytest.raises(anthropic.AuthenticationError) as e:
        ant(smol_server, api_key="wrong").messages.create(model=MODEL, max_tokens=2,
                                                          messages=[{"role": "user", "content": "Hi"}])
    assert e.value.body["type"] == "error" and e.value.body["error"]["type"] == "authentication_error"
    with pytest.raises(openai.AuthenticationError):
        oai(smol_server, api_key="wrong").models.list()
    # /health needs no key; /metrics does.
    assert httpx.get(smol_server.url + "/health").status_code == 200
    assert httpx.get(smol_server.url + "/metrics").status_code == 401
    # The Anthropic SDK's x-api-key header is accepted.
    assert ant(smol_server).messages.create(model=MODEL, max_tokens=2, messages=[{"role": "user", "content": "Hi"}])


def test_oversized_body(smol_server):
    # No SDK lets a caller exceed a body limit on purpose; send raw JSON.
    body = {"model": MODEL, "messages": [{"role": "user", "content": "x" * 70000}]}
    r = httpx.post(smol_server.url + "/v1/chat/completions", json=body, headers=smol_server.headers(), timeout=30)
    assert r.status_code == 413
    assert "65536" in r.json()["error"]["message"]


def test_unknown_model_and_bad_fields(smol_server):
    client = oai(smol_server)
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-nope", messages=[{"role": "user", "content": "Hi"}])
    with pytest.raises(anthropic.NotFoundError):
        ant(smol_server).messages.create(model="claude-nope", max_tokens=2, messages=[{"role": "user", "content": "Hi"}])
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, "Hi", max_tokens=2, top_p=1.5)
    assert e.value.body["param"] == "top_p"
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=MODEL, messages=[])


def test_anthropic_matches_openai(smol_server):
    question = "What is two plus two?"
    oa = chat(oai(smol_server), question, max_tokens=20)
    client = ant(smol_server)
    m = client.messages.create(model=MODEL, max_tokens=20, extra_body=GREEDY,
                               messages=[{"role": "user", "content": question}])
    assert m.role == "assistant" and m.type == "message"
    assert [b.type for b in m.content] == ["text"]
    assert m.content[0].text == oa.choices[0].message.content
    assert m.usage.input_tokens == oa.usage.prompt_tokens and m.usage.output_tokens == oa.usage.completion_tokens
    assert m.stop_reason == {"stop": "end_turn", "length": "max_tokens"}[oa.choices[0].finish_reason]
    with client.messages.stream(model=MODEL, max_tokens=20, extra_body=GREEDY,
                                messages=[{"role": "user", "content": question}]) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert streamed == m.content[0].text and final.content[0].text == streamed
    assert final.stop_reason == m.stop_reason and final.usage.output_tokens == m.usage.output_tokens


def test_sampling_fields_reach_the_sampler(smol_server):
    """Each truncation field, set to keep only the top token, turns a hot sample back into
    the greedy answer; each penalty changes the greedy answer of a repetitive reply."""
    client = oai(smol_server)
    prompt = "Tell me a story about a dragon."
    greedy = chat(client, prompt, max_tokens=16).choices[0].message.content

    def hot(seed, **kw):
        return client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": prompt}],
                                              max_tokens=16, temperature=1.5, seed=seed, **kw).choices[0].message.content

    seed = next((s for s in range(1, 20) if hot(s, extra_body={"top_k": 0, "min_p": 0}, top_p=1.0) != greedy), None)
    assert seed is not None, "no hot sample differed from greedy"
    assert hot(seed, extra_body={"top_k": 1, "min_p": 0}, top_p=1.0) == greedy
    assert hot(seed, extra_body={"top_k": 0, "min_p": 1.0}, top_p=1.0) == greedy
    assert hot(seed, extra_body={"top_k": 0, "min_p": 0}, top_p=0.001) == greedy

    counting = "Count from 1 to 30, separated by commas."
    plain = chat(client, counting, max_tokens=32).choices[0].message.content
    assert plain.count(".") + plain.count(",") >= 5  # punctuation repeats: penalties have work to do
    for kw in ({"frequency_penalty": 2.0}, {"presence_penalty": 2.0}, {"extra_body": {"repetition_penalty": 1.8}},
               {"extra_body": {"repeat_penalty": 1.8}}):
        assert chat(client, counting, max_tokens=32, **kw).choices[0].message.content != plain, kw


def test_metrics_exposition(smol_server):
    """/metrics is valid Prometheus text with the families the API promises."""
    chat(oai(smol_server), "Hi", max_tokens=2)
    text = httpx.get(smol_server.url + "/metrics", headers=smol_server.headers(), timeout=10).text
    typed, samples = {}, []
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            typed[name] = kind
        elif line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            samples.append((name, float(value)))
    for name, _ in samples:
        family = name.split("{")[0]
        base = family.rsplit("_", 1)[0] if family.endswith(("_bucket", "_sum", "_count")) else family
        assert family in typed or base in typed, f"{name} has no # TYPE line"
    want = {"voltinfer_requests_total": "counter", "voltinfer_prompt_tokens_total": "counter",
            "voltinfer_generated_tokens_total": "counter", "voltinfer_queue_depth": "gauge",
            "voltinfer_running_sequences": "gauge", "voltinfer_time_to_first_token_seconds": "histogram",
            "voltinfer_time_per_output_token_seconds": "histogram", "voltinfer_queue_time_seconds": "histogram",
            "voltinfer_http_responses_total": "counter"}
    for name, kind in want.items():
        assert typed.get(name) == kind, name
    for h in ("voltinfer_time_to_first_token_seconds", "voltinfer_queue_time_seconds"):
        buckets = [v for n, v in samples if n.startswith(h + "_bucket")]
        assert buckets == sorted(buckets) and buckets[-1] == dict(samples)[h + "_count"] >= 1


def test_defaults_and_flag_names(smol_server):
    # Started without --host or -m: bound to loopback only, serving the bundled model.
    assert "on http://127.0.0.1:" in smol_server.log_path.read_text()
    assert [m.id for m in oai(smol_server).models.list().data] == [MODEL]
    help_text = run(["serve", "--help"]).stdout
    for flag in ("--host", "--port", "--api-key", "-c,--ctx-size", "--parallel", "-m,--model", "--alias"):
        assert flag in help_text, flag


def test_chat_max_completion_tokens_and_logprobs(smol_server):
    client = oai(smol_server)
    r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Write a poem."}],
                                       temperature=0, max_completion_tokens=5, logprobs=True, top_logprobs=2,
                                       extra_body={"ignore_eos": True})
    choice = r.choices[0]
    assert choice.finish_reason == "length" and r.usage.completion_tokens == 5
    entries = choice.logprobs.content
    assert len(entries) == 5 and "".join(e.token for e in entries) == choice.message.content
    for e in entries:
        assert len(e.top_logprobs) == 2 and e.top_logprobs[0].logprob == pytest.approx(e.logprob, abs=1e-5)
