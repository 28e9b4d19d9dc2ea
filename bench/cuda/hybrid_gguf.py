#!/usr/bin/env python3
"""Writes a random-weight GGUF of a Gated DeltaNet hybrid (llama.cpp's
architectures qwen35, qwen35moe and qwen3next) of a real shape straight from
random bytes, as moe_gguf.py does for qwen3moe, so that neuron and llama.cpp can
be timed on the same file without the checkpoint (a 27B bf16 file is 54 GB; the
GPU machine's disk is 64 GB). Needs numpy and llama.cpp's gguf-py; the
vocabulary comes from a Hugging Face tokenizer directory:

  PYTHONPATH=.convert/gguf-py python3 bench/cuda/hybrid_gguf.py OUT.gguf --tokenizer DIR \\
      --shape qwen3.5-27b|qwen3.5-35b-a3b|qwen3-next-80b-a3b|tiny-qwen35|tiny-qwen35moe|tiny-qwen3next \\
      [--type q8_0|bf16|q4_0] [--layers N]

The file holds what llama.cpp's convert_hf_to_gguf.py --no-mtp writes for the
released checkpoint: the same metadata keys (the ssm.* sizes, recurrent_layers,
full_attention_interval, rope dimension count and, for qwen35*, the MRoPE
sections [11, 11, 10, 0]) and tensors of the same names, shapes and types.
Matrices are --type (moe_gguf.py's random bf16, Q8_0 or Q4_0 blocks); what the
converter keeps f32 is f32: norms 1.0 (the converter stores Qwen's zero-centred
norms as 1 + w), ssm_a = -exp(U(-1, 0.5)) (decays in (0, 1)), ssm_dt.bias and
ssm_conv1d taps in [-0.1, 0.1), routers (ffn_gate_inp, ffn_gate_inp_shexp) in
[-0.05, 0.05). A vocabulary larger than the tokenizer's (Qwen3.5's 248320 with
Qwen3's 151669-token tokenizer) is padded with [PADn] tokens of type UNUSED, as
the converter pads one. The tiny-* shapes keep the real head sizes (256 for
attention, 128 for linear attention) with few heads, 4 layers and a hidden size
of 256, to check a loader on a CPU in seconds.
"""
import argparse
import sys
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from moe_gguf import RNG, TYPES, add_matrix, add_vocab, gguf, weights  # noqa: E402  (moe_gguf checks gguf-py)


class Shape(NamedTuple):
    arch: str  # llama.cpp's architecture
    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    lin_k_heads: int  # linear attention: key heads (ssm.group_count)
    lin_v_heads: int  # value heads (ssm.time_step_rank)
    lin_k_dim: int  # key head size (ssm.state_size)
    lin_v_dim: int  # value head size
    ff: int  # dense MLP (qwen35) or the feed_forward_length key (qwen3next); 0: none
    experts: int = 0
    used: int = 0
    moe_ff: int = 0
    shexp_ff: int = 0
    eos: int = 248044  # the checkpoint's, used when the tokenizer names none


# The released config.json files' numbers (neuron's presets in src/model/config.cpp have the same);
# all: conv kernel 4, a full-attention layer every 4th, partial rotary 0.25, rope theta 1e7, eps 1e-6.
SHAPES = {
    "qwen3.5-27b": Shape("qwen35", 248320, 5120, 64, 24, 4, 256, 16, 48, 128, 128, 17408),
    "qwen3.5-35b-a3b": Shape("qwen35moe", 248320, 2048, 40, 16, 2, 256, 16, 32, 128, 128, 0, 256, 8, 512, 512),
    "qwen3-next-80b-a3b": Shape("qwen3next", 151936, 2048, 48, 16, 2, 256, 16, 32, 128, 128, 5120, 512, 10, 512, 512,
                                151645),
    "tiny-qwen35": Shape("qwen35", 248320, 256, 4, 2, 1, 256, 2, 4, 128, 128, 512),
    "tiny-qwen35moe": Shape("qwen35moe", 248320, 256, 4, 2, 1, 256, 2, 4, 128, 128, 0, 8, 2, 64, 64),
    "tiny-qwen3next": Shape("qwen3next", 151936, 256, 4, 2, 1, 256, 2, 4, 128, 128, 512, 8, 2, 64, 64, 151645),
}
CONV_KERNEL = 4
FULL_ATTENTION_INTERVAL = 4
PARTIAL_ROTARY = 0.25
MROPE_SECTIONS = [11, 11, 10, 0]  # the converter's default for qwen35*, and the released configs' [11, 11, 10]
CONTEXT = 262144


def f32_values(kind: str, numel: int) -> np.ndarray:
    """the f32 tensors' values: norms 1, ssm_a negative, the rest small and centred."""
    if kind == "norm":
        return np.ones(numel, dtype=np.float32)
    if kind == "ssm_a":
        return -np.exp(RNG.uniform(-1.0, 0.5, numel)).astype(np.float32)
    half = {"router": 0.05, "small": 0.1}[kind]
    return ((RNG.random(numel, dtype=np.float32) - 0.5) * (2 * half)).astype(np.float32)


def add_metadata(w: "gguf.GGUFWriter", s: Shape, name: str, layers: int, type_name: str) -> None:
    """The keys convert_hf_to_gguf.py --no-mtp writes for the architecture, in its order."""
    w.add_type("model")
    w.add_name(name)
    w.add_block_count(layers)
    w.add_context_length(CONTEXT)
    w.add_embedding_length(s.hidden)
    if s.ff:
        w.add_feed_forward_length(s.ff)
    w.add_head_count(s.heads)
    w.add_head_count_kv(s.kv_heads)
    w.add_rope_freq_base(10000000.0)
    w.add_layer_norm_rms_eps(1e-6)
    if s.experts:
        w.add_expert_count(s.experts)
        w.add_expert_used_count(s.used)
    w.add_key_length(s.head_dim)
    w.add_value_length(s.head_dim)
    w.add_file_type(TYPES[type_name][1])
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    if s.experts:
        w.add_expert_feed_forward_length(s.moe_ff)
        w.add_expert_shared_feed_forward_length(s.shexp_ff)
    w.add_ssm_conv_kernel(CONV_KERNEL)
    w.add_ssm_state_size(s.lin_k_dim)
    w.add_ssm_group_count(s.lin_k_heads)
    w.add_ssm_time_step_rank(s.lin_v_heads)
    w.add_ssm_inner_size(s.lin_v_dim * s.lin_v_heads)
    w.add_recurrent_layers([(i + 1) % FULL_ATTENTION_INTERVAL != 0 for i in range(layers)])
    w.add_full_attention_interval(FULL_ATTENTION_INTERVAL)
    w.add_rope_dimension_count(int(s.head_dim * PARTIAL_ROTARY))
    if s.arch != "qwen3next":
        w.add_rope_dimension_sections(MROPE_SECTIONS)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--tokenizer", type=Path, required=True)
    ap.add_argument("--shape", choices=list(SHAPES), required=True)
    ap.add_argument("--type", choices=sorted(TYPES), default="q8_0")
    ap.add_argument("--layers", type=int, default=0, help="fewer layers than the shape's (0: all)")
    a = ap.parse_args()
    s = SHAPES[a.shape]
    if a.layers < 0 or a.layers > s.layers:
        sys.exit(f"hybrid_gguf.py: --layers {a.layers}: {a.shape} has {s.layers}")
    if not (a.tokenizer / "tokenizer.json").is_file():
        sys.exit(f"hybrid_gguf.py: --tokenizer {a.tokenizer}: no tokenizer.json there")
    layers = a.layers or s.layers
    t0 = time.time()
    w = gguf.GGUFWriter(a.out, s.arch)
    add_metadata(w, s, f"{a.shape}-random", layers, a.type)
    add_vocab(w, a.tokenizer, s.vocab, {"eos_token_id": s.eos})

    plan = []  # (name, kind, elements, or bytes for a --type tensor)
    params = expert_params = 0

    def matrix(name: str, *shape: int) -> None:  # numpy shape: rows last (ggml's ne reversed)
        nonlocal params, expert_params
        plan.append((name, "q", add_matrix(w, a.type, name, shape)))
        params += int(np.prod(shape))
        if "_exps." in name:
            expert_params += int(np.prod(shape))

    def f32(name: str, kind: str, *shape: int) -> None:
        nonlocal params
        numel = int(np.prod(shape))
        w.add_tensor_info(name, shape, np.dtype(np.float32), numel * 4)
        plan.append((name, kind, numel))
        params += numel

    key_dim, value_dim = s.lin_k_heads * s.lin_k_dim, s.lin_v_heads * s.lin_v_dim
    matrix("token_embd.weight", s.vocab, s.hidden)
    for i in range(layers):
        p = f"blk.{i}."
        f32(p + "attn_norm.weight", "norm", s.hidden)
        if (i + 1) % FULL_ATTENTION_INTERVAL:  # linear attention (Gated DeltaNet)
            f32(p + "ssm_a", "ssm_a", s.lin_v_heads)
            f32(p + "ssm_conv1d.weight", "small", 2 * key_dim + value_dim, CONV_KERNEL)
            f32(p + "ssm_dt.bias", "small", s.lin_v_heads)
            if s.arch == "qwen3next":
                matrix(p + "ssm_ba.weight", 2 * s.lin_v_heads, s.hidden)
            else:
                matrix(p + "ssm_alpha.weight", s.lin_v_heads, s.hidden)
                matrix(p + "ssm_beta.weight", s.lin_v_heads, s.hidden)
            matrix(p + "attn_qkv.weight", 2 * key_dim + value_dim, s.hidden)
            matrix(p + "attn_gate.weight", value_dim, s.hidden)
            f32(p + "ssm_norm.weight", "norm", s.lin_v_dim)
            matrix(p + "ssm_out.weight", s.hidden, value_dim)
        else:  # full attention: attn_q holds the query and its output gate, head by head
            f32(p + "attn_k_norm.weight", "norm", s.head_dim)
            matrix(p + "attn_k.weight", s.kv_heads * s.head_dim, s.hidden)
            matrix(p + "attn_output.weight", s.hidden, s.heads * s.head_dim)
            f32(p + "attn_q_norm.weight", "norm", s.head_dim)
            matrix(p + "attn_q.weight", 2 * s.heads * s.head_dim, s.hidden)
            matrix(p + "attn_v.weight", s.kv_heads * s.head_dim, s.hidden)
        if s.experts:
            matrix(p + "ffn_down_exps.weight", s.experts, s.hidden, s.moe_ff)
            matrix(p + "ffn_gate_exps.weight", s.experts, s.moe_ff, s.hidden)
            matrix(p + "ffn_up_exps.weight", s.experts, s.moe_ff, s.hidden)
            f32(p + "ffn_gate_inp.weight", "router", s.experts, s.hidden)
            matrix(p + "ffn_down_shexp.weight", s.hidden, s.shexp_ff)
            matrix(p + "ffn_gate_shexp.weight", s.shexp_ff, s.hidden)
            matrix(p + "ffn_up_shexp.weight", s.shexp_ff, s.hidden)
            f32(p + "ffn_gate_inp_shexp.weight", "router", 1, s.hidden)
        else:
            matrix(p + "ffn_down.weight", s.hidden, s.ff)
            matrix(p + "ffn_gate.weight", s.ff, s.hidden)
            matrix(p + "ffn_up.weight", s.ff, s.hidden)
        f32(p + "post_attention_norm.weight", "norm", s.hidden)
    f32("output_norm.weight", "norm", s.hidden)
    matrix("output.weight", s.vocab, s.hidden)
    per_expert = expert_params // s.experts if s.experts else 0
    w.add_size_label(gguf.size_label(params, params - expert_params, per_expert, s.experts))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    total = 0
    pool = TYPES[a.type][4]()
    for i, (name, kind, n) in enumerate(plan):
        data = weights(pool, n, 7919 * i) if kind == "q" else f32_values(kind, n)
        w.write_tensor_data(data)
        total += data.nbytes
        del data
    w.close()
    print(f"wrote {a.out}: {len(plan)} tensors, {params / 1e9:.2f}B parameters, {total / 1e9:.2f} GB "
          f"({a.type}, {a.shape}, {layers} layers) in {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
