// Qwen3-MoE (Qwen3MoeForCausalLM, model_type qwen3_moe, GGUF qwen3moe): the
// Qwen3 decoder whose sparse layers' MLP is a mixture of SwiGLU experts
// (MoeConfig). Config fields as released checkpoints write them
// (num_experts) and as transformers 5 does (num_local_experts).
#include <string>

#include <nlohmann/json.hpp>

#include "io/gguf.hpp"
#include "model/arch/decoder.hpp"
#include "model/config_fields.hpp"
#include "util/error.hpp"

namespace neuron::model {

namespace {

using namespace fields;

class Qwen3Moe final : public DecoderFamily {
 public:
  std::string_view model_type() const noexcept override { return "qwen3_moe"; }
  std::string_view hf_architecture() const noexcept override { return "Qwen3MoeForCausalLM"; }
  std::string_view gguf_architecture() const noexcept override { return "qwen3moe"; }

  void parse(const nlohmann::json& j, ModelConfig& cfg) const override {
    cfg.qk_norm = true;
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
    m.norm_topk_prob = bool_field(j, "norm_topk_prob", false);  // transformers' Qwen3MoeConfig default
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
  }

  void write(const ModelConfig& cfg, nlohmann::json& j) const override {
    const MoeConfig& m = cfg.moe;
    j["num_experts"] = m.num_experts;
    j["num_experts_per_tok"] = m.experts_per_token;
    j["moe_intermediate_size"] = m.intermediate_size;
    j["norm_topk_prob"] = m.norm_topk_prob;
    j["decoder_sparse_step"] = m.sparse_step;
    j["mlp_only_layers"] = m.mlp_only_layers;
  }

  // llama.cpp's qwen3moe: every layer sparse, the top-k weights renormalized (src/models/qwen3moe.cpp).
  void gguf_fields(const io::GgufMetadata& md, nlohmann::json& j) const override {
    j["num_experts"] = md.require_integer("qwen3moe.expert_count");
    j["num_experts_per_tok"] = md.require_integer("qwen3moe.expert_used_count");
    j["moe_intermediate_size"] = md.require_integer("qwen3moe.expert_feed_forward_length");
    j["norm_topk_prob"] = true;
  }
};

}  // namespace

const Family& qwen3_moe_family() noexcept {
  static const Qwen3Moe f;
  return f;
}

}  // namespace neuron::model
