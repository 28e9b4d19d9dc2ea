"""A Qwen3 safetensors checkpoint (one file, bf16) to a bf16 GGUF for llama-server, with numpy and llama.cpp's own
gguf-py only: for a machine where llama.cpp's convert_hf_to_gguf.py cannot run (it imports torch and transformers).
It writes what that converter writes for Qwen3 with --outtype bf16: the `qwen3` architecture's keys, gguf-py's tensor
names (gguf.get_tensor_name_map), 2-D tensors bf16 as stored and 1-D ones (norms) f32, a tied LM head left out, and
the tokenizer as its get_vocab_base does from tokenizer.json (gpt2 BPE, pre-tokenizer qwen2, added tokens CONTROL when
special, ids past the vocabulary [PAD<i>] UNUSED, no BOS added).
usage: PYTHONPATH=<llama.cpp>/gguf-py python3 qwen3_to_gguf.py CHECKPOINT_DIR OUT.gguf"""
import json
import struct
import sys
from pathlib import Path

import numpy as np
import gguf

src, out = Path(sys.argv[1]), sys.argv[2]
cfg = json.loads((src / "config.json").read_text())
assert cfg["model_type"] == "qwen3", cfg["model_type"]
n_layers = cfg["num_hidden_layers"]

w = gguf.GGUFWriter(out, "qwen3")
w.add_name(src.name)
w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16)
w.add_block_count(n_layers)
w.add_context_length(cfg["max_position_embeddings"])
w.add_embedding_length(cfg["hidden_size"])
w.add_feed_forward_length(cfg["intermediate_size"])
w.add_head_count(cfg["num_attention_heads"])
w.add_head_count_kv(cfg["num_key_value_heads"])
w.add_key_length(cfg["head_dim"])
w.add_value_length(cfg["head_dim"])
w.add_rope_freq_base(cfg["rope_theta"])
w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])

# Tokenizer, as convert_hf_to_gguf's get_vocab_base (tokenizer.json's byte-level strings are its vocabulary).
tok = json.loads((src / "tokenizer.json").read_text())
vocab = dict(tok["model"]["vocab"])
special = {}
for t in tok["added_tokens"]:
    vocab[t["content"]] = t["id"]
    special[t["id"]] = t["special"]
by_id = {i: s for s, i in vocab.items()}
n_vocab = cfg["vocab_size"]
assert max(by_id) < n_vocab
tokens, types = [], []
for i in range(n_vocab):
    if i not in by_id:
        tokens.append(f"[PAD{i}]")
        types.append(gguf.TokenType.UNUSED)
    elif i in special:
        tokens.append(by_id[i])
        types.append(gguf.TokenType.CONTROL if special[i] else gguf.TokenType.USER_DEFINED)
    else:
        tokens.append(by_id[i])
        types.append(gguf.TokenType.NORMAL)
w.add_tokenizer_model("gpt2")
w.add_tokenizer_pre("qwen2")
w.add_token_list(tokens)
w.add_token_types(types)
w.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]])
tcfg = json.loads((src / "tokenizer_config.json").read_text())
ids = {t["content"]: t["id"] for t in tok["added_tokens"]}
w.add_bos_token_id(cfg.get("bos_token_id", ids["<|endoftext|>"]))
w.add_eos_token_id(ids[tcfg.get("eos_token") or "<|endoftext|>"])
w.add_pad_token_id(ids[tcfg.get("pad_token") or "<|endoftext|>"])
w.add_add_bos_token(False)

# Tensors, read in place from the one safetensors file (8-byte header length, JSON header, data).
path = src / "model.safetensors"
with open(path, "rb") as f:
    header_len = struct.unpack("<Q", f.read(8))[0]
    header = json.loads(f.read(header_len))
data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + header_len)
names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN3, n_layers)
for key in sorted(k for k in header if k != "__metadata__"):
    info = header[key]
    assert info["dtype"] == "BF16", (key, info["dtype"])
    if key == "lm_head.weight" and cfg.get("tie_word_embeddings"):
        continue
    name = names.get_name(key, try_suffixes=(".weight", ".bias"))
    assert name is not None, key
    begin, end = info["data_offsets"]
    raw = data[begin:end].view(np.uint16).reshape(info["shape"])  # [shape] bf16 bits
    if raw.ndim == 1:  # norms: f32, as the converter keeps them
        w.add_tensor(name, (raw.astype(np.uint32) << 16).view(np.float32))
    else:
        w.add_tensor(name, raw, raw_shape=raw.shape, raw_dtype=gguf.GGMLQuantizationType.BF16)

w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
print(f"wrote {out}")
