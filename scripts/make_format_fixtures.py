#!/usr/bin/env python3
"""Writes the small format fixtures under tests/data/formats/ (and fuzz seeds under
tests/fuzz/seeds/) with the official Python writers: llama.cpp's `gguf` package and the
`safetensors` package. The C++ tests recompute the same value formulas independently.

Run from anywhere: python3 scripts/make_format_fixtures.py
"""
import json
import os
import shutil

import numpy as np
import torch
import gguf
from safetensors.torch import save_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "formats")
SEEDS = os.path.join(ROOT, "tests", "fuzz", "seeds")


def ramp(n):
    # Exactly representable in f16 and bf16: multiples of 0.25 in [-2, 2].
    return (np.arange(n) % 17) * 0.25 - 2.0


def quant_bytes(nbytes, salt):
    return ((np.arange(nbytes) * 37 + 11 + salt) & 255).astype(np.uint8)


# ggml type -> (block values, block bytes)
QUANTS = {
    gguf.GGMLQuantizationType.Q8_0: (32, 34),
    gguf.GGMLQuantizationType.Q4_0: (32, 18),
    gguf.GGMLQuantizationType.Q4_1: (32, 20),
    gguf.GGMLQuantizationType.Q4_K: (256, 144),
    gguf.GGMLQuantizationType.Q5_K: (256, 176),
    gguf.GGMLQuantizationType.Q6_K: (256, 210),
}


def write_gguf(path):
    w = gguf.GGUFWriter(path, arch="testarch")  # also writes general.architecture
    w.add_custom_alignment(64)                  # the reader must honour general.alignment
    w.add_uint8("t.u8", 200)
    w.add_int8("t.i8", -100)
    w.add_uint16("t.u16", 60000)
    w.add_int16("t.i16", -30000)
    w.add_uint32("t.u32", 4000000000)
    w.add_int32("t.i32", -2000000000)
    w.add_float32("t.f32", 0.15625)
    w.add_uint64("t.u64", 2**63 + 5)
    w.add_int64("t.i64", -(2**62) - 3)
    w.add_float64("t.f64", 3.141592653589793)
    w.add_bool("t.bool", True)
    w.add_bool("t.bool_false", False)
    w.add_string("t.string", "h\u00e9llo \u2603")
    w.add_array("t.arr_str", ["a", "", "xyz"])
    w.add_array("t.arr_i32", [1, -2, 3])
    w.add_array("t.arr_f32", [0.5, -1.25])
    w.add_array("t.arr_bool", [True, False, True])
    w.add_array("t.arr_nested", [[1, 2], [3]])
    w.add_key_value("t.arr_u8", [7, 8, 9], gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType.UINT8)

    w.add_tensor("f32_2d", ramp(15).astype(np.float32).reshape(3, 5))
    w.add_tensor("f32_3d", ramp(24).astype(np.float32).reshape(2, 3, 4))
    w.add_tensor("f32_4d", ramp(12).astype(np.float32).reshape(2, 1, 3, 2))
    w.add_tensor("f16", ramp(14).astype(np.float16).reshape(2, 7))
    bf16 = torch.tensor(ramp(12), dtype=torch.bfloat16).view(torch.uint16).numpy().view(np.uint8)
    w.add_tensor("bf16", bf16.reshape(3, 8), raw_dtype=gguf.GGMLQuantizationType.BF16)
    w.add_tensor("i32", (np.arange(5) * 1000 - 7).astype(np.int32))
    w.add_tensor("i8", (np.arange(6) - 3).astype(np.int8).reshape(2, 3))
    shapes = {
        gguf.GGMLQuantizationType.Q8_0: (2, 64),
        gguf.GGMLQuantizationType.Q4_0: (3, 32),
        gguf.GGMLQuantizationType.Q4_1: (1, 96),
        gguf.GGMLQuantizationType.Q4_K: (2, 256),
        gguf.GGMLQuantizationType.Q5_K: (1, 512),
        gguf.GGMLQuantizationType.Q6_K: (3, 256),
    }
    for qt, (rows, cols) in shapes.items():
        be, bb = QUANTS[qt]
        nbytes = rows * cols // be * bb
        data = quant_bytes(nbytes, int(qt)).reshape(rows, cols // be * bb)
        w.add_tensor(qt.name.lower(), data, raw_dtype=qt)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def st_tensors(offset):
    return {
        "f32": torch.tensor(ramp(20) + offset, dtype=torch.float32).reshape(4, 5),
        "f16": torch.tensor(ramp(9) + offset, dtype=torch.float16).reshape(3, 3),
        "bf16": torch.tensor(ramp(12) + offset, dtype=torch.bfloat16).reshape(2, 6),
        "i32": torch.arange(7, dtype=torch.int32) * 3 - 5,
        "i8": torch.arange(3, dtype=torch.int8) - 1,
        "scalar": torch.tensor(2.5, dtype=torch.float32),
    }


def write_hf_folder(d):
    os.makedirs(d, exist_ok=True)
    config = {
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "model_type": "qwen3_5",
        "tie_word_embeddings": False,
        "vocab_size": 111,  # deliberately differs from text_config to test precedence
        "text_config": {"model_type": "qwen3_5_text", "hidden_size": 6, "num_hidden_layers": 2,
                        "rms_norm_eps": 1e-6, "vocab_size": 10},
    }
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    shard1 = {"model.embed_tokens.weight": torch.tensor(ramp(60), dtype=torch.bfloat16).reshape(10, 6),
              "model.layers.0.input_layernorm.weight": torch.tensor(ramp(6) + 1, dtype=torch.float32)}
    shard2 = {"model.layers.1.input_layernorm.weight": torch.tensor(ramp(6) - 1, dtype=torch.float32),
              "lm_head.weight": torch.tensor(ramp(60) * 0.5, dtype=torch.float16).reshape(10, 6)}
    names = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    save_file(shard1, os.path.join(d, names[0]), metadata={"format": "pt"})
    save_file(shard2, os.path.join(d, names[1]), metadata={"format": "pt"})
    weight_map = {k: names[0] for k in shard1}
    weight_map.update({k: names[1] for k in shard2})
    total = sum(t.numel() * t.element_size() for s in (shard1, shard2) for t in s.values())
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


def main():
    os.makedirs(OUT, exist_ok=True)
    write_gguf(os.path.join(OUT, "py_types.gguf"))
    save_file(st_tensors(0.0), os.path.join(OUT, "py_tensors.safetensors"),
              metadata={"format": "pt", "note": "fixture"})
    write_hf_folder(os.path.join(OUT, "py_hf"))

    # Fuzz seeds: the fixtures themselves are small, valid, and exercise every branch.
    for target, files in {
        "fuzz_gguf": ["py_types.gguf"],
        "fuzz_safetensors": ["py_tensors.safetensors", "py_hf/model-00001-of-00002.safetensors"],
    }.items():
        sd = os.path.join(SEEDS, target)
        os.makedirs(sd, exist_ok=True)
        for f in files:
            shutil.copy(os.path.join(OUT, f), os.path.join(sd, os.path.basename(f)))
    print("wrote fixtures to", OUT)


if __name__ == "__main__":
    main()
