#pragma once
// llama.cpp's tensor names (convert_hf_to_gguf.py, gguf-py tensor_mapping.py)
// to the Hugging Face names the runners ask for, for the Qwen3 (dense)
// architecture: token_embd -> model.embed_tokens, blk.N.attn_q ->
// model.layers.N.self_attn.q_proj, ... Qwen3's q/k weights are stored as in
// the checkpoint (llama.cpp's rotary permutation applies to LLaMA-style
// models only; qwen2/qwen3 use the NEOX rotation, which is HF's rotate-half).
#include <optional>
#include <string>
#include <string_view>

namespace neuron::io {

// "blk.3.ffn_down.weight" -> "model.layers.3.mlp.down_proj.weight" (".bias"
// likewise, so a bias is seen and refused). nullopt for names Qwen3 does not have.
std::optional<std::string> hf_name_for_gguf(std::string_view gguf_name);

}  // namespace neuron::io
