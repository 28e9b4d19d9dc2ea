#pragma once
// The Gated DeltaNet hybrids (Qwen3-Next, Qwen3.5 dense and MoE): a pre-norm
// decoder whose token mixer is, layer by layer as config.json's layer_types
// says, linear attention (BlockOps::linear_attention, a recurrent state per
// sequence) or gated full attention (q/k norm, a sigmoid output gate from
// q_proj, partial rotary, GQA over the paged KV cache); then a dense SwiGLU
// MLP, or a MoE with a shared expert behind a sigmoid gate. Every RMSNorm but
// linear attention's gated one is stored zero-centred (1 + w:
// ModelConfig::zero_centred_norms). A family built on it says where its
// weights sit, whether its checkpoint fuses the linear-attention
// in-projections, and its feed-forward fields.
#include <nlohmann/json_fwd.hpp>

#include "model/arch/family.hpp"

namespace neuron::model {

class HybridFamily : public Family {
 public:
  LayerSpecs layer_specs(const ModelConfig& cfg, const ShardPlan& plan, std::int64_t layer) const override;
  void layer(BlockOps& ops, const ModelConfig& cfg, std::int64_t layer) const override;
  // llama.cpp's qwen3next, qwen35, qwen35moe metadata: linear attention's
  // shape from "<arch>.ssm.*" (io/gguf_hybrid.hpp: group_count, time_step_rank,
  // state_size, inner_size, conv_kernel), layer_types from
  // attention.recurrent_layers (else full_attention_interval), the experts
  // from expert_count, expert_used_count, expert_feed_forward_length and
  // expert_shared_feed_forward_length (top-k renormalized, as llama.cpp
  // does). Partial rotary is rope.dimension_count (model/gguf_config.hpp);
  // Qwen3.5's rope.dimension_sections (interleaved M-RoPE) is plain RoPE for
  // text, whose three position ids are equal. The tensors' storage is undone
  // by io/gguf_hybrid.hpp.
  void gguf_fields(const io::GgufMetadata& md, nlohmann::json& config) const override;

 protected:
  // The fields every hybrid shares: linear_* shapes (value heads a multiple of
  // key heads), layer_types (or full_attention_interval, default 4, when
  // absent), q/k norm, the output gate, zero-centred norms, partial rotary
  // (default 0.25 when the config names none).
  static void parse_hybrid(const nlohmann::json& j, ModelConfig& cfg);
  static void write_hybrid(const ModelConfig& cfg, nlohmann::json& j);
  // Qwen3-Next's in_proj_qkvz / in_proj_ba, grouped by key head; else
  // Qwen3.5's in_proj_qkv, in_proj_z, in_proj_b, in_proj_a.
  virtual bool fused_in_proj() const noexcept = 0;
};

// The hybrid families (one file each), for the registry in family.cpp.
const Family& qwen3_next_family() noexcept;
const Family& qwen3_5_family() noexcept;
const Family& qwen3_5_moe_family() noexcept;

}  // namespace neuron::model
