#pragma once
// The standard pre-norm decoder the Llama-shaped families share: each layer is
//   x += attention(rmsnorm(x)); x += ffn(rmsnorm(x))
// with the ffn a dense SwiGLU MLP, or a mixture of experts on the config's
// sparse layers (MoeConfig::sparse_layer), under Hugging Face's tensor names
// (shard_weights.hpp decoder_layer_specs). A family built on it says what
// differs: its config fields, q/k norm (ModelConfig::qk_norm), GGUF keys.
#include "model/arch/family.hpp"

namespace neuron::model {

class DecoderFamily : public Family {
 public:
  LayerSpecs layer_specs(const ModelConfig& cfg, const ShardPlan& plan, std::int64_t layer) const override;
  void layer(BlockOps& ops, const ModelConfig& cfg, std::int64_t layer) const override;
};

// The families (one file each), for the registry in family.cpp.
const Family& qwen3_family() noexcept;
const Family& llama_family() noexcept;
const Family& qwen3_moe_family() noexcept;

}  // namespace neuron::model
