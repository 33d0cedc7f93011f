#!/usr/bin/env python3
"""Perplexity of a GGUF model on a text file computed by Hugging Face transformers, the
same way `voltinfer perplexity` computes it (llama.cpp's method): windows of n_ctx tokens,
the first token of a window replaced by BOS when the model adds one, only the second half
of every window scored. An independent check of our numbers.

Usage: scripts/hf_perplexity.py models/SmolLM2-135M-Instruct.Q4_1.gguf FILE [--ctx 512] [--chunks 4]
          [--tokenizer-json tests/data/tokenizer/smollm2/tokenizer.json]
Needs torch, transformers, gguf (pip). The tokenizer transformers builds from a GGUF does not
split digits as SmolLM2's real tokenizer does; pass the real tokenizer.json (the committed
fixture) so both sides score the same tokens.
"""

import argparse
import math
import os

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("gguf")
    ap.add_argument("file")
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--chunks", type=int, default=4)
    ap.add_argument("--tokenizer-json", default=None)
    a = ap.parse_args()
    d, f = os.path.split(os.path.abspath(a.gguf))
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32).eval()
    text = open(a.file, encoding="utf-8").read()
    if a.tokenizer_json:
        from tokenizers import Tokenizer
        ids = Tokenizer.from_file(a.tokenizer_json).encode(text, add_special_tokens=False).ids
    else:
        ids = tok(text, add_special_tokens=False)["input_ids"]
    n_chunks = min(a.chunks, len(ids) // a.ctx)
    add_bos = bool(getattr(tok, "add_bos_token", False))
    nll, count = 0.0, 0
    for c in range(n_chunks):
        window = ids[c * a.ctx:(c + 1) * a.ctx]
        if add_bos:
            window = [tok.bos_token_id] + window[1:]
        with torch.no_grad():
            logits = model(torch.tensor([window])).logits[0].double()
        logp = torch.log_softmax(logits, dim=-1)
        for j in range(a.ctx // 2, a.ctx - 1):
            nll -= logp[j, ids[c * a.ctx + j + 1]].item()
            count += 1
        print(f"[{c + 1}]{math.exp(nll / count):.4f},", end="", flush=True)
    print(f"\nFinal estimate: PPL = {math.exp(nll / count):.4f} over {count} scored tokens")


if __name__ == "__main__":
    main()
