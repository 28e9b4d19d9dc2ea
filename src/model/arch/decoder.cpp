#include "model/arch/decoder.hpp"

#include "model/arch/block_ops.hpp"
#include "model/shard_weights.hpp"

namespace neuron::model {

LayerSpecs DecoderFamily::layer_specs(const ModelConfig& cfg, const ShardPlan& plan, std::int64_t layer) const {
  return decoder_layer_specs(cfg, plan, layer, cfg.qk_norm);
}

void DecoderFamily::layer(BlockOps& ops, const ModelConfig& cfg, std::int64_t layer) const {
  ops.attention(layer);
  if (cfg.moe.sparse_layer(layer))
    ops.moe(layer);
  else
    ops.mlp(layer);
}

}  // namespace neuron::model
