// Qwen3-MoE (Qwen3MoeForCausalLM, model_type qwen3_moe, GGUF qwen3moe): the
// Qwen3 decoder whose sparse layers' MLP is a mixture of SwiGLU experts
// (MoeConfig). Config fields as released checkpoints write them
// (num_experts) and as transformers 5 does (num_local_experts).
#include <string>

#include <nlohmann/json.hpp>

#include "io/gguf.hpp"
#include "model/arch/decoder.hpp"

namespace neuron::model {

namespace {

class Qwen3Moe final : public DecoderFamily {
 public:
  std::string_view model_type() const noexcept override { return "qwen3_moe"; }
  std::string_view hf_architecture() const noexcept override { return "Qwen3MoeForCausalLM"; }
  std::string_view gguf_architecture() const noexcept override { return "qwen3moe"; }

  void parse(const nlohmann::json& j, ModelConfig& cfg) const override {
    cfg.qk_norm = true;
    parse_moe_fields(j, cfg, false);  // transformers' Qwen3MoeConfig default: norm_topk_prob false
  }
  void write(const ModelConfig& cfg, nlohmann::json& j) const override { write_moe_fields(cfg, j); }

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
