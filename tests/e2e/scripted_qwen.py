"""A tiny Qwen3.5 whose weights are constructed so that greedy decoding writes a fixed text
after the chat template's generation prompt: a bigram machine inside a real hybrid model.

How it works: every mixer and MLP output projection (linear_attn.out_proj, self_attn.o_proj,
mlp.down_proj) is zero, so each layer passes the residual stream through unchanged and the
final hidden state is the embedding of the current token. Embeddings are random unit
vectors; the (untied) lm_head row of token B is a multiple of the embedding of token A when
B must follow A. The logit of the intended successor is then the largest (cosine 1 against
cosines < 1 for every other successor row, 0 for all tokens off the chains), so the next
token depends only on the current one.

A bigram machine can use each token id once, so each target text is spelled as a sequence
of ids found by a small search over the vocabulary: any ids whose pieces concatenate to the
text will do (it need not be the tokenizer's own segmentation), with no id repeated across
all chains and none equal to a chain's start token. A chain starts at the last token of the
generation prompt (Qwen3.5's "<think>\\n" ends in "\\n", "</think>\\n\\n" in "\\n\\n") and ends
with <|im_end|>.

The model still runs every op of Qwen3.5 (gated delta net, gated attention, MLP, norms);
only their contributions are zero. What it tests is the server: markers the model emits
token by token (some as single added tokens, some split over several pieces), the reasoning
and tool-call parsers, and the SDK shapes."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from tokenizer_make_fixtures import bytes_to_unicode  # noqa: E402  (the one GPT-2 byte table)

END_OF_TURN = "<|im_end|>"

# The scripted replies, as segments (see find_chains). In Qwen's vocabulary a newline occurs
# only in whitespace-only tokens, and "\n" and "\n\n" are the chains' start tokens, so the
# replies keep Qwen's markup but few of its newlines (the parsers accept both layouts; the
# C++ parser tests use the real layout with real Qwen3.5 tokens).
# Thinking on: the template pre-fills "<think>\n"; the model reasons, closes the block and
# calls get_weather in Qwen's XML form.
TOOL_REASONING = "The user wants the weather in Paris, so I will call get_weather."
TOOL_CALL_XML = "<function=get_weather><parameter=city>Paris</parameter></function>"
SCRIPT_TOOL_CALL = [TOOL_REASONING, "</think>", "\n\n\n", "<tool_call>", TOOL_CALL_XML, "</tool_call>"]
# Thinking off: the template closes an empty block; the model opens its own, reasons, and
# answers in plain text.
ANSWER_REASONING = "Paris is a city; no tool is needed."
ANSWER = "The capital of France is Paris!"
SCRIPT_ANSWER = ["<think>", ANSWER_REASONING + "</think>" + ANSWER]
# The JSON tool-call form (Qwen2.5/Qwen3), for a second model with thinking on.
JSON_REASONING = "Paris weather needs the tool."
TOOL_CALL_JSON = '{"name":"get_weather","arguments":{"city":"Paris"}}'  # compact: the spaced form needs ' "' 4 times
SCRIPT_JSON_CALL = [JSON_REASONING, "</think>", "\n\n\n", "<tool_call>", TOOL_CALL_JSON, "</tool_call>"]
# Last token of the generation prompt with thinking on / off (test_server_qwen_scripted checks it).
START_THINKING_ON = "\n"
START_THINKING_OFF = "\n\n"


def _byte_decoder() -> dict[str, int]:
    """The byte-level BPE alphabet (printable stand-ins for bytes), inverted."""
    return {c: b for b, c in bytes_to_unicode().items()}


def token_texts(tok_json: dict) -> tuple[dict[int, str], dict[str, int]]:
    """id -> decoded text for every non-special token whose bytes are ASCII (the targets
    are ASCII), and special-token text -> id."""
    dec = _byte_decoder()
    texts: dict[int, str] = {}
    for piece, i in tok_json["model"]["vocab"].items():
        try:
            raw = bytes(dec[c] for c in piece)
        except KeyError:
            continue
        if raw and raw.isascii():
            texts[i] = raw.decode("ascii")
    special = {}
    for a in tok_json["added_tokens"]:
        if a["special"]:
            special[a["content"]] = a["id"]
            texts.pop(a["id"], None)
        elif a["content"].isascii():
            texts[a["id"]] = a["content"]  # <think>, <tool_call>, ... are emitted as text
    return texts, special


def find_chain(text: str, texts: dict[int, str], used: set[int]) -> list[int]:
    """Ids whose pieces concatenate to `text`, none in `used` and none repeated (added to
    `used`). Depth-first, longest piece first; raises when the vocabulary cannot do it."""
    by_first: dict[str, list[tuple[str, int]]] = {}
    for i, s in texts.items():
        if s and s in text:
            by_first.setdefault(s[0], []).append((s, i))
    for cands in by_first.values():
        cands.sort(key=lambda c: (-len(c[0]), c[1]))
    chain: list[int] = []
    budget = [200_000]  # search steps; a text the vocabulary cannot spell fails fast

    def go(pos: int) -> bool:
        if pos == len(text):
            return True
        budget[0] -= 1
        if budget[0] < 0:
            return False
        for s, i in by_first.get(text[pos], []):
            if i in used or not text.startswith(s, pos):
                continue
            used.add(i)
            chain.append(i)
            if go(pos + len(s)):
                return True
            chain.pop()
            used.discard(i)
        return False

    if not go(0):
        raise RuntimeError(f"no repetition-free token chain spells {text!r}")
    return chain


def find_chains(scripts: dict[str, list[str]], texts: dict[int, str], used: set[int]) -> dict[str, list[int]]:
    """One chain per script, a script being a list of segments (a segment boundary is also
    a token boundary). Markup segments (tags, newlines), where the few pieces holding '<',
    '>', '=' or a newline are quickly used up, are spelled first across all scripts; prose
    has plenty of alternatives and comes last."""
    def markup(seg: str) -> bool:
        return any(c in seg for c in "<>=\n")

    order = [(s, k) for s in scripts for k, seg in enumerate(scripts[s]) if markup(seg)]
    order += [(s, k) for s in scripts for k, seg in enumerate(scripts[s]) if not markup(seg)]
    parts: dict[tuple[str, int], list[int]] = {}
    for s, k in order:
        parts[(s, k)] = find_chain(scripts[s][k], texts, used)
    return {s: [i for k in range(len(segs)) for i in parts[(s, k)]] for s, segs in scripts.items()}


def build_scripted_qwen35(folder: Path, tokenizer_dir: Path, template: Path, scripts: dict[str, list[str]],
                          seed: int = 20261129) -> dict:
    """Writes the model to `folder`. `scripts` maps a start token's text (START_THINKING_ON /
    START_THINKING_OFF) to the reply it must produce, as segments (see find_chains).
    Returns {"chains": {start: [ids]}, "starts": {start: id}, "end": <|im_end|>'s id}."""
    import torch
    import transformers

    tok_json = json.loads((tokenizer_dir / "tokenizer.json").read_text())
    vocab = tok_json["model"]["vocab"]
    n_vocab = max(max(vocab.values()), *(a["id"] for a in tok_json["added_tokens"])) + 1
    texts, special = token_texts(tok_json)
    eot = special[END_OF_TURN]
    starts = {s: _single_id(texts, s) for s in scripts}
    used = set(starts.values()) | set(special.values())
    chains = find_chains(scripts, texts, used)
    for s, ids in chains.items():
        assert "".join(texts[i] for i in ids) == "".join(scripts[s])

    cfg = transformers.Qwen3_5TextConfig(
        vocab_size=n_vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, linear_num_key_heads=2,
        linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=32,
        linear_conv_kernel_dim=4, rms_norm_eps=1e-6, tie_word_embeddings=False,
        max_position_embeddings=4096, initializer_range=0.02,
        rope_parameters={"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
                         "mrope_section": [2, 1, 1], "mrope_interleaved": True})
    torch.manual_seed(seed)
    model = transformers.Qwen3_5ForCausalLM(cfg).to(torch.float32)
    sd = model.state_dict()
    zeroed = [k for k in sd if k.endswith(("linear_attn.out_proj.weight", "self_attn.o_proj.weight",
                                           "mlp.down_proj.weight"))]
    assert len(zeroed) == 2 * cfg.num_hidden_layers, zeroed  # one mixer and one MLP per layer
    with torch.no_grad():
        for k in zeroed:
            sd[k].zero_()
        emb = torch.randn(n_vocab, cfg.hidden_size)
        emb /= emb.norm(dim=1, keepdim=True)
        model.model.embed_tokens.weight.copy_(emb)
        head = torch.zeros(n_vocab, cfg.hidden_size)
        gain = 4.0  # logit of the intended successor: gain * sqrt(hidden) (the final norm's scale)
        for s, ids in chains.items():
            path = [starts[s], *ids]
            for a, b in zip(path, path[1:]):
                assert not head[b].any(), f"token {b} has two predecessors"
                head[b] = gain * emb[a]
            head[eot] += emb[ids[-1]]  # every chain ends the turn
        head[eot] *= gain / head[eot].norm()
        model.lm_head.weight.copy_(head)
        # The bigram argmax must hold with a clear margin for every step of every chain.
        for s, ids in chains.items():
            path = [starts[s], *ids, eot]
            cur = emb[path[:-1]]  # [steps, hidden]
            scores = cur @ head.T  # [steps, vocab]
            top2 = scores.topk(2, dim=1)
            want = torch.tensor(path[1:])
            assert torch.equal(top2.indices[:, 0], want), "a chain step does not win its argmax"
            assert float((top2.values[:, 0] - top2.values[:, 1]).min()) > 0.5, "bigram margin too small"
    model.save_pretrained(folder, safe_serialization=True)
    (folder / "generation_config.json").unlink(missing_ok=True)
    shutil.copy(tokenizer_dir / "tokenizer.json", folder / "tokenizer.json")
    shutil.copy(tokenizer_dir / "tokenizer_config.json", folder / "tokenizer_config.json")
    shutil.copy(template, folder / "chat_template.jinja")
    return {"chains": chains, "starts": starts, "end": eot}


def _single_id(texts: dict[int, str], s: str) -> int:
    """The id of the token whose whole text is `s` (the lowest, if several)."""
    ids = sorted(i for i, t in texts.items() if t == s)
    if not ids:
        raise RuntimeError(f"no token is exactly {s!r}")
    return ids[0]
