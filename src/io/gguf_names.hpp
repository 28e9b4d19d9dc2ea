#pragma once
// llama.cpp's storage of the checkpoints neuron reads (convert_hf_to_gguf.py,
// gguf-py tensor_mapping.py), undone into the Hugging Face layout the runners
// ask for, for every family (qwen3, llama, qwen3moe, and the hybrids qwen3next,
// qwen35, qwen35moe):
//   - names: token_embd -> model.embed_tokens, blk.N.attn_q ->
//     model.layers.N.self_attn.q_proj, blk.N.ffn_gate_inp -> model.layers.N.mlp.gate,
//     blk.N.ssm_a -> model.layers.N.linear_attn.A_log, ... (the converter
//     drops transformers' "language_model." of multimodal checkpoints:
//     io::Checkpoint answers model.language_model.X with model.X);
//   - stacked experts: blk.N.ffn_{gate,up,down}_exps is one [E, rows, cols]
//     tensor whose expert e is model.layers.N.mlp.experts.e.{gate,up,down}_proj;
//   - rotary rows: the converter permutes the q/k rows of LLaMA-architecture
//     files for ggml's interleaved RoPE (LlamaModel.permute); qwen2/qwen3 use
//     the NEOX rotation, Hugging Face's rotate-half, and are stored as they are.
//   - the hybrids' value transforms and head orders (io/gguf_hybrid.hpp).
// io::Checkpoint applies all of them when it opens a GGUF file.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace neuron::io {

// "blk.3.ffn_down.weight" -> "model.layers.3.mlp.down_proj.weight" (".bias"
// likewise, so a bias is seen and refused). nullopt for names no family has
// (and for the stacked experts, which gguf_experts() names).
std::optional<std::string> hf_name_for_gguf(std::string_view gguf_name);

// The reverse, for messages: "model.layers.0.linear_attn.A_log" ->
// "blk.0.ssm_a", expert e of a layer's gate_proj -> "blk.N.ffn_gate_exps.weight".
std::optional<std::string> gguf_name_for_hf(std::string_view hf_name);

// "blk.3.ffn_gate_exps.weight" -> {3, "gate_proj"}: expert e of it is
// hf_expert_name(3, e, "gate_proj"). nullopt for any other name.
struct GgufExperts {
  std::int64_t layer = 0;
  std::string_view proj;  // gate_proj, up_proj or down_proj
};
std::optional<GgufExperts> gguf_experts(std::string_view gguf_name);
std::string hf_expert_name(std::int64_t layer, std::int64_t expert, std::string_view proj);

// True when llama.cpp's converter permuted the attn_q / attn_k rows of a file
// of this general.architecture: within each head, Hugging Face row
// s * head_dim / 2 + i is stored as row 2 * i + s.
bool gguf_permutes_qk(std::string_view architecture) noexcept;

}  // namespace neuron::io
