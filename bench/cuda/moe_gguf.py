#!/usr/bin/env python3
"""Writes a random-weight Qwen3-MoE GGUF (architecture qwen3moe) of a real
shape straight from random bytes, so that neuron and llama.cpp can be timed
on the same file without a 61 GB checkpoint first (the GPU machine's disk is
64 GB). Needs numpy and llama.cpp's gguf-py; the vocabulary comes from a Hugging
Face tokenizer directory (tokenizer.json, tokenizer_config.json) through
bench/serve/hf_to_gguf.py's add_vocab:

  PYTHONPATH=.convert/gguf-py python3 bench/cuda/moe_gguf.py OUT.gguf --tokenizer DIR \
      [--shape qwen3-30b-a3b] [--type q8_0|bf16|q4_0] [--layers N]

2-D and expert weights are --type: bf16 values of magnitude 2^-7..2^-6 with
random signs and mantissas, Q8_0 blocks of random int8 quants with the scale
2^-12 (|w| < 0.032), or Q4_0 blocks of random nibbles with the scale 2^-8
(|w| <= 0.028); the router (ffn_gate_inp) is f32 in [-0.05, 0.05)
and norms are 1.0, as llama.cpp's converter keeps both in f32. Random weights
time the same as trained ones for every kernel here (no data-dependent
skipping), but routing is near uniform.
"""
import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "serve"))
try:
    import gguf
    from hf_to_gguf import add_vocab
except ImportError as e:
    sys.exit(f"moe_gguf.py: {e}: put llama.cpp's gguf-py on PYTHONPATH")

# name: vocab, hidden, layers, heads, kv heads, head_dim, experts, used, moe_ff
SHAPES = {
    "qwen3-30b-a3b": (151936, 2048, 48, 32, 4, 128, 128, 8, 768),
    "qwen3-235b-a22b": (151936, 4096, 94, 64, 4, 128, 128, 8, 1536),
    # a ~2.4B-parameter Qwen3-MoE (0.84B active) for the CPU comparison (bench/cpu/moe-vs-llama.sh)
    "qwen3-moe-2.4b": (151936, 1536, 24, 12, 4, 128, 32, 8, 512),
}
RNG = np.random.default_rng(7)
# random blocks made once and repeated (numpy makes random bytes at ~100 MB/s); a prime count, so that no two
# rows or experts of a tensor are equal (2^21 made rows 65536 apart equal at a hidden size of 5120: exact
# logit ties, which two engines break differently)
POOL_BLOCKS = 2097143


def bf16_pool() -> np.ndarray:
    """random bf16 values, |v| in [2^-7, 2^-6): sign and mantissa random, exponent fixed."""
    u = np.frombuffer(RNG.bytes(2 * 32 * POOL_BLOCKS), dtype=np.uint16).copy()
    u &= np.uint16(0x807F)  # keep sign and the 7 mantissa bits
    u |= np.uint16(120 << 7)  # biased exponent 120: 2^-7
    return u.view(np.uint8)


def q8_0_pool() -> np.ndarray:
    """Q8_0 blocks: f16 scale 2^-12, then 32 random int8 quants."""
    b = np.frombuffer(RNG.bytes(34 * POOL_BLOCKS), dtype=np.uint8).copy().reshape(POOL_BLOCKS, 34)
    b[:, 0:2] = np.frombuffer(np.float16(2.0 ** -12).tobytes(), dtype=np.uint8)
    return b.reshape(-1)


def q4_0_pool() -> np.ndarray:
    """Q4_0 blocks: f16 scale 2^-8, then 16 bytes of random nibbles (w = d * (q - 8)); a nibble 0 becomes 8,
    so that q - 8 is in [-7, 7] with mean 0 (uniform nibbles would give every weight a bias of -d/2)."""
    b = np.frombuffer(RNG.bytes(18 * POOL_BLOCKS), dtype=np.uint8).copy().reshape(POOL_BLOCKS, 18)
    lo, hi = b & 0x0F, b >> 4
    lo[lo == 0] = 8
    hi[hi == 0] = 8
    b = lo | (hi << 4)
    b[:, 0:2] = np.frombuffer(np.float16(2.0 ** -8).tobytes(), dtype=np.uint8)
    return b.reshape(-1)


# --type: (tensor type, file type, elements a block, bytes a block, pool maker)
TYPES = {
    "q8_0": (gguf.GGMLQuantizationType.Q8_0, gguf.LlamaFileType.MOSTLY_Q8_0, 32, 34, q8_0_pool),
    "q4_0": (gguf.GGMLQuantizationType.Q4_0, gguf.LlamaFileType.MOSTLY_Q4_0, 32, 18, q4_0_pool),
    "bf16": (gguf.GGMLQuantizationType.BF16, gguf.LlamaFileType.MOSTLY_BF16, 1, 2, bf16_pool),
}


def weights(pool: np.ndarray, nbytes: int, start: int) -> np.ndarray:
    """nbytes of pool repeated from block `start` on (block-aligned, so every quant block keeps its scale)."""
    step = pool.nbytes // POOL_BLOCKS
    return np.resize(np.roll(pool, -step * (start % POOL_BLOCKS)), nbytes)


def add_matrix(w: "gguf.GGUFWriter", type_name: str, name: str, shape: tuple[int, ...]) -> int:
    """Adds the info of a --type tensor of numpy shape `shape` (rows last, as torch has them); returns its bytes."""
    qtype, _, block, block_bytes, _ = TYPES[type_name]
    if shape[-1] % block:
        sys.exit(f"{name}: {shape[-1]} columns are not whole {qtype.name} blocks of {block}")
    row_bytes = shape[-1] // block * block_bytes
    nbytes = int(np.prod(shape[:-1])) * row_bytes
    # gguf-py takes the byte shape of a raw tensor: the last dim in bytes
    w.add_tensor_info(name, (*shape[:-1], row_bytes), np.dtype(np.uint8), nbytes, raw_dtype=qtype)
    return nbytes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--tokenizer", type=Path, required=True)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="qwen3-30b-a3b")
    ap.add_argument("--type", choices=sorted(TYPES), default="q8_0")
    ap.add_argument("--layers", type=int, default=0, help="fewer layers than the shape's (0: all)")
    a = ap.parse_args()
    vocab, hidden, layers, heads, kv_heads, head_dim, experts, used, moe_ff = SHAPES[a.shape]
    layers = a.layers or layers
    t0 = time.time()
    w = gguf.GGUFWriter(a.out, "qwen3moe")
    w.add_name(f"{a.shape}-random")
    w.add_block_count(layers)
    w.add_context_length(40960)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(6144)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_freq_base(1000000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_expert_count(experts)
    w.add_expert_used_count(used)
    w.add_expert_feed_forward_length(moe_ff)
    w.add_file_type(TYPES[a.type][1])
    add_vocab(w, a.tokenizer, vocab, {"eos_token_id": 151645})

    plan = []  # (name, kind, elements, or bytes for a --type tensor)

    def matrix(name: str, *shape: int) -> None:
        plan.append((name, "q", add_matrix(w, a.type, name, shape)))

    def f32(name: str, numel: int, kind: str) -> None:
        w.add_tensor_info(name, (numel,) if kind == "norm" else (experts, hidden), np.dtype(np.float32), numel * 4)
        plan.append((name, kind, numel))

    matrix("token_embd.weight", vocab, hidden)
    f32("output_norm.weight", hidden, "norm")
    matrix("output.weight", vocab, hidden)
    for i in range(layers):
        p = f"blk.{i}."
        f32(p + "attn_norm.weight", hidden, "norm")
        f32(p + "ffn_norm.weight", hidden, "norm")
        f32(p + "attn_q_norm.weight", head_dim, "norm")
        f32(p + "attn_k_norm.weight", head_dim, "norm")
        matrix(p + "attn_q.weight", heads * head_dim, hidden)
        matrix(p + "attn_k.weight", kv_heads * head_dim, hidden)
        matrix(p + "attn_v.weight", kv_heads * head_dim, hidden)
        matrix(p + "attn_output.weight", hidden, heads * head_dim)
        f32(p + "ffn_gate_inp.weight", experts * hidden, "router")
        matrix(p + "ffn_gate_exps.weight", experts, moe_ff, hidden)
        matrix(p + "ffn_up_exps.weight", experts, moe_ff, hidden)
        matrix(p + "ffn_down_exps.weight", experts, hidden, moe_ff)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    total = 0
    pool = TYPES[a.type][4]()
    for i, (name, kind, n) in enumerate(plan):
        if kind == "norm":
            data = np.ones(n, dtype=np.float32)
        elif kind == "router":
            data = (RNG.random(n, dtype=np.float32) - 0.5) * 0.1
        else:
            data = weights(pool, n, 7919 * i)
        w.write_tensor_data(data)
        total += data.nbytes
        del data
    w.close()
    print(f"wrote {a.out}: {len(plan)} tensors, {total / 1e9:.2f} GB ({a.type}, {a.shape}, {layers} layers) "
          f"in {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
