#include "model/arch/decoder.hpp"

#include <string>

#include <nlohmann/json.hpp>

#include "model/arch/block_ops.hpp"
#include "model/config_fields.hpp"
#include "model/shard_weights.hpp"
#include "util/error.hpp"

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

using namespace fields;

void parse_moe_fields(const nlohmann::json& j, ModelConfig& cfg, bool norm_topk_default) {
  MoeConfig& m = cfg.moe;
  const char* experts_key = field(j, "num_experts") ? "num_experts" : "num_local_experts";
  if (!field(j, experts_key)) bad("config field 'num_experts' (or 'num_local_experts') is missing");
  m.num_experts = to_int(*field(j, experts_key), experts_key);
  if (m.num_experts < 1 || m.num_experts > 4096)
    fail(errc::unsupported_arch, std::string("config field '") + experts_key + "' = " +
                                     std::to_string(m.num_experts) + " is outside [1, 4096]");
  const nlohmann::json* k = field(j, "num_experts_per_tok");
  if (!k) bad("config field 'num_experts_per_tok' is missing");
  m.experts_per_token = to_int(*k, "num_experts_per_tok");
  if (m.experts_per_token < 1 || m.experts_per_token > m.num_experts)
    fail(errc::unsupported_arch, "config field 'num_experts_per_tok' = " + std::to_string(m.experts_per_token) +
                                     " is outside [1, " + experts_key + " = " + std::to_string(m.num_experts) + "]");
  m.intermediate_size = dim_field(j, "moe_intermediate_size", kMaxDim);
  m.norm_topk_prob = bool_field(j, "norm_topk_prob", norm_topk_default);
  m.sparse_step = dim_field(j, "decoder_sparse_step", kMaxLayers, 1);
  m.mlp_only_layers.clear();
  if (const nlohmann::json* only = field(j, "mlp_only_layers")) {
    if (!only->is_array()) bad("config field 'mlp_only_layers' must be a list of layer indices");
    for (const nlohmann::json& v : *only) {
      const std::int64_t i = to_int(v, "mlp_only_layers");
      if (i < 0 || i >= cfg.num_hidden_layers)
        bad("config field 'mlp_only_layers' holds " + std::to_string(i) + ", outside [0, num_hidden_layers)");
      m.mlp_only_layers.push_back(i);
    }
  }
  // Qwen3-Next, Qwen3.5-MoE: a shared expert beside the routed ones.
  m.shared_expert_intermediate_size = 0;
  if (field(j, "shared_expert_intermediate_size"))
    m.shared_expert_intermediate_size = dim_field(j, "shared_expert_intermediate_size", kMaxDim);
}

void write_moe_fields(const ModelConfig& cfg, nlohmann::json& j) {
  const MoeConfig& m = cfg.moe;
  j["num_experts"] = m.num_experts;
  j["num_experts_per_tok"] = m.experts_per_token;
  j["moe_intermediate_size"] = m.intermediate_size;
  j["norm_topk_prob"] = m.norm_topk_prob;
  j["decoder_sparse_step"] = m.sparse_step;
  j["mlp_only_layers"] = m.mlp_only_layers;
  if (m.shared_expert_intermediate_size > 0) j["shared_expert_intermediate_size"] = m.shared_expert_intermediate_size;
}

}  // namespace neuron::model
