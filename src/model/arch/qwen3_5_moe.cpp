// Qwen3.5-MoE (Qwen3_5MoeForConditionalGeneration, model_type qwen3_5_moe):
// Qwen3.5 (qwen3_5.cpp: split in-projections, text_config, weights under
// model.language_model.*, vision tower and MTP head skipped) with a MoE and
// a shared expert on every layer; the router's top-k weights are always
// renormalized (transformers' Qwen3_5MoeTopKRouter has no norm_topk_prob).
#include <nlohmann/json.hpp>

#include "model/arch/decoder.hpp"
#include "model/arch/hybrid.hpp"
#include "util/error.hpp"

namespace neuron::model {

namespace {

class Qwen3_5Moe final : public HybridFamily {
 public:
  std::string_view model_type() const noexcept override { return "qwen3_5_moe"; }
  std::string_view hf_architecture() const noexcept override { return "Qwen3_5MoeForConditionalGeneration"; }
  std::string_view gguf_architecture() const noexcept override { return "qwen35moe"; }
  bool nested_text_config() const noexcept override { return true; }
  std::string_view weight_prefix() const noexcept override { return "model.language_model."; }
  bool ignores_tensor(std::string_view name) const noexcept override {
    return name.starts_with("model.visual.") || name.starts_with("mtp.");
  }

  void parse(const nlohmann::json& j, ModelConfig& cfg) const override {
    parse_hybrid(j, cfg);
    parse_moe_fields(j, cfg, true);
    if (!cfg.moe.norm_topk_prob)
      fail(errc::unsupported_arch, "config field 'norm_topk_prob' is false; Qwen3.5-MoE always renormalizes its top-k");
    if (cfg.moe.sparse_step != 1 || !cfg.moe.mlp_only_layers.empty())
      fail(errc::unsupported_arch,
           "config fields 'decoder_sparse_step' / 'mlp_only_layers' are set; every Qwen3.5-MoE layer is a MoE");
  }
  void write(const ModelConfig& cfg, nlohmann::json& j) const override {
    write_hybrid(cfg, j);
    write_moe_fields(cfg, j);
  }

 protected:
  bool fused_in_proj() const noexcept override { return false; }
};

}  // namespace

const Family& qwen3_5_moe_family() noexcept {
  static const Qwen3_5Moe f;
  return f;
}

}  // namespace neuron::model
