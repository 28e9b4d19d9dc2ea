#pragma once
// A model's hyper-parameters from config.json (or GGUF metadata, gguf_config.hpp),
// and the sampling defaults and stop ids from generation_config.json. The
// fields every supported family shares are parsed here; `model_type` picks the
// family (model/arch/family.hpp), which parses and checks its own fields
// (RoPE scaling, q/k norm, experts). Anything neuron does not implement
// (biases, sliding window, other rope types, unknown architectures) is
// rejected with the offending field named, rather than run wrongly.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace neuron::model {

// How positions turn into RoPE angles (transformers' rope_type).
// freq_factors: llama.cpp's form of a scaled RoPE (a GGUF's rope_freqs
// tensor, which its converter computes from Llama 3's rope_scaling): each
// plain inverse frequency divided by its factor.
enum class RopeType { plain, llama3, freq_factors };

struct RopeConfig {
  RopeType type = RopeType::plain;
  double theta = 1e6;
  // llama3: inv_freq of wavelengths past original / low_freq_factor divided by
  // `factor`, those under original / high_freq_factor kept, the band between
  // interpolated (transformers' _compute_llama3_parameters).
  double factor = 1, low_freq_factor = 1, high_freq_factor = 4;
  std::int64_t original_max_position_embeddings = 0;
  std::vector<float> freq_factors{};  // [head_dim / 2], freq_factors only
  // Partial rotary (Qwen3-Next, Qwen3.5): only the first rotary_dim(head_dim)
  // lanes of a head rotate (rotate-half over them), the rest pass through.
  double partial_rotary_factor = 1.0;
  // int(head_dim * partial_rotary_factor), as transformers truncates it.
  std::int64_t rotary_dim(std::int64_t head_dim) const noexcept;
  bool operator==(const RopeConfig&) const = default;
};

// Sparse mixture-of-experts feed-forward (Qwen3-MoE): a softmax router over
// `num_experts`, the top `experts_per_token` renormalized when norm_topk_prob,
// SwiGLU experts of `intermediate_size`. Layer i is sparse when
// num_experts > 0, i is not in mlp_only_layers and (i + 1) % sparse_step == 0.
struct MoeConfig {
  std::int64_t num_experts = 0;        // 0: a dense model
  std::int64_t experts_per_token = 0;
  std::int64_t intermediate_size = 0;  // moe_intermediate_size
  bool norm_topk_prob = true;
  std::int64_t sparse_step = 1;        // decoder_sparse_step
  std::vector<std::int64_t> mlp_only_layers{};
  // Qwen3-Next / Qwen3.5-MoE: a SwiGLU shared expert of this size run on every
  // token, its output scaled by sigmoid(n . shared_expert_gate) and added to
  // the routed experts'. 0: none (Qwen3-MoE).
  std::int64_t shared_expert_intermediate_size = 0;
  bool sparse_layer(std::int64_t layer) const noexcept;
  bool operator==(const MoeConfig&) const = default;
};

// What a decoder layer's token mixer is (config.json's layer_types).
enum class LayerType : std::uint8_t { full_attention, linear_attention };

// Gated DeltaNet linear attention (Qwen3-Next, Qwen3.5): the layers
// layer_types marks linear_attention replace softmax attention with a
// recurrent state per value head, [key_head_dim, value_head_dim], plus a
// causal depthwise conv1d over the last conv_kernel inputs of q, k and v.
// Each key head serves num_value_heads / num_key_heads consecutive value heads.
struct LinearAttentionConfig {
  std::vector<LayerType> layer_types;  // [num_hidden_layers]; empty: every layer full attention
  std::int64_t num_key_heads = 0;      // linear_num_key_heads
  std::int64_t num_value_heads = 0;    // linear_num_value_heads
  std::int64_t key_head_dim = 0;       // linear_key_head_dim
  std::int64_t value_head_dim = 0;     // linear_value_head_dim
  std::int64_t conv_kernel = 0;        // linear_conv_kernel_dim

  bool linear_layer(std::int64_t layer) const noexcept;
  bool hybrid() const noexcept;  // some layer is linear attention
  std::int64_t key_dim() const noexcept { return num_key_heads * key_head_dim; }
  std::int64_t value_dim() const noexcept { return num_value_heads * value_head_dim; }
  std::int64_t conv_dim() const noexcept { return 2 * key_dim() + value_dim(); }  // conv channels: q, k, v
  bool operator==(const LinearAttentionConfig&) const = default;
};

struct ModelConfig {
  std::string model_type = "qwen3";  // the family (model/arch/family.hpp)
  std::int64_t vocab_size = 0;
  std::int64_t hidden_size = 0;
  std::int64_t intermediate_size = 0;
  std::int64_t num_hidden_layers = 0;
  std::int64_t num_attention_heads = 0;
  std::int64_t num_key_value_heads = 0;
  std::int64_t head_dim = 0;  // from the config; need not equal hidden / heads
  RopeConfig rope;
  bool qk_norm = true;  // RMSNorm over head_dim on q and k before RoPE (Qwen3); Llama has none
  MoeConfig moe;
  LinearAttentionConfig linear;
  // q_proj yields each head's query and an output gate ([heads, 2, head_dim]
  // rows): attention's output is multiplied by sigmoid(gate) before o_proj (Qwen3-Next, Qwen3.5).
  bool attention_output_gate = false;
  // RMSNorm weights stored zero-centred: the scale is 1 + w (Qwen3-Next,
  // Qwen3.5: input/post-attention/final norms and q/k norm; not the linear
  // attention's gated norm). Runners add the 1 when they load a norm
  // (model::norm_scale, shard_weights.hpp), so the blocks see plain scales.
  bool zero_centred_norms = false;
  double rms_norm_eps = 1e-6;
  std::int64_t max_position_embeddings = 0;
  bool tie_word_embeddings = false;
  std::optional<std::int32_t> bos_token_id;
  std::vector<std::int32_t> eos_token_ids;  // config.json's, merged with generation_config's by load_model_configs
  std::string torch_dtype = "bfloat16";

  // Layers with a KV cache (full attention): num_hidden_layers for a plain decoder.
  std::int64_t kv_layers() const noexcept;
  // Layer `layer`'s index among them (its KV pool layer); -1 for a linear-attention layer.
  std::int64_t kv_layer_index(std::int64_t layer) const noexcept;

  // Throws Error{bad_model} for malformed JSON or missing/mistyped fields,
  // Error{unsupported_arch} for an unknown model_type (naming the supported
  // ones) and for valid but unimplemented features.
  static ModelConfig parse(const std::string& json_text);
  std::string to_json() const;  // round-trips through parse (the TP wire carries it)
  bool operator==(const ModelConfig&) const = default;
};

struct GenerationDefaults {
  std::vector<std::int32_t> eos_token_ids;
  std::optional<float> temperature, top_p, min_p, repetition_penalty;
  std::optional<std::int32_t> top_k;
  static GenerationDefaults parse(const std::string& json_text);  // throws bad_model
};

// config.json (+ generation_config.json when present) of a model directory.
struct ModelConfigs {
  ModelConfig model;
  GenerationDefaults generation;
  std::vector<std::int32_t> stop_ids() const;  // union of both files' EOS ids
};
ModelConfigs load_model_configs(const std::filesystem::path& dir);

// The positions one sequence may reach: `requested` when > 0, else
// min(max_position_embeddings, backend_default), where backend_default is what
// memory allows (engine::plan_load: the positions the KV budget holds) or a
// runner's fixed fallback (backend::default_max_context); a config without
// max_position_embeddings counts as backend_default. Throws
// Error{invalid_argument} for a negative request or one past
// max_position_embeddings, naming both.
std::int32_t resolve_max_context(const ModelConfig& cfg, std::int64_t requested, std::int32_t backend_default);

// Full-size shapes of released checkpoints for benchmarks with random weights:
// "qwen3-0.6b" ... "qwen3-32b", "llama-3.2-1b", "llama-3.1-8b", "qwen3-30b-a3b", the hybrids
// "qwen3.5-27b", "qwen3.5-35b-a3b", "qwen3-next-80b-a3b", ...
// Throws invalid_argument naming the known ones.
ModelConfig preset_config(const std::string& name);

}  // namespace neuron::model
