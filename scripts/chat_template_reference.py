#!/usr/bin/env python3
"""Reference renderings for voltinfer's chat-template interpreter.

Renders every template in tests/data/chat_templates/*.jinja over a fixed set of
conversations, and a set of small language-feature templates, with the very code
path transformers' `apply_chat_template(tokenize=False)` uses: message normalisation
(`_normalize_chat_messages`: None-valued keys dropped) followed by
`render_jinja_template` (ImmutableSandboxedEnvironment with trim_blocks and
lstrip_blocks, transformers' tojson / raise_exception / strftime_now / namespace /
dict, reasoning-field aliasing). Writes tests/data/chat_templates/expected.jsonl, one
JSON object per line:

  {"name", "template" (file stem) or "source" (inline text), "messages", "tools",
   "add_generation_prompt", "extra", and either "expected" (the rendered text) or
   "error" (the exception text) with "error_kind" ("raise" for raise_exception,
   "other" for any other failure, e.g. a TypeError or an undefined variable)}

Run from anywhere: python3 scripts/chat_template_reference.py
"""

import json
import pathlib
import random

import jinja2
from transformers.utils.chat_template_utils import (
    _normalize_chat_messages,
    render_jinja_template,
)

ROOT = pathlib.Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "chat_templates"

# Special tokens as the models' tokenizers define them; transformers passes them in
# (special_tokens_map) whether or not the template reads them.
SPECIAL = {
    "smollm2": {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>"},
    "qwen2_5": {"eos_token": "<|im_end|>"},
    "qwen3": {"eos_token": "<|im_end|>"},
    "qwen3_5": {"eos_token": "<|im_end|>"},
}

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city. Température in °C.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "City name, e.g. Zürich"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                    "days": {"type": "integer", "minimum": 1, "maximum": 7},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the web.",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string"},
                    "filters": {"type": "object", "properties": {"lang": {"type": "string"}}},
                    "limit": {"type": "number", "default": 2.5},
                },
                "required": ["query"],
            },
        },
    },
]

CALL_WEATHER = {
    "id": "call_1",
    "type": "function",
    "function": {
        "name": "get_weather",
        "arguments": {"city": "Zürich", "unit": "celsius", "days": 3, "verbose": True,
                      "ratio": 0.25, "tags": ["a", "b"], "opts": {"x": 1, "y": None}},
    },
}
CALL_SEARCH = {
    "id": "call_2",
    "type": "function",
    "function": {"name": "search", "arguments": {"query": "voltinfer \"V100\" <fast>", "limit": 10}},
}
CALL_STRING_ARGS = {
    "id": "call_3",
    "type": "function",
    "function": {"name": "search", "arguments": "{\"query\": \"raw json string\"}"},
}

SYS = {"role": "system", "content": "You are a terse assistant.\nAnswer in one line."}


def U(text):
    return {"role": "user", "content": text}


def A(text, **kw):
    return {"role": "assistant", "content": text, **kw}


def T(text, **kw):
    return {"role": "tool", "content": text, **kw}


# (name, messages, tools, add_generation_prompt, extra kwargs)
CONVERSATIONS = [
    ("single_user_gen", [U("Hello!")], None, True, {}),
    ("single_user_nogen", [U("Hello!")], None, False, {}),
    ("system_user_gen", [SYS, U("What is 2+2?")], None, True, {}),
    ("multi_turn_gen", [SYS, U("Hi"), A("Hello! How can I help?"), U("Tell me a joke.")], None, True, {}),
    ("multi_turn_nogen", [U("Hi"), A("Hello!"), U("Bye"), A("Goodbye.")], None, False, {}),
    ("thinking_off", [U("Quick: capital of France?")], None, True, {"enable_thinking": False}),
    ("thinking_on", [U("Quick: capital of France?")], None, True, {"enable_thinking": True}),
    ("reasoning_field", [U("2+3?"), A("5", reasoning_content="\nAdd two and three.\n"), U("times 4?"),
                          A("20", reasoning_content="5*4=20")], None, False, {}),
    ("reasoning_field_gen", [SYS, U("2+3?"), A("5", reasoning_content="Add.")], None, True,
     {"enable_thinking": False}),
    ("reasoning_inline_think", [U("Why?"), A("<think>\nbecause\n</think>\n\nBecause.")], None, False, {}),
    ("reasoning_alias_thinking", [U("Why?"), A("Because.", thinking="old-style field")], None, False, {}),
    ("unicode", [U("Grüße 👋 — naïve café? 日本語"), A("Ça va ✓")], None, True, {}),
    ("whitespace_content", [U("  padded  \n"), A("\n\nanswer\n")], None, True, {}),
    ("tools_only", [U("Weather in Zürich?")], TOOLS, True, {}),
    ("tools_with_system", [SYS, U("Weather in Zürich?")], TOOLS, True, {"enable_thinking": False}),
    ("tool_call_roundtrip",
     [SYS, U("Weather in Zürich and search V100?"),
      A("Let me check.", tool_calls=[CALL_WEATHER, CALL_SEARCH]),
      T("{\"temp\": 21.5}", tool_call_id="call_1"), T("3 results", tool_call_id="call_2"),
      A("It is 21.5 °C.")], TOOLS, False, {}),
    ("tool_call_then_gen",
     [U("Weather?"), A("", tool_calls=[CALL_WEATHER]), T("sunny")], TOOLS, True, {}),
    ("tool_call_null_content",
     [U("Weather?"), A(None, tool_calls=[CALL_SEARCH]), T("none found")], TOOLS, True, {}),
    ("tool_call_string_args",
     [U("Search it"), A("", tool_calls=[CALL_STRING_ARGS]), T("ok")], None, True, {}),
    ("tool_call_with_reasoning",
     [U("Weather?"), A("Checking.", reasoning_content="Need the tool.", tool_calls=[CALL_WEATHER]),
      T("sunny"), A("Sunny.", reasoning_content="Got it.")], TOOLS, False, {}),
    ("content_parts",
     [{"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
      {"role": "user", "content": [{"type": "text", "text": "Part one."}, {"type": "text", "text": " Part two."}]}],
     None, True, {}),
    ("content_image_part",
     [{"role": "user", "content": [{"type": "image", "image": "img.png"}, {"type": "text", "text": "What is it?"}]}],
     None, True, {"add_vision_id": True}),
    ("system_not_first", [U("Hi"), SYS, U("Again")], None, True, {}),
    ("no_user_query", [SYS, A("I start.")], None, True, {}),
    ("unknown_role", [U("Hi"), {"role": "developer", "content": "Do X."}], None, True, {}),
    ("empty_messages", [], None, True, {}),
]

# Small templates that exercise one language feature each; rendered with the same
# environment over a fixed context. (name, source, context)
FEATURE_CTX = {
    "s": "  Hello, World  ",
    "n": 7,
    "f": 2.5,
    "big": 1e20,
    "tiny": 1.5e-7,
    "items": [3, 1, 2],
    "words": ["b", "A", "c"],
    "d": {"z": 1, "a": [1, 2], "m": {"k": "v"}},
    "people": [{"name": "Ann", "age": 31, "admin": True}, {"name": "Bob", "age": 25, "admin": False},
               {"name": "Cy", "age": 40}],
    "flag": False,
    "nothing": None,
    "uni": "Grüße 👋 ok",
    "quote": "it's \"q\" <b>&",
}
FEATURES = [
    ("print_types", "{{ n }}|{{ f }}|{{ big }}|{{ tiny }}|{{ none }}|{{ flag }}|{{ items }}|{{ d }}|{{ words }}|{{ undefined_name }}|"),
    ("print_repr_quotes", "{{ [quote, 'x'] }} {{ {'k': quote} }}"),
    ("arith", "{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 10 / 4 }} {{ 2 ** 10 }} {{ 1 + 2 * 3 - 4 }} {{ 0.1 + 0.2 }} {{ 3 * 'ab' }} {{ [1] + [2, 3] }} {{ n / 7 }} {{ 2.0 * 3 }}"),
    ("concat_tilde", "{{ 'a' ~ n ~ none ~ flag ~ undefined_name ~ f }}"),
    ("compare", "{{ 1 == 1.0 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ n >= 7 }} {{ 'x' != 'y' }} {{ none == none }} {{ true == 1 }} {{ undefined_name == undefined_other }}"),
    ("logic", "{{ flag or 'alt' }} {{ n and 'yes' }} {{ not flag }} {{ none or [] }} {{ '' or 0 }} {{ 1 if flag else 2 }} [{{ 'x' if flag }}]"),
    ("in_tests", "{{ 'ell' in s }} {{ 2 in items }} {{ 'a' in d }} {{ 'q' not in d }} {{ 'x' in words }}"),
    ("is_tests", "{{ n is number }} {{ flag is number }} {{ n is integer }} {{ f is float }} {{ flag is boolean }} {{ s is string }} {{ d is mapping }} {{ items is sequence }} {{ d is sequence }} {{ s is iterable }} {{ none is none }} {{ flag is false }} {{ flag is true }} {{ x is defined }} {{ x is undefined }} {{ n is odd }} {{ n is even }} {{ n is divisibleby 7 }} {{ n is eq 7 }} {{ 'A' is upper }} {{ items is not string }}"),
    ("slicing", "{{ items[::-1] }} {{ items[1:] }} {{ items[:2] }} {{ s[2:7] }} {{ uni[::-1] }} {{ uni[:3] }} {{ items[-1] }} {{ s[-3:] }} {{ items[::2] }} {{ items[5] }}|"),
    ("subscripts", "{{ d.z }} {{ d['a'][1] }} {{ d.m.k }} {{ people[1].name }} {{ people[2].admin }}|{{ d.missing }}|{{ people.0.age }}"),
    ("literals", "{{ [1, 'two', [3]] }} {{ {'a': 1, 'b': {'c': none}} }} {{ (1, 2) }} {{ 'a' 'b' }} {{ \"dq\\n\" }} {{ 'tab\\tx' }}"),
    ("str_methods", "{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ s.strip(' Hd') }}|{{ s.upper() }}|{{ s.lower() }}|{{ s.split(',') }}|{{ 'a b  c'.split() }}|{{ s.replace('l', 'L') }}|{{ s.startswith('  H') }}|{{ s.endswith(('x', '  ')) }}|{{ 'a-b-c'.split('-', 1) }}|{{ 'x,y'.rsplit(',', 1) }}|{{ s.find('World') }}|{{ 'ab'.title() }}|{{ 'hello world'.capitalize() }}"),
    ("filters_basic", "{{ s|trim }}|{{ s|length }}|{{ uni|length }}|{{ items|length }}|{{ d|length }}|{{ s|upper }}|{{ s|lower }}|{{ 'hello wORLD'|capitalize }}|{{ s|replace('o', '0') }}|{{ items|first }}|{{ items|last }}|{{ words|join(', ') }}|{{ items|join }}|{{ items|string }}|{{ 'ab'|list }}|{{ d|list }}|{{ '42'|int }}|{{ 'x'|int }}|{{ 3.9|int }}|{{ none|default('dflt') }}|{{ undefined_name|default('dflt') }}|{{ ''|default('dflt', true) }}|{{ s|trim('  Hd') }}"),
    ("filters_collections", "{{ d|items|list }}|{{ d|dictsort }}|{{ {'b': 1, 'A': 2, 'c': 0}|dictsort }}|{{ {'b': 1, 'A': 2}|dictsort(by='value', reverse=true) }}|{{ items|sort }}|{{ words|sort }}|{{ items|reverse|list }}|{{ items|sum }}|{{ items|min }}|{{ items|max }}|{{ [1, 2, 1, 3]|unique|list }}|{{ people|map(attribute='name')|join('/') }}|{{ people|selectattr('admin')|map(attribute='name')|list }}|{{ people|rejectattr('admin')|map(attribute='name')|list }}|{{ people|selectattr('age', 'gt', 30)|map(attribute='name')|list }}|{{ people|selectattr('name', 'equalto', 'Bob')|list|length }}|{{ words|map('upper')|list }}|{{ items|select('odd')|list }}|{{ items|reject('odd')|list }}|{{ people|sort(attribute='age')|map(attribute='name')|list }}"),
    ("tojson", "{{ d|tojson }}|{{ people|tojson }}|{{ uni|tojson }}|{{ uni|tojson(ensure_ascii=true) }}|{{ quote|tojson }}|{{ d|tojson(indent=2) }}|{{ [1, [], {}]|tojson(indent=4) }}|{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }}|{{ f|tojson }}|{{ big|tojson }}|{{ none|tojson }}|{{ flag|tojson }}|{{ 'a\\nb\\u0001'|tojson }}|{{ d|tojson(separators=(',', ':')) }}"),
    ("for_loop_vars", "{% for x in words %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}[{{ loop.previtem }}|{{ loop.nextitem }}]{{ loop.cycle('o', 'e') }};{% endfor %}"),
    ("for_else_filter", "{% for x in items if x > 5 %}{{ x }}{% else %}none>5{% endfor %}|{% for x in items if x > 1 %}{{ x }}{{ loop.length }}{{ loop.last }},{% endfor %}|{% for k, v in d|items %}{{ k }}={{ v }};{% endfor %}|{% for k in d %}{{ k }}{% endfor %}|{% for c in 'abc' %}{{ c }}.{% endfor %}|{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}"),
    ("for_break_continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x > 4 %}{% break %}{% endif %}{{ x }}{% endfor %}|{{ range(3)|list }}|{{ range(1, 10, 3)|list }}"),
    ("nested_loops", "{% for a in [1, 2] %}{% for b in 'xy' %}{{ loop.index }}{{ a }}{{ b }} {% endfor %}{{ loop.index }};{% endfor %}"),
    ("set_scoping", "{% set a = 1 %}{% for i in [1, 2] %}{% set a = a + i %}{{ a }}{% endfor %}|{{ a }}|{% if true %}{% set a = 5 %}{% endif %}{{ a }}|{% set x, y = 1, 2 %}{{ x }}{{ y }}"),
    ("namespace", "{% set ns = namespace(total=0, last=none) %}{% for i in items %}{% set ns.total = ns.total + i %}{% set ns.last = i %}{% endfor %}{{ ns.total }} {{ ns.last }} {{ ns.missing is defined }}"),
    ("block_set", "{% set block %}\n  inner {{ n }}\n{% endset %}[{{ block }}]{% set up | upper %}shout{% endset %}{{ up }}"),
    ("macros", "{% macro greet(name, greeting='Hello', punct='!') %}{{ greeting }}, {{ name }}{{ punct }}{% endmacro %}{{ greet('Ann') }} {{ greet('Bob', 'Hi') }} {{ greet(name='Cy', punct='?') }} {{ greet('Dee')|upper }}"),
    ("macro_globals", "{% set outer = 'O1' %}{% macro m() %}{{ outer }}{{ n }}{% endmacro %}{{ m() }}{% set outer = 'O2' %}{{ m() }}{% for outer in [1] %}{{ m() }}{% endfor %}"),
    ("call_block", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold {{ n }}{% endcall %}|{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}{% call(v) each([1, 2]) %}[{{ v }}]{% endcall %}"),
    ("whitespace_control", "a  {{- ' b ' -}}  c\n  {%- if true %}\n    d\n  {%- endif %}\n{# comment #}\ne {{ 'f' }}\n"),
    ("trim_lstrip_blocks", "<ul>\n    {% for x in words %}\n    <li>{{ x }}</li>\n    {% endfor %}\n</ul>\n  {# c #}\nend\n"),
    ("plus_disables_trim", "x\n    {%+ if true %}y{% endif +%}\nz\n"),
    ("raw_block", "{% raw %}{{ not parsed }} {% if %}{% endraw %}|"),
    ("comment_only", "{# just a comment #}\nline\n"),
    ("filter_block", "{% filter upper %}hello {{ s|trim }}{% endfilter %}"),
    ("with_block", "{% with a = 5, b = 'x' %}{{ a }}{{ b }}{% endwith %}[{{ a }}]"),
    ("generation_block", "{% for m in ['u', 'a'] %}{% generation %}<{{ m }}>{% endgeneration %}{% endfor %}"),
    ("dict_methods", "{{ d.get('z') }} {{ d.get('q', 'dq') }} {{ d.get('q') }} {{ d.keys()|list }} {{ d.values()|list|length }} {{ d.items()|list|first }} {{ dict(a=1, b=2) }}"),
    ("safe_concat", "{{ ('<a>'|safe) + '<b>' }} {{ '<x>' ~ ('<y>'|safe) }} {{ quote|safe }} {{ quote|e }}"),
    ("undefined_ops", "{{ (x is defined) }} {{ x|length }} {{ x|string }} [{{ x }}] {{ x|default(3) + 1 }} {% for i in x %}no{% else %}empty{% endfor %} {{ x|items|list }} {{ 'k' in x }}"),
    ("unicode_methods", "{{ uni|upper }} {{ uni|length }} {{ uni[6] }} {{ 'ÀÉ'|lower }} {{ uni|replace('ü', 'ue') }} {{ '\u00a0x\u3000'.strip()|length }}"),
    ("string_escapes", "{{ '\\x41\\u00e9\\101\\d\\'q\\\"' }}|{{ \"it's\" }}|{{ 'a\\\\b' }}"),
    ("precedence", "{{ not 1 == 2 }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ -1|abs }} {{ 'ab' ~ (1 + 2) }} {{ 2 + items|length * 2 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ 'x' if none else 'y' if flag else 'z' }} {{ not flag and n }} {{ n is number and n > 3 }}"),
    ("tuples_and_repr", "{{ (1,) }} {{ () }} {{ (1, 'a', none) }} {{ [(1, 2)] }} {{ {'k': (1,)} }} {{ -0.0 }} {{ 1e100 }} {{ 123456789012 }} {{ 0.1 * 3 }} {{ 1 / 3 }} {{ 2.5e-5 }} {{ 1e16 }} {{ 1e15 }}"),
    ("more_filters", "{{ 'a\\nb\\n\\nc'|indent(2) }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'x\\n\\ny'|indent(2, blank=true) }}|{{ 2.567|round(2) }}|{{ 2.5|round }}|{{ 3.5|round }}|{{ 2.1|round(0, 'ceil') }}|{{ 'one two  three'|wordcount }}|{{ '3.5'|float }}|{{ 'x'|float }}|{{ 'hello big world'|title }}|{{ items|sum(start=10) }}|{{ people|sum(attribute='age') }}|{{ people|max(attribute='age')|attr('name') }}|{{ words|min }}|{{ words|max(case_sensitive=true) }}|{{ ['b', 'B', 'a']|unique|list }}|{{ ' x '|string|length }}|{{ 42|string + '!' }}"),
    ("loop_cycle_and_nested_macros", "{% macro row(x) %}[{{ caller(x * 2) }}]{% endmacro %}{% for i in [1, 2, 3] %}{{ loop.cycle('a', 'b') }}{% call(v) row(i) %}{{ v }}{{ loop.index }}{% endcall %}{% endfor %}"),
    ("sandbox_dunder", "[{{ ''.__class__ }}][{{ items.__len__ }}][{{ d.__class__ }}]"),
    ("lstrip_edges", "a {% if true %}b{% endif %}\n  {%- if true %}c{% endif %}\n\t{% if true %}d{% endif %}\n  {{ 'e' }}\n  {%+ if true %}f{% endif %}\n  {# c #}g\n{%- raw -%}  r  {%- endraw %}\nh"),
    ("set_and_if_scopes", "{% set x = 1 %}{% if true %}{% set x = 2 %}{% set y = 3 %}{% endif %}{{ x }}{{ y }}{% for i in [1] %}{% set y = 9 %}{{ y }}{% endfor %}{{ y }}{% macro m() %}{% set x = 7 %}{{ x }}{% endmacro %}{{ m() }}{{ x }}"),
    ("is_sameas_and_none_cmp", "{{ none is sameas none }} {{ 1 is sameas 1 }} {{ false is sameas false }} {{ [] is sameas [] }} {{ none == false }} {{ 0 == false }} {{ '' is none }} {{ n is not none }}"),
    ("undefined_chains", "{{ d.missing is defined }} {{ d.missing|default('dd') }} {% if d.missing and d.missing.x %}y{% else %}n{% endif %} {{ (d.missing or {}).x is defined }} {{ people[9] is defined }} {{ people[9].name|default('nobody') if people[9] is defined else 'nobody' }}"),
    ("raise_in_template", "before {{ raise_exception('custom failure: ' ~ n) }}"),
    ("error_undefined_attr", "{{ x.y }}"),
    ("error_type_add", "{{ 'a' + 1 }}"),
    ("error_unsafe_append", "{% set l = [1] %}{{ l.append(2) }}"),
    ("error_items_of_string", "{% for k, v in 'ab'|items %}{% endfor %}"),
    ("error_div_zero", "{{ 1 / 0 }}"),
]


WORDS = ["hello", "Zürich", "naïve", "👋", "日本語", "{{ not_a_tag }}", "{% raw %}", "<think>", "</think>",
         "<tool_call>", "'quoted'", "\"dq\"", "back\\slash", "tab\there", "  ", "\n", "\n\n", "x" * 40, "0",
         "None", "true", "<|im_end|>", "a-b", "100%", "ü", "\u00a0", "—"]


def random_text(rng):
    return "".join(rng.choice(WORDS) + rng.choice(["", " ", "\n"]) for _ in range(rng.randint(0, 8)))


def random_args(rng):
    args = {}
    for key in rng.sample(["city", "days", "flag", "ratio", "tags", "nested", "empty"], rng.randint(0, 4)):
        args[key] = {"city": random_text(rng), "days": rng.randint(-5, 500), "flag": rng.random() < 0.5,
                     "ratio": rng.choice([0.5, 1e-7, 3.0, 123456.789, 1e22]),
                     "tags": [random_text(rng) for _ in range(rng.randint(0, 3))],
                     "nested": {"k": rng.randint(0, 9), "s": random_text(rng)}, "empty": {}}[key]
    return args


def random_conversation(rng):
    """A seeded random but well-formed chat: optional system, user turns, assistant turns with
    optional reasoning and tool calls, and the tool results answering them."""
    msgs = []
    if rng.random() < 0.5:
        msgs.append({"role": "system", "content": random_text(rng)})
    for _ in range(rng.randint(1, 4)):
        msgs.append(U(random_text(rng)))
        if rng.random() < 0.8:
            a = A(random_text(rng))
            if rng.random() < 0.4:
                a["reasoning_content"] = random_text(rng)
            if rng.random() < 0.3:
                calls = [{"type": "function", "function": {"name": rng.choice(["get_weather", "search"]),
                                                             "arguments": random_args(rng)}}
                         for _ in range(rng.randint(1, 3))]
                a["tool_calls"] = calls
                msgs.append(a)
                for _ in calls:
                    msgs.append(T(random_text(rng)))
                if rng.random() < 0.7:
                    msgs.append(A(random_text(rng)))
            else:
                msgs.append(a)
    tools = TOOLS[: rng.randint(1, 2)] if rng.random() < 0.5 else None
    extra = {}
    if rng.random() < 0.6:
        extra["enable_thinking"] = rng.random() < 0.5
    return msgs, tools, rng.random() < 0.5, extra


def render(source, messages, tools, add_generation_prompt, extra):
    """Exactly apply_chat_template(tokenize=False)'s path after the special-token map."""
    chats = [_normalize_chat_messages(messages)]
    out, _ = render_jinja_template(conversations=chats, tools=tools, chat_template=source,
                                   add_generation_prompt=add_generation_prompt, **extra)
    return out[0]


def row(base, source, messages, tools, agp, extra):
    r = dict(base, messages=messages, tools=tools, add_generation_prompt=agp, extra=extra)
    try:
        r["expected"] = render(source, messages, tools, agp, extra)
    except jinja2.exceptions.TemplateError as e:
        # raise_exception() raises a bare TemplateError; subclasses (undefined,
        # syntax, security) are the engine's own failures.
        r["error"] = str(e)
        r["error_kind"] = "raise" if type(e) is jinja2.exceptions.TemplateError else "other"
    except Exception as e:  # TypeError, ZeroDivisionError, ...
        r["error"] = f"{type(e).__name__}: {e}"
        r["error_kind"] = "other"
    return r


def main():
    rows = []
    for path in sorted(DATA.glob("*.jinja")):
        source = path.read_text(encoding="utf-8")
        for name, messages, tools, agp, extra in CONVERSATIONS:
            extra = {**SPECIAL.get(path.stem, {}), **extra}
            rows.append(row({"name": f"{path.stem}/{name}", "template": path.stem}, source,
                            messages, tools, agp, extra))
        rng = random.Random(f"voltinfer-chat-{path.stem}")  # seeded: the file is reproducible
        for k in range(16):
            messages, tools, agp, extra = random_conversation(rng)
            extra = {**SPECIAL.get(path.stem, {}), **extra}
            rows.append(row({"name": f"{path.stem}/random_{k:02d}", "template": path.stem}, source,
                            messages, tools, agp, extra))
    for name, source, in FEATURES:
        rows.append(row({"name": f"feature/{name}", "source": source}, source,
                        [U("x")], None, False, FEATURE_CTX))
    out = DATA / "expected.jsonl"
    with out.open("w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    n_err = sum("error" in r for r in rows)
    print(f"wrote {len(rows)} cases ({n_err} expected errors) to {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
