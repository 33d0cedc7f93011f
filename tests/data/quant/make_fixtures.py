#!/usr/bin/env python3
"""Writes the quantization fixtures read by tests/unit/core/test_quant.cpp.

For every weight dtype: <name>.raw holds random blocks (random bytes everywhere, with the
fp16 scale fields set to finite random values) and <name>.deq holds what the PyPI `gguf`
package (llama.cpp's numpy reference) dequantizes them to, as little-endian float32.
For the dtypes gguf can also quantize (bf16, q8_0, q4_0, q4_1): <name>.src holds random
float32 inputs and <name>.q the bytes gguf.quants.quantize makes of them.

Run from anywhere: python3 tests/data/quant/make_fixtures.py
"""
import os

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import quants

OUT = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(20240611)

# (name, type, block bytes, block values, byte offsets of fp16 scale fields, n blocks)
TYPES = [
    ("q8_0", Q.Q8_0, 34, 32, [0], 9),
    ("q4_0", Q.Q4_0, 18, 32, [0], 9),
    ("q4_1", Q.Q4_1, 20, 32, [0, 2], 9),
    ("q4_k", Q.Q4_K, 144, 256, [0, 2], 3),
    ("q5_k", Q.Q5_K, 176, 256, [0, 2], 3),
    ("q6_k", Q.Q6_K, 210, 256, [208], 3),
]


def write(name, arr):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(np.ascontiguousarray(arr).tobytes())


for name, qt, bb, be, scale_offs, nb in TYPES:
    raw = rng.integers(0, 256, size=(nb, bb), dtype=np.uint8)
    for off in scale_offs:
        s = rng.uniform(-0.05, 0.05, size=nb).astype(np.float16)
        raw[:, off:off + 2] = s.view(np.uint8).reshape(nb, 2)
    deq = quants.dequantize(raw.reshape(-1), qt).astype(np.float32).reshape(-1)
    assert deq.size == nb * be and np.all(np.isfinite(deq))
    write(name + ".raw", raw)
    write(name + ".deq", deq)

# Plain 16-bit types: random finite values over a wide range, incl. subnormal halves.
vals = (rng.standard_normal(301) * np.exp(rng.uniform(-12, 8, 301))).astype(np.float32)
f16 = vals.astype(np.float16)
f16 = f16[np.isfinite(f16)]
write("f16.raw", f16)
write("f16.deq", f16.astype(np.float32))
bf16 = quants.quantize(vals, Q.BF16)
write("bf16.raw", bf16)
write("bf16.deq", quants.dequantize(bf16, Q.BF16).astype(np.float32))

# Quantizers gguf implements bit-exactly like ggml's reference C code.
for name, qt, n in [("bf16", Q.BF16, 301), ("q8_0", Q.Q8_0, 32 * 11), ("q4_0", Q.Q4_0, 32 * 11),
                    ("q4_1", Q.Q4_1, 32 * 11)]:
    src = (rng.standard_normal(n) * rng.uniform(0.01, 3.0)).astype(np.float32)
    if name != "bf16":
        src[5] = 0.0
        src[32:64] = 0.0  # an all-zero block: scale 0 must not divide by zero
        src[64:96] = 0.37  # a constant block
    write(name + ".src", src)
    write(name + ".q", quants.quantize(src, qt))
print("fixtures written to", OUT)
