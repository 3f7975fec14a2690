#!/usr/bin/env python3
"""make_seeds.py - writes the tiny seed GGUF files of tests/fuzz/seeds/.

Uses the reference writer (pip package `gguf`) so the seeds are GGUF as
llama.cpp writes it, not as our reader expects it.  Each seed is a few KB:
small enough for the fuzzer to mutate quickly, varied enough to reach every
branch of the parser (every value type, string and numeric arrays, custom
alignment, quantized tensor types, v2 and v3, no tensors).

    python3 tests/fuzz/make_seeds.py [OUTDIR]      (default: tests/fuzz/seeds)
"""
import os
import sys

import numpy as np
from gguf import GGUFWriter, GGUFValueType as VT, GGMLQuantizationType as QT

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "seeds")


def write(name, build, version=3):
    path = os.path.join(OUT, name)
    w = GGUFWriter(path, "smollm3")
    build(w)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    if version != 3:                       # the writer only emits v3; v2 differs only in this field
        with open(path, "r+b") as f:
            f.seek(4)
            f.write(version.to_bytes(4, "little"))
    print(f"{path}: {os.path.getsize(path)} bytes")


def all_scalars(w):
    w.add_key_value("t.u8", 200, VT.UINT8)
    w.add_key_value("t.i8", -100, VT.INT8)
    w.add_key_value("t.u16", 60000, VT.UINT16)
    w.add_key_value("t.i16", -30000, VT.INT16)
    w.add_key_value("t.u32", 4000000000, VT.UINT32)
    w.add_key_value("t.i32", -2000000000, VT.INT32)
    w.add_key_value("t.f32", 1.5, VT.FLOAT32)
    w.add_key_value("t.bool", True, VT.BOOL)
    w.add_key_value("t.str", "héllo\n\"world\"", VT.STRING)
    w.add_key_value("t.u64", 2**63 + 5, VT.UINT64)
    w.add_key_value("t.i64", -(2**40), VT.INT64)
    w.add_key_value("t.f64", 2.25, VT.FLOAT64)


def seed_types(w):
    all_scalars(w)
    w.add_array("t.arr_i32", [1, -2, 3, 40000])
    w.add_key_value("t.arr_u8", [1, 2, 3], VT.ARRAY, VT.UINT8)
    w.add_key_value("t.arr_f32", [0.5, -1.0, 3.25], VT.ARRAY, VT.FLOAT32)
    w.add_key_value("t.arr_bool", [True, False], VT.ARRAY, VT.BOOL)
    w.add_array("t.arr_str", ["a", "bc", "", "d\u00e9f"])
    w.add_tensor("w.f32", np.arange(8, dtype=np.float32).reshape(2, 4))
    w.add_tensor("w.f16", np.ones((3, 2), dtype=np.float16))


def seed_quant(w):
    w.add_custom_alignment(64)          # sets the key and pads to it (add_uint32 would only set the key)
    w.add_uint32("smollm3.block_count", 2)
    w.add_float32("smollm3.rope.freq_base", 5000000.0)
    w.add_tensor("blk.0.q8_0", np.zeros((2, 34), dtype=np.uint8), raw_dtype=QT.Q8_0)
    w.add_tensor("blk.0.q4_K", np.zeros((1, 144), dtype=np.uint8), raw_dtype=QT.Q4_K)
    w.add_tensor("blk.0.q6_K", np.zeros((1, 210), dtype=np.uint8), raw_dtype=QT.Q6_K)
    w.add_tensor("blk.0.norm", np.ones(4, dtype=np.float32))
    w.add_tensor("blk.0.3d", np.ones((2, 1, 3), dtype=np.float32))
    w.add_tensor("blk.0.4d", np.ones((1, 2, 1, 2), dtype=np.float32))


def seed_tokenizer(w):
    w.add_string("general.architecture_note", "tokenizer-only seed")
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_array("tokenizer.ggml.tokens", ["<|a|>", "Ġthe", "he", "llo", "\u0120", "x" * 40])
    w.add_key_value("tokenizer.ggml.token_type", [3, 1, 1, 1, 1, 1], VT.ARRAY, VT.INT32)
    w.add_array("tokenizer.ggml.merges", ["Ġ t", "h e", "l lo"])
    w.add_uint32("tokenizer.ggml.bos_token_id", 0)
    w.add_string("tokenizer.chat_template", "{% for m in messages %}{{ m.content }}{% endfor %}")


def seed_empty(w):
    pass


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    write("types-v3.gguf", seed_types)
    write("types-v2.gguf", seed_types, version=2)
    write("quant-align64.gguf", seed_quant)
    write("tokenizer.gguf", seed_tokenizer)
    write("empty.gguf", seed_empty)
