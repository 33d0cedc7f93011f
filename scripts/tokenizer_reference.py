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
The C++ tests (tests/unit/tokenizer/test_tokenizer_reference.cpp) compare against these.
Usage: python3 scripts/tokenizer_reference.py [NAME ...]
"""
import json
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


if __name__ == "__main__":
    main()
