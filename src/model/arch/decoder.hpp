#pragma once
// The standard pre-norm decoder the Llama-shaped families share: each layer is
//   x += attention(rmsnorm(x)); x += ffn(rmsnorm(x))
// with the ffn a dense SwiGLU MLP, or a mixture of experts on the config's
// sparse layers (MoeConfig::sparse_layer), under Hugging Face's tensor names
// (shard_weights.hpp decoder_layer_specs). A family built on it says what
// differs: its config fields, q/k norm (ModelConfig::qk_norm), GGUF keys.
#include <nlohmann/json_fwd.hpp>

#include "model/arch/family.hpp"

namespace neuron::model {

class DecoderFamily : public Family {
 public:
  LayerSpecs layer_specs(const ModelConfig& cfg, const ShardPlan& plan, std::int64_t layer) const override;
  void layer(BlockOps& ops, const ModelConfig& cfg, std::int64_t layer) const override;
};

// The MoE config fields of the Qwen MoE families (qwen3_moe, qwen3_next,
// qwen3_5_moe): num_experts (or num_local_experts), num_experts_per_tok,
// moe_intermediate_size, norm_topk_prob (absent: norm_topk_default),
// decoder_sparse_step, mlp_only_layers, shared_expert_intermediate_size.
// Impossible values name the field (bad_model / unsupported_arch).
void parse_moe_fields(const nlohmann::json& j, ModelConfig& cfg, bool norm_topk_default);
void write_moe_fields(const ModelConfig& cfg, nlohmann::json& j);

// The families (one file each), for the registry in family.cpp.
const Family& qwen3_family() noexcept;
const Family& llama_family() noexcept;
const Family& qwen3_moe_family() noexcept;

}  // namespace neuron::model
