"""A real Qwen3.5 forward pass *emitting* <think> ... </think> and <tool_call> markup, end to
end through the official SDKs: the tiny model of scripted_qwen.py is built so that greedy
decoding writes a fixed reply after the generation prompt (a reasoning then a get_weather
call in Qwen's XML form when thinking is on; its own <think> block then a plain answer when
thinking is off; the JSON call form from a second model). The server must split these
replies into reasoning, content and tool calls, streaming and not, in both APIs, and honour
tool_choice. Replies are compared with the scripted text, and token counts with the chain
lengths the fixture built, so a server that drops, repeats or mis-files any piece fails."""

from __future__ import annotations

import json

import anthropic
import openai
import pytest

from scripted_qwen import (ANSWER, ANSWER_REASONING, JSON_REASONING, START_THINKING_OFF, START_THINKING_ON,
                           TOOL_CALL_XML, TOOL_REASONING)
from server_fixtures import (API_KEY, qwen_dir, qwen_hf_tokenizer, qwen_server,  # noqa: F401  (fixtures)
                             scripted_qwen, scripted_qwen_json)

MODEL = "scripted-qwen35"
GREEDY = {"temperature": 0}
QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
CLOCK = {"type": "function", "function": {
    "name": "get_time", "description": "Local time in a time zone",
    "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}}}


def anthropic_tool(t: dict) -> dict:
    f = t["function"]
    return {"name": f["name"], "description": f["description"], "input_schema": f["parameters"]}


@pytest.fixture(scope="module")
def srv(scripted_qwen):
    return scripted_qwen[0]


@pytest.fixture(scope="module")
def chains(scripted_qwen):
    return scripted_qwen[1]["chains"]


@pytest.fixture(scope="module")
def oai(srv):
    return openai.OpenAI(base_url=srv.url + "/v1", api_key=API_KEY, max_retries=0)


@pytest.fixture(scope="module")
def ant(srv):
    return anthropic.Anthropic(base_url=srv.url, api_key=API_KEY, max_retries=0)


def render_ids(tok, messages, tools=None, **kw) -> list[int]:
    text = tok.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False, **kw)
    return tok(text, add_special_tokens=False).input_ids


def collect_openai_stream(stream) -> dict:
    """Assembles a streamed chat completion the way a client does."""
    out = {"reasoning": "", "content": "", "calls": {}, "finish": None, "usage": None, "n_chunks": 0}
    for chunk in stream:
        out["n_chunks"] += 1
        if chunk.usage is not None:
            out["usage"] = chunk.usage
        for c in chunk.choices:
            d = c.delta
            out["reasoning"] += getattr(d, "reasoning_content", None) or ""
            out["content"] += d.content or ""
            for tc in d.tool_calls or []:
                call = out["calls"].setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
                if tc.id:
                    assert call["id"] is None, "a tool call's id was sent twice"
                    call["id"] = tc.id
                if tc.function and tc.function.name:
                    call["name"] += tc.function.name
                if tc.function and tc.function.arguments:
                    call["arguments"] += tc.function.arguments
            out["finish"] = c.finish_reason or out["finish"]
    return out


def test_chains_start_where_the_template_ends(scripted_qwen, qwen_hf_tokenizer):
    """The fixture's premise: the last prompt token differs between thinking on and off and
    is the token each chain starts from."""
    starts = scripted_qwen[1]["starts"]
    assert render_ids(qwen_hf_tokenizer, QUESTION)[-1] == starts[START_THINKING_ON]
    assert render_ids(qwen_hf_tokenizer, QUESTION, enable_thinking=False)[-1] == starts[START_THINKING_OFF]


def test_openai_reasoning_then_xml_tool_call(oai, chains, qwen_hf_tokenizer):
    n_prompt = len(render_ids(qwen_hf_tokenizer, QUESTION, tools=[WEATHER]))
    r = oai.chat.completions.create(model=MODEL, messages=QUESTION, tools=[WEATHER], temperature=0)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.reasoning_content == TOOL_REASONING
    assert not choice.message.content
    [call] = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}
    assert r.usage.prompt_tokens == n_prompt
    assert r.usage.completion_tokens == len(chains[START_THINKING_ON])  # every token but <|im_end|>

    s = collect_openai_stream(oai.chat.completions.create(
        model=MODEL, messages=QUESTION, tools=[WEATHER], temperature=0, stream=True,
        stream_options={"include_usage": True}))
    assert s["finish"] == "tool_calls"
    assert s["reasoning"] == TOOL_REASONING and s["content"] == ""
    assert list(s["calls"]) == [0]
    call = s["calls"][0]
    assert call["id"].startswith("call_") and call["name"] == "get_weather"
    assert json.loads(call["arguments"]) == {"city": "Paris"}
    assert s["usage"].prompt_tokens == n_prompt
    assert s["usage"].completion_tokens == r.usage.completion_tokens
    assert s["n_chunks"] > 5  # streamed in pieces, not as one chunk


def test_anthropic_thinking_then_tool_use(ant, chains, qwen_hf_tokenizer):
    n_prompt = len(render_ids(qwen_hf_tokenizer, QUESTION, tools=[WEATHER]))
    kw = dict(model=MODEL, max_tokens=200, extra_body=GREEDY, messages=QUESTION, tools=[anthropic_tool(WEATHER)])
    m = ant.messages.create(**kw)
    assert [b.type for b in m.content] == ["thinking", "tool_use"]
    assert m.content[0].thinking == TOOL_REASONING
    use = m.content[1]
    assert use.name == "get_weather" and use.input == {"city": "Paris"} and use.id.startswith("toolu_")
    assert m.stop_reason == "tool_use"
    assert m.usage.input_tokens == n_prompt and m.usage.output_tokens == len(chains[START_THINKING_ON])

    events = []
    with ant.messages.stream(**kw) as stream:
        for ev in stream:
            events.append(ev)
        final = stream.get_final_message()
    assert [b.type for b in final.content] == ["thinking", "tool_use"]
    assert final.content[0].thinking == TOOL_REASONING
    assert final.content[1].name == "get_weather" and final.content[1].input == {"city": "Paris"}
    assert final.stop_reason == "tool_use"
    assert final.usage.input_tokens == n_prompt and final.usage.output_tokens == m.usage.output_tokens
    raw = [e for e in events if e.type in ("message_start", "content_block_start", "content_block_delta",
                                           "content_block_stop", "message_delta", "message_stop")]
    assert raw[0].type == "message_start" and raw[0].message.usage.input_tokens == n_prompt
    starts = [e.content_block.type for e in raw if e.type == "content_block_start"]
    assert starts == ["thinking", "tool_use"]
    deltas = {e.delta.type for e in raw if e.type == "content_block_delta"}
    assert deltas == {"thinking_delta", "input_json_delta"}
    assert [e.type for e in raw[-2:]] == ["message_delta", "message_stop"]
    assert raw[-2].delta.stop_reason == "tool_use" and raw[-2].usage.output_tokens == m.usage.output_tokens


def test_model_opens_think_then_answers(oai, ant, chains):
    """Thinking off: the template closes an empty block, the model opens its own (the
    <think> token) and closes it with '</think>' spelled over several tokens."""
    n_out = len(chains[START_THINKING_OFF])
    for extra in ({"chat_template_kwargs": {"enable_thinking": False}}, {"enable_thinking": False}):
        r = oai.chat.completions.create(model=MODEL, messages=QUESTION, temperature=0, extra_body=extra)
        msg = r.choices[0].message
        assert (msg.reasoning_content, msg.content) == (ANSWER_REASONING, ANSWER)
        assert r.choices[0].finish_reason == "stop" and not msg.tool_calls
        assert r.usage.completion_tokens == n_out
    s = collect_openai_stream(oai.chat.completions.create(
        model=MODEL, messages=QUESTION, temperature=0, stream=True, extra_body={"enable_thinking": False}))
    assert (s["reasoning"], s["content"], s["finish"], s["calls"]) == (ANSWER_REASONING, ANSWER, "stop", {})

    kw = dict(model=MODEL, max_tokens=200, extra_body=GREEDY, messages=QUESTION, thinking={"type": "disabled"})
    m = ant.messages.create(**kw)
    assert [(b.type, getattr(b, "thinking", None) or getattr(b, "text", None)) for b in m.content] == [
        ("thinking", ANSWER_REASONING), ("text", ANSWER)]
    assert m.stop_reason == "end_turn" and m.usage.output_tokens == n_out
    with ant.messages.stream(**kw) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == ANSWER and final.content[0].thinking == ANSWER_REASONING
    assert final.stop_reason == "end_turn" and final.usage.output_tokens == n_out


def test_cut_off_inside_the_tool_call(oai, chains):
    """max_tokens ends the reply inside <tool_call>: finish_reason is 'length', and what
    was decided (the reasoning) is kept."""
    r = oai.chat.completions.create(model=MODEL, messages=QUESTION, tools=[WEATHER], temperature=0,
                                    max_tokens=len(chains[START_THINKING_ON]) - 3)
    assert r.choices[0].finish_reason == "length"
    assert r.choices[0].message.reasoning_content == TOOL_REASONING


def test_round_trip_renders_as_hf(oai, ant, qwen_server, qwen_hf_tokenizer):
    """The tool call the model made goes back with the tool's result, exactly as the SDK
    returned it; the follow-up prompt must render as Hugging Face renders the same
    conversation. The reference is the random-weight Qwen3.5 server (test_server_qwen.py),
    whose output depends on every prompt token."""
    r = oai.chat.completions.create(model=MODEL, messages=QUESTION, tools=[WEATHER], temperature=0)
    msg = r.choices[0].message
    call = msg.tool_calls[0]
    hf_messages = [*QUESTION,
                   {"role": "assistant", "content": "", "reasoning_content": msg.reasoning_content,
                    "tool_calls": [{"type": "function", "function": {
                        "name": call.function.name, "arguments": json.loads(call.function.arguments)}}]},
                   {"role": "tool", "content": "18 C and sunny"}]
    prompt = qwen_hf_tokenizer.apply_chat_template(hf_messages, tools=[WEATHER], add_generation_prompt=True,
                                                   tokenize=False)
    assert "<function=get_weather>\n<parameter=city>\nParis\n</parameter>" in prompt
    n_prompt = len(qwen_hf_tokenizer(prompt, add_special_tokens=False).input_ids)
    ref = openai.OpenAI(base_url=qwen_server.url + "/v1", api_key=API_KEY, max_retries=0)
    expected = ref.completions.create(model="tiny-qwen35", prompt=prompt, max_tokens=8, temperature=0).choices[0].text

    follow_up = [*QUESTION, msg.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "18 C and sunny"}]
    back = ref.chat.completions.create(model="tiny-qwen35", messages=follow_up, tools=[WEATHER], max_tokens=8,
                                       temperature=0)
    assert back.usage.prompt_tokens == n_prompt
    assert back.choices[0].message.reasoning_content == expected
    # The scripted server renders it too (and, being a bigram machine, calls the tool again).
    again = oai.chat.completions.create(model=MODEL, messages=follow_up, tools=[WEATHER], temperature=0)
    assert again.usage.prompt_tokens == n_prompt and again.choices[0].finish_reason == "tool_calls"

    # Anthropic: the thinking and tool_use blocks as returned, then a tool_result.
    m = ant.messages.create(model=MODEL, max_tokens=200, extra_body=GREEDY, messages=QUESTION,
                            tools=[anthropic_tool(WEATHER)])
    use = m.content[1]
    follow = [*QUESTION, {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m.content]},
              {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                            "content": "18 C and sunny"}]}]
    ref_ant = anthropic.Anthropic(base_url=qwen_server.url, api_key=API_KEY, max_retries=0)
    back = ref_ant.messages.create(model="tiny-qwen35", max_tokens=8, extra_body=GREEDY, messages=follow,
                                   tools=[anthropic_tool(WEATHER)])
    assert back.usage.input_tokens == n_prompt
    assert back.content[0].type == "thinking" and back.content[0].thinking == expected


def test_json_tool_call_form(scripted_qwen_json, qwen_hf_tokenizer):
    srv, info = scripted_qwen_json
    n_out = len(info["chains"][START_THINKING_ON])
    oai = openai.OpenAI(base_url=srv.url + "/v1", api_key=API_KEY, max_retries=0)
    r = oai.chat.completions.create(model=MODEL, messages=QUESTION, tools=[WEATHER], temperature=0)
    msg = r.choices[0].message
    assert r.choices[0].finish_reason == "tool_calls" and msg.reasoning_content == JSON_REASONING
    assert [(c.function.name, json.loads(c.function.arguments)) for c in msg.tool_calls] == [
        ("get_weather", {"city": "Paris"})]
    assert r.usage.completion_tokens == n_out
    s = collect_openai_stream(oai.chat.completions.create(model=MODEL, messages=QUESTION, tools=[WEATHER],
                                                          temperature=0, stream=True))
    assert s["finish"] == "tool_calls" and s["reasoning"] == JSON_REASONING
    assert [(c["name"], json.loads(c["arguments"])) for c in s["calls"].values()] == [
        ("get_weather", {"city": "Paris"})]
    ant = anthropic.Anthropic(base_url=srv.url, api_key=API_KEY, max_retries=0)
    with ant.messages.stream(model=MODEL, max_tokens=200, extra_body=GREEDY, messages=QUESTION,
                             tools=[anthropic_tool(WEATHER)]) as stream:
        final = stream.get_final_message()
    assert [b.type for b in final.content] == ["thinking", "tool_use"]
    assert final.content[1].input == {"city": "Paris"} and final.stop_reason == "tool_use"


# --- tool_choice ---------------------------------------------------------------------

def test_tool_choice_none_renders_and_parses_no_tools(oai, ant, qwen_hf_tokenizer):
    n_plain = len(render_ids(qwen_hf_tokenizer, QUESTION))
    r = oai.chat.completions.create(model=MODEL, messages=QUESTION, tools=[WEATHER, CLOCK], tool_choice="none",
                                    temperature=0)
    msg = r.choices[0].message
    assert r.usage.prompt_tokens == n_plain  # no tools in the prompt
    assert not msg.tool_calls and r.choices[0].finish_reason == "stop"
    assert msg.reasoning_content == TOOL_REASONING
    assert msg.content == "<tool_call>" + TOOL_CALL_XML + "</tool_call>"  # the markup stays text
    m = ant.messages.create(model=MODEL, max_tokens=200, extra_body=GREEDY, messages=QUESTION,
                            tools=[anthropic_tool(WEATHER)], tool_choice={"type": "none"})
    assert m.usage.input_tokens == n_plain and m.stop_reason == "end_turn"
    assert [b.type for b in m.content] == ["thinking", "text"]


def test_tool_choice_named_function(oai, ant, qwen_hf_tokenizer):
    only_weather = len(render_ids(qwen_hf_tokenizer, QUESTION, tools=[WEATHER]))
    only_clock = len(render_ids(qwen_hf_tokenizer, QUESTION, tools=[CLOCK]))
    both = len(render_ids(qwen_hf_tokenizer, QUESTION, tools=[WEATHER, CLOCK]))
    assert len({only_weather, only_clock, both}) == 3

    r = oai.chat.completions.create(model=MODEL, messages=QUESTION, tools=[WEATHER, CLOCK], temperature=0,
                                    tool_choice={"type": "function", "function": {"name": "get_weather"}})
    assert r.usage.prompt_tokens == only_weather  # only the named tool is rendered
    assert r.choices[0].finish_reason == "tool_calls"
    assert [c.function.name for c in r.choices[0].message.tool_calls] == ["get_weather"]

    # Naming another tool: the model's get_weather call is not parsed as a call.
    r = oai.chat.completions.create(model=MODEL, messages=QUESTION, tools=[WEATHER, CLOCK], temperature=0,
                                    tool_choice={"type": "function", "function": {"name": "get_time"}})
    assert r.usage.prompt_tokens == only_clock
    assert not r.choices[0].message.tool_calls and r.choices[0].finish_reason == "stop"
    assert "<function=get_weather>" in r.choices[0].message.content
    s = collect_openai_stream(oai.chat.completions.create(
        model=MODEL, messages=QUESTION, tools=[WEATHER, CLOCK], temperature=0, stream=True,
        tool_choice={"type": "function", "function": {"name": "get_time"}}))
    assert s["calls"] == {} and s["finish"] == "stop" and s["content"] == r.choices[0].message.content

    # Anthropic {"type": "tool", "name": ...}.
    tools = [anthropic_tool(WEATHER), anthropic_tool(CLOCK)]
    m = ant.messages.create(model=MODEL, max_tokens=200, extra_body=GREEDY, messages=QUESTION, tools=tools,
                            tool_choice={"type": "tool", "name": "get_weather"})
    assert m.usage.input_tokens == only_weather and m.stop_reason == "tool_use"
    m = ant.messages.create(model=MODEL, max_tokens=200, extra_body=GREEDY, messages=QUESTION, tools=tools,
                            tool_choice={"type": "tool", "name": "get_time"})
    assert m.usage.input_tokens == only_clock and m.stop_reason == "end_turn"
    assert [b.type for b in m.content] == ["thinking", "text"]

    # "auto" (and no tool_choice) offers every tool.
    r = oai.chat.completions.create(model=MODEL, messages=QUESTION, tools=[WEATHER, CLOCK], temperature=0,
                                    tool_choice="auto")
    assert r.usage.prompt_tokens == both and r.choices[0].finish_reason == "tool_calls"


def test_tool_choice_that_cannot_be_honoured_is_400(oai, ant):
    with pytest.raises(openai.BadRequestError) as e:
        oai.chat.completions.create(model=MODEL, messages=QUESTION, tools=[WEATHER], tool_choice="required")
    assert e.value.body["param"] == "tool_choice" and "required" in e.value.body["message"]
    with pytest.raises(openai.BadRequestError) as e:
        oai.chat.completions.create(model=MODEL, messages=QUESTION, tools=[WEATHER],
                                    tool_choice={"type": "function", "function": {"name": "get_time"}})
    assert "get_time" in e.value.body["message"]
    with pytest.raises(openai.BadRequestError):
        oai.chat.completions.create(model=MODEL, messages=QUESTION, tool_choice="sometimes")
    with pytest.raises(anthropic.BadRequestError) as e2:
        ant.messages.create(model=MODEL, max_tokens=8, messages=QUESTION, tools=[anthropic_tool(WEATHER)],
                            tool_choice={"type": "any"})
    assert e2.value.body["error"]["type"] == "invalid_request_error" and "any" in e2.value.body["error"]["message"]


def test_concurrent_requests_batch_and_stay_exact(oai, srv, chains):
    """Eight requests at once on the server's two slots, thinking on and off, streaming and
    not: decode steps carry two sequences, and prompt chunks join running decodes. Every
    reply must still be the exact scripted text (the batched forward pass computes each row
    as the single one does), and the engine must have run fewer forward passes than it
    generated tokens (some passes served two sequences). With VOLTINFER_SERVE_ARGS="--device
    cuda" this is the batched decode on the GPU."""
    import concurrent.futures as cf

    def one(i: int):
        thinking = i % 2 == 0
        kw = dict(model=MODEL, messages=QUESTION, temperature=0)
        if thinking:
            kw["tools"] = [WEATHER]
        else:
            kw["extra_body"] = {"enable_thinking": False}
        if i % 4 < 2:
            s = collect_openai_stream(oai.chat.completions.create(**kw, stream=True))
            calls = [(c["name"], json.loads(c["arguments"])) for c in s["calls"].values()]
            return thinking, s["reasoning"], s["content"], calls
        m = oai.chat.completions.create(**kw).choices[0].message
        calls = [(c.function.name, json.loads(c.function.arguments)) for c in m.tool_calls or []]
        return thinking, m.reasoning_content, m.content or "", calls

    before = srv.metrics()
    with cf.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, range(8)))
    after = srv.metrics()
    for thinking, reasoning, content, calls in results:
        if thinking:
            assert (reasoning, content, calls) == (TOOL_REASONING, "", [("get_weather", {"city": "Paris"})])
        else:
            assert (reasoning, content, calls) == (ANSWER_REASONING, ANSWER, [])
    generated = after["voltinfer_generated_tokens_total"] - before["voltinfer_generated_tokens_total"]
    steps = after["voltinfer_engine_steps_total"] - before["voltinfer_engine_steps_total"]
    assert generated >= 4 * (len(chains[START_THINKING_ON]) + len(chains[START_THINKING_OFF]))
    assert steps < generated, f"{steps} forward passes for {generated} tokens: nothing was batched"
