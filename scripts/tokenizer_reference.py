#!/usr/bin/env python3
"""Writes tests/data/tokenizer/<name>.expected.jsonl: HF `tokenizers` output for every corpus line.

For each fixture tests/data/tokenizer/<name>/tokenizer.json present (see tokenizer_make_fixtures.py)
and each line of corpus.jsonl, one JSON object:
  id        corpus line id
  ids       encode(text, add_special_tokens=False)  special/added tokens in the text recognised
  ids_raw   the same with encode_special_tokens=True: special added tokens are not recognised
            (non-special added tokens still are), our parse_special=false
  ids_bos   encode(text, add_special_tokens=True)   written only where it differs from ids
  decoded   decode(ids, skip_special_tokens=False)
and tests/data/tokenizer/<name>.decode.jsonl: seeded random id sequences, biased towards tokens
that are fragments of a UTF-8 character, with decode(ids, skip_special_tokens=False) and
skip_special_tokens=True; the stream-decoder test checks its output against them.
The C++ tests (tests/unit/tokenizer/test_tokenizer_*.cpp) compare against these.
Usage: python3 scripts/tokenizer_reference.py [NAME ...]
"""
import json
import random
import sys
from pathlib import Path

import tokenizers
from tokenizers import Tokenizer

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "tokenizer"


def main():
    names = sys.argv[1:] or sorted(p.parent.name for p in DATA.glob("*/tokenizer.json"))
    corpus = [json.loads(l) for l in (DATA / "corpus.jsonl").read_text(encoding="utf-8").split("\n") if l]
    for name in names:
        tok = Tokenizer.from_file(str(DATA / name / "tokenizer.json"))
        raw = Tokenizer.from_file(str(DATA / name / "tokenizer.json"))
        raw.encode_special_tokens = True
        out = DATA / f"{name}.expected.jsonl"
        with out.open("w", encoding="utf-8") as f:
            f.write(json.dumps({"tokenizers_version": tokenizers.__version__, "n": len(corpus)}) + "\n")
            for line in corpus:
                text = line["text"]
                ids = tok.encode(text, add_special_tokens=False).ids
                rec = {"id": line["id"], "ids": ids,
                       "ids_raw": raw.encode(text, add_special_tokens=False).ids,
                       "decoded": tok.decode(ids, skip_special_tokens=False)}
                bos = tok.encode(text, add_special_tokens=True).ids
                if bos != ids:
                    rec["ids_bos"] = bos
                f.write(json.dumps(rec) + "\n")
        print(f"wrote {out} ({len(corpus)} lines, tokenizers {tokenizers.__version__})")
        write_decode_cases(name, tok)


def byte_table():
    """GPT-2's byte -> character table."""
    bs = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + len(cs) - 188)
    return {b: chr(c) for b, c in zip(bs, cs)}


def write_decode_cases(name, tok):
    rng = random.Random(f"decode-{name}")
    n = tok.get_vocab_size(with_added_tokens=True)
    vocab = tok.get_vocab(with_added_tokens=True)
    # Tokens whose bytes are not whole characters (a lead byte, continuation bytes, ...).
    u2b = {c: b for b, c in byte_table().items()}

    def is_fragment(t):
        if not all(c in u2b for c in t):
            return False
        try:
            bytes(u2b[c] for c in t).decode("utf-8")
            return False
        except UnicodeDecodeError:
            return True

    fragments = sorted(i for t, i in vocab.items() if is_fragment(t))  # get_vocab() order varies per run
    specials = sorted(tok.get_added_tokens_decoder())
    out = DATA / f"{name}.decode.jsonl"
    with out.open("w", encoding="utf-8") as f:
        for case in range(300):
            ids = []
            for _ in range(rng.randint(1, 12)):
                r = rng.random()
                if r < 0.5:
                    ids.append(rng.choice(fragments))
                elif r < 0.6 and specials:
                    ids.append(rng.choice(specials))
                else:
                    ids.append(rng.randrange(n))
            ids = [i for i in ids if tok.id_to_token(i) is not None]
            f.write(json.dumps({"ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False),
                                "decoded_skip": tok.decode(ids, skip_special_tokens=True)}) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
