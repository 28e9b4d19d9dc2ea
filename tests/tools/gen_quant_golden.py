#!/usr/bin/env python3
"""Golden vectors for neuron's GGUF dequantizers and quantizers, from llama.cpp.

Writes into tests/data/quant/ (CI has no Python or llama.cpp: the tests read
these committed files):
  dequant_<TYPE>.bin  u32 n, the encoded elements (n / block * type_size bytes),
                      then n little-endian f32: gguf-py's numpy dequantizer
                      (gguf/quants.py), which mirrors ggml-quants.c. Blocks are
                      random bytes with the f16 scales set to random finite
                      values and to the edge cases (0, -0, subnormals, the
                      smallest normal, 65504, 1), so no output is inf or NaN.
  quant_<TYPE>.bin    u32 n, n f32 inputs, then the blocks llama.cpp's
                      quantize_row_<type>_ref makes (ggml-quants.c compiled by
                      tests/tools/ggml_ref; Q8_0 also checked against gguf-py's
                      bit-exact numpy quantizer).
and tests/data/gguf/gguf_py_sample.gguf, a small file written by gguf-py's
GGUFWriter (every metadata type, arrays, F32/F16/Q8_0 tensors) that the C++
reader is cross-checked against.

Usage (numpy: apt-get install python3-numpy):
  tar xJf llama-src.tar.xz -C /tmp
  gcc -O1 -std=c11 -I/tmp/llama.cpp/ggml/include -I/tmp/llama.cpp/ggml/src \
      tests/tools/ggml_ref/quantize_ref.c tests/tools/ggml_ref/stubs.c \
      /tmp/llama.cpp/ggml/src/ggml-quants.c -o /tmp/quantize_ref -lm
  /usr/bin/python3 tests/tools/gen_quant_golden.py /tmp/llama.cpp /tmp/quantize_ref
"""
import os
import struct
import subprocess
import sys

import numpy as np

LLAMA = sys.argv[1]
REF = sys.argv[2]
sys.path.insert(0, os.path.join(LLAMA, "gguf-py"))
import gguf  # noqa: E402
from gguf import GGMLQuantizationType as T  # noqa: E402
from gguf import quants  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "data", "quant")
rng = np.random.default_rng(20261203)

EDGE_F16 = np.array([0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x7BFF, 0xFBFF, 0x3C00, 0xBC00], dtype=np.uint16)


def random_f16(n):
    """Random finite f16 bit patterns (exponent never 31), every 4th an edge case."""
    bits = rng.integers(0, 1 << 16, size=n, dtype=np.uint32).astype(np.uint16)
    bits = np.where((bits & 0x7C00) == 0x7C00, bits & 0xBFFF, bits).astype(np.uint16)
    edge = EDGE_F16[rng.integers(0, len(EDGE_F16), size=n)]
    return np.where(np.arange(n) % 4 == 0, edge, bits).astype(np.uint16)


def scale_offsets(qtype):
    """Byte offsets of the f16 scales inside one block."""
    return {T.Q8_0: [0], T.Q4_0: [0], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208]}[qtype]


def write_dequant(qtype, n_blocks):
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint32).astype(np.uint8)
    for off in scale_offsets(qtype):
        raw[:, off:off + 2] = random_f16(n_blocks).view(np.uint8).reshape(n_blocks, 2)
    n = n_blocks * block
    values = quants.dequantize(raw.reshape(-1), qtype).astype(np.float32).reshape(-1)
    assert values.size == n and np.isfinite(values).all(), qtype.name
    with open(os.path.join(OUT, f"dequant_{qtype.name}.bin"), "wb") as f:
        f.write(struct.pack("<I", n))
        f.write(raw.tobytes())
        f.write(values.astype("<f4").tobytes())


def write_plain(qtype, n):
    if qtype == T.F32:
        vals = (rng.standard_normal(n) * np.exp(rng.uniform(-30, 30, n))).astype(np.float32)
        raw = vals.view(np.uint8)
        values = vals
    elif qtype == T.F16:
        bits = np.concatenate([EDGE_F16, random_f16(n - len(EDGE_F16))]).astype(np.uint16)
        raw = bits.view(np.uint8)
        values = bits.view(np.float16).astype(np.float32)
    else:  # BF16: the top half of an f32
        bits = rng.integers(0, 1 << 16, size=n, dtype=np.uint32)
        bits = np.where((bits & 0x7F80) == 0x7F80, bits & 0xBFFF, bits).astype(np.uint16)
        raw = bits.view(np.uint8)
        values = (bits.astype(np.uint32) << 16).view(np.float32)
    assert np.isfinite(values).all()
    with open(os.path.join(OUT, f"dequant_{qtype.name}.bin"), "wb") as f:
        f.write(struct.pack("<I", n))
        f.write(raw.tobytes())
        f.write(values.astype("<f4").tobytes())


def quant_inputs(block, n_blocks):
    """Rows of blocks at scales from 1e-6 to 1e4, with all-zero, constant, one-hot and tiny blocks."""
    rows = []
    for b in range(n_blocks):
        kind = b % 8
        scale = float(10.0 ** rng.uniform(-6, 4))
        if kind == 0:
            x = np.zeros(block)
        elif kind == 1:
            x = np.full(block, scale)
        elif kind == 2:
            x = np.zeros(block)
            x[rng.integers(0, block)] = -scale
        elif kind == 3:
            x = rng.standard_normal(block) * 1e-9
        elif kind == 4:
            x = np.abs(rng.standard_normal(block)) * scale  # all positive: min clamps to 0
        else:
            x = rng.standard_normal(block) * scale
        rows.append(x)
    return np.concatenate(rows).astype(np.float32)


def write_quant(qtype, n_blocks):
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    x = quant_inputs(block, n_blocks)
    n = x.size
    out = subprocess.run([REF], input=struct.pack("<II", int(qtype), n) + x.astype("<f4").tobytes(),
                         capture_output=True, check=True).stdout
    assert len(out) == n_blocks * size, (qtype.name, len(out))
    if qtype == T.Q8_0:
        assert quants.quantize(x.reshape(1, -1), qtype).tobytes() == out, "gguf-py and ggml disagree on Q8_0"
    with open(os.path.join(OUT, f"quant_{qtype.name}.bin"), "wb") as f:
        f.write(struct.pack("<I", n))
        f.write(x.astype("<f4").tobytes())
        f.write(out)


def write_sample_gguf():
    path = os.path.join(ROOT, "tests", "data", "gguf", "gguf_py_sample.gguf")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    w = gguf.GGUFWriter(path, "qwen3")
    w.add_uint8("test.u8", 200)
    w.add_int8("test.i8", -100)
    w.add_uint16("test.u16", 60000)
    w.add_int16("test.i16", -30000)
    w.add_uint32("test.u32", 4000000000)
    w.add_int32("test.i32", -2000000000)
    w.add_float32("test.f32", 0.25)
    w.add_uint64("test.u64", 1 << 40)
    w.add_int64("test.i64", -(1 << 40))
    w.add_float64("test.f64", 1e-300)
    w.add_bool("test.bool", True)
    w.add_string("test.string", "héllo")
    w.add_array("test.strings", ["a", "", "ĠĠ"])
    w.add_array("test.ints", [1, -2, 3])
    w.add_array("test.floats", [0.5, -1.5])
    w.add_uint32("qwen3.block_count", 1)
    x = (np.arange(64, dtype=np.float32) - 32) / 8
    w.add_tensor("a.f32", x.reshape(2, 32))
    w.add_tensor("b.f16", x.astype(np.float16).reshape(4, 16))
    q = quants.quantize(x.reshape(2, 32), T.Q8_0)
    w.add_tensor("c.q8_0", q, raw_shape=q.shape, raw_dtype=T.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    write_plain(T.F32, 512)
    write_plain(T.F16, 2048)
    write_plain(T.BF16, 2048)
    write_dequant(T.Q8_0, 64)
    write_dequant(T.Q4_0, 64)
    for t in (T.Q4_K, T.Q5_K, T.Q6_K):
        write_dequant(t, 24)
    write_quant(T.Q8_0, 64)
    write_quant(T.Q4_K, 24)
    write_quant(T.Q6_K, 24)
    write_sample_gguf()
    print("wrote", sorted(os.listdir(OUT)))
