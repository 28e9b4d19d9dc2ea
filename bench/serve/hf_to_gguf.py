#!/usr/bin/env python3
"""Writes a Hugging Face Qwen3 checkpoint directory (config.json,
model.safetensors[.index.json], tokenizer.json, tokenizer_config.json) as a
GGUF file that llama.cpp loads, with llama.cpp's own gguf-py.

Made for `neuron gen-model` output: the GGUF holds the same (random) weights
neuron serves, so both servers run the same model. Only what a Qwen3 dense
model needs is handled (llama.cpp's convert_hf_to_gguf.py does the general
case but needs transformers and torch). Needs numpy and gguf-py:

  PYTHONPATH=.llama/src/gguf-py python3 bench/serve/hf_to_gguf.py DIR OUT.gguf [--outtype f16|bf16]

Projections and embeddings are written as --outtype (f16: converted from the
checkpoint's bf16; bf16: copied byte for byte), norms as f32, as
convert_hf_to_gguf.py does. The vocabulary follows that script's
_set_vocab_gpt2: byte-level token strings, ids without a token padded as
[PAD<id>] (unused), added special tokens control, other added tokens
user-defined, merges "a b", pre-tokenizer qwen2.
"""
import argparse
import json
import struct
import sys
import time
from pathlib import Path

import numpy as np

try:
    import gguf
except ImportError:
    sys.exit("hf_to_gguf.py: cannot import gguf: put llama.cpp's gguf-py on PYTHONPATH")


def safetensors_tensors(model_dir: Path):
    """name -> (dtype, shape, file, absolute offset, nbytes), over one file or an index's shards."""
    index = model_dir / "model.safetensors.index.json"
    files = sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.exists() else ["model.safetensors"]
    out = {}
    for f in files:
        path = model_dir / f
        with open(path, "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(n))
        for name, info in header.items():
            if name == "__metadata__":
                continue
            begin, end = info["data_offsets"]
            out[name] = (info["dtype"], tuple(info["shape"]), path, 8 + n + begin, end - begin)
    return out


def read_raw(path: Path, offset: int, nbytes: int) -> np.ndarray:
    return np.memmap(path, dtype=np.uint8, mode="r", offset=offset, shape=(nbytes,))


def as_f32(dtype: str, raw: np.ndarray) -> np.ndarray:
    if dtype == "BF16":
        return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    if dtype == "F16":
        return raw.view(np.float16).astype(np.float32)
    if dtype == "F32":
        return raw.view(np.float32)
    sys.exit(f"hf_to_gguf.py: unsupported safetensors dtype {dtype}")


def gguf_name(hf: str) -> str:
    fixed = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    if hf in fixed:
        return fixed[hf]
    parts = hf.split(".")  # model.layers.N.<module>.<proj>.weight
    if parts[:2] != ["model", "layers"]:
        sys.exit(f"hf_to_gguf.py: unexpected tensor {hf}")
    rest = ".".join(parts[3:])
    per_layer = {
        "input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
        "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
        "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
        "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight",
        "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
        "mlp.down_proj.weight": "ffn_down.weight",
    }
    if rest not in per_layer:
        sys.exit(f"hf_to_gguf.py: unexpected tensor {hf}")
    return f"blk.{parts[2]}.{per_layer[rest]}"


def add_vocab(w: "gguf.GGUFWriter", model_dir: Path, vocab_size: int, cfg: dict) -> None:
    tok = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))
    tcfg_path = model_dir / "tokenizer_config.json"
    tcfg = json.loads(tcfg_path.read_text(encoding="utf-8")) if tcfg_path.exists() else {}
    if tok["model"]["type"] != "BPE":
        sys.exit("hf_to_gguf.py: only byte-level BPE tokenizers are handled")
    by_id = {i: t for t, i in tok["model"]["vocab"].items()}
    added = {a["id"]: a for a in tok.get("added_tokens", [])}
    for i, a in added.items():
        by_id[i] = a["content"]
    tokens, types = [], []
    for i in range(vocab_size):
        if i not in by_id:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
        elif i in added:
            tokens.append(by_id[i])
            types.append(gguf.TokenType.CONTROL if added[i].get("special") else gguf.TokenType.USER_DEFINED)
        else:
            tokens.append(by_id[i])
            types.append(gguf.TokenType.NORMAL)
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    ids = {t: i for i, t in by_id.items()}
    eos = ids.get(tcfg.get("eos_token") or "", cfg.get("eos_token_id"))
    if isinstance(eos, list):
        eos = eos[0]
    if eos is not None:
        w.add_eos_token_id(int(eos))
    if cfg.get("bos_token_id") is not None:
        w.add_bos_token_id(int(cfg["bos_token_id"]))
    pad = ids.get(tcfg.get("pad_token") or "")
    if pad is not None:
        w.add_pad_token_id(int(pad))
    w.add_add_bos_token(bool(tcfg.get("add_bos_token", False)))
    if tcfg.get("chat_template"):
        w.add_chat_template(tcfg["chat_template"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model_dir", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--outtype", choices=["f16", "bf16"], default="f16")
    a = ap.parse_args()
    t0 = time.time()
    cfg = json.loads((a.model_dir / "config.json").read_text())
    if cfg.get("model_type") != "qwen3":
        sys.exit(f"hf_to_gguf.py: model_type {cfg.get('model_type')!r}: only qwen3 is handled")
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    eos = cfg.get("eos_token_id")

    w = gguf.GGUFWriter(a.out, "qwen3")
    w.add_name(a.model_dir.name)
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_freq_base(float(cfg["rope_theta"]))
    w.add_layer_norm_rms_eps(float(cfg["rms_norm_eps"]))
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if a.outtype == "f16" else gguf.LlamaFileType.MOSTLY_BF16)
    add_vocab(w, a.model_dir, cfg["vocab_size"], {**cfg, "eos_token_id": eos})

    tensors = safetensors_tensors(a.model_dir)
    plan = []
    for hf, (dtype, shape, path, offset, nbytes) in tensors.items():
        name = gguf_name(hf)
        numel = int(np.prod(shape))
        if len(shape) == 1:  # norms: f32
            w.add_tensor_info(name, shape, np.dtype(np.float32), numel * 4)
            plan.append((name, "f32", dtype, shape, path, offset, nbytes))
        elif a.outtype == "bf16" and dtype == "BF16":
            w.add_tensor_info(name, (shape[0], shape[1] * 2), np.dtype(np.uint8), nbytes, raw_dtype=gguf.GGMLQuantizationType.BF16)
            plan.append((name, "copy", dtype, shape, path, offset, nbytes))
        elif a.outtype == "f16":
            w.add_tensor_info(name, shape, np.dtype(np.float16), numel * 2)
            plan.append((name, "f16", dtype, shape, path, offset, nbytes))
        else:
            sys.exit(f"hf_to_gguf.py: --outtype bf16 needs bf16 weights ({hf} is {dtype})")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    total = 0
    for name, how, dtype, shape, path, offset, nbytes in plan:
        raw = read_raw(path, offset, nbytes)
        if how == "copy":
            out = np.asarray(raw).reshape(shape[0], shape[1] * 2)
        else:
            out = as_f32(dtype, np.asarray(raw)).reshape(shape)
            out = out.astype(np.float16) if how == "f16" else np.ascontiguousarray(out, dtype=np.float32)
        w.write_tensor_data(out)
        total += out.nbytes
        del raw, out
    w.close()
    print(f"wrote {a.out}: {len(plan)} tensors, {total / 1e9:.2f} GB of weights ({a.outtype}), "
          f"{len(tensors)} from {a.model_dir} in {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
