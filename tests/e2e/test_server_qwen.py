"""`voltinfer serve` with a tiny random-weight Qwen3.5 (real Qwen3.5 tokenizer and chat
template; see server_fixtures.py), through the official SDKs. A random model never writes
<think> or <tool_call> on its own, so these tests use what the template itself does:
with thinking on, Qwen3.5's template ends the prompt with "<think>\\n", so everything the
model writes is reasoning (cut off mid-thought by max_tokens); with thinking off the
template closes the think block and everything is content. The reference for each answer
is the raw /v1/completions text for the prompt transformers renders from the same
conversation — which also proves that tools, tool calls and tool results were rendered
byte for byte as Hugging Face does. The stream parsers themselves are unit-tested in
tests/unit/server/."""

from __future__ import annotations

import json

import anthropic
import openai
import pytest

from server_fixtures import API_KEY, qwen_dir, qwen_hf_tokenizer, qwen_server  # noqa: F401  (fixtures)

MODEL = "tiny-qwen35"
# This anthropic SDK has no sampling arguments; the API fields go in the body.
GREEDY = {"temperature": 0}
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


@pytest.fixture(scope="module")
def oai(qwen_server):
    return openai.OpenAI(base_url=qwen_server.url + "/v1", api_key=API_KEY, max_retries=0)


@pytest.fixture(scope="module")
def ant(qwen_server):
    return anthropic.Anthropic(base_url=qwen_server.url, api_key=API_KEY, max_retries=0)


def raw_completion(oai, prompt: str, n: int) -> str:
    r = oai.completions.create(model=MODEL, prompt=prompt, max_tokens=n, temperature=0)
    assert r.choices[0].finish_reason == "length"
    return r.choices[0].text


def render(tok, messages, tools=None, **kw) -> str:
    return tok.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False, **kw)


def test_reasoning_split_when_template_opens_think(oai, ant, qwen_hf_tokenizer):
    messages = [{"role": "user", "content": "Why is the sky blue?"}]
    prompt = render(qwen_hf_tokenizer, messages)
    assert prompt.endswith("<think>\n")
    expected = raw_completion(oai, prompt, 16)

    r = oai.chat.completions.create(model=MODEL, messages=messages, max_tokens=16, temperature=0)
    msg = r.choices[0].message
    assert r.choices[0].finish_reason == "length"
    assert msg.reasoning_content == expected  # cut off mid-thought: all of it is reasoning
    assert not msg.content
    assert r.usage.prompt_tokens == len(qwen_hf_tokenizer(prompt, add_special_tokens=False).input_ids)

    reasoning, content = "", ""
    for chunk in oai.chat.completions.create(model=MODEL, messages=messages, max_tokens=16, temperature=0,
                                             stream=True):
        for c in chunk.choices:
            reasoning += getattr(c.delta, "reasoning_content", None) or ""
            content += c.delta.content or ""
    assert reasoning == expected and content == ""

    # Anthropic: a thinking block, streamed as thinking_delta events.
    m = ant.messages.create(model=MODEL, max_tokens=16, extra_body=GREEDY, messages=messages,
                            thinking={"type": "enabled", "budget_tokens": 1024})
    assert [b.type for b in m.content] == ["thinking"] and m.content[0].thinking == expected
    assert m.stop_reason == "max_tokens"
    kinds, thinking = [], ""
    for ev in ant.messages.create(model=MODEL, max_tokens=16, extra_body=GREEDY, messages=messages, stream=True,
                                  thinking={"type": "enabled", "budget_tokens": 1024}):
        kinds.append(ev.type)
        if ev.type == "content_block_delta" and ev.delta.type == "thinking_delta":
            thinking += ev.delta.thinking
    assert thinking == expected
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]


def test_thinking_switched_off(oai, ant, qwen_hf_tokenizer):
    messages = [{"role": "user", "content": "Say something."}]
    prompt = render(qwen_hf_tokenizer, messages, enable_thinking=False)
    assert prompt.endswith("</think>\n\n")
    expected = raw_completion(oai, prompt, 12)
    for extra in ({"chat_template_kwargs": {"enable_thinking": False}}, {"enable_thinking": False}):
        r = oai.chat.completions.create(model=MODEL, messages=messages, max_tokens=12, temperature=0,
                                        extra_body=extra)
        assert r.choices[0].message.content == expected
        assert getattr(r.choices[0].message, "reasoning_content", None) is None
    m = ant.messages.create(model=MODEL, max_tokens=12, extra_body=GREEDY, messages=messages,
                            thinking={"type": "disabled"})
    assert [b.type for b in m.content] == ["text"] and m.content[0].text == expected


def test_tool_round_trip(oai, ant, qwen_hf_tokenizer):
    """The client sends back the model's tool call and the tool's result; the server must
    render tools, the call and the result through the template exactly as HF does."""
    call_args = {"city": "Paris"}
    hf_messages = [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "get_weather", "arguments": call_args}}]},
        {"role": "tool", "content": "18 C and sunny"},
    ]
    prompt = render(qwen_hf_tokenizer, hf_messages, tools=TOOLS)
    assert "<function=get_weather>" in prompt and "<tool_response>\n18 C and sunny" in prompt
    assert '"name": "get_weather"' in prompt
    expected = raw_completion(oai, prompt, 10)
    n_prompt = len(qwen_hf_tokenizer(prompt, add_special_tokens=False).input_ids)

    r = oai.chat.completions.create(model=MODEL, max_tokens=10, temperature=0, tools=TOOLS, messages=[
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_abc", "type": "function",
             "function": {"name": "get_weather", "arguments": json.dumps(call_args)}}]},
        {"role": "tool", "tool_call_id": "call_abc", "content": "18 C and sunny"},
    ])
    assert r.usage.prompt_tokens == n_prompt
    assert r.choices[0].message.reasoning_content == expected

    m = ant.messages.create(model=MODEL, max_tokens=10, extra_body=GREEDY, tools=[{
        "name": "get_weather", "description": "Current weather in a city",
        "input_schema": TOOLS[0]["function"]["parameters"]}], messages=[
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                           "input": call_args}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                      "content": "18 C and sunny"}]},
    ])
    assert m.usage.input_tokens == n_prompt
    assert m.content[0].type == "thinking" and m.content[0].thinking == expected


def test_template_rejection_is_400(oai):
    # Qwen3.5's template raises for a conversation with no user turn.
    with pytest.raises(openai.BadRequestError) as e:
        oai.chat.completions.create(model=MODEL, max_tokens=4,
                                    messages=[{"role": "system", "content": "You are terse."}])
    assert "No user query" in e.value.body["message"]
