// Qwen3.5 dense (Qwen3_5ForConditionalGeneration, model_type qwen3_5): the
// Gated DeltaNet hybrid (hybrid.hpp) with split linear-attention
// in-projections (in_proj_qkv, in_proj_z, in_proj_b, in_proj_a) and a dense
// MLP on every layer. The text model's settings sit under text_config and its
// weights under model.language_model.*; the vision tower (model.visual.*)
// and the MTP head (mtp.*) are skipped: text only for now.
#include <nlohmann/json.hpp>

#include "model/arch/hybrid.hpp"

namespace neuron::model {

namespace {

class Qwen3_5 final : public HybridFamily {
 public:
  std::string_view model_type() const noexcept override { return "qwen3_5"; }
  std::string_view hf_architecture() const noexcept override { return "Qwen3_5ForConditionalGeneration"; }
  std::string_view gguf_architecture() const noexcept override { return "qwen35"; }
  bool nested_text_config() const noexcept override { return true; }
  std::string_view weight_prefix() const noexcept override { return "model.language_model."; }
  bool ignores_tensor(std::string_view name) const noexcept override {
    return name.starts_with("model.visual.") || name.starts_with("mtp.");
  }

  void parse(const nlohmann::json& j, ModelConfig& cfg) const override { parse_hybrid(j, cfg); }
  void write(const ModelConfig& cfg, nlohmann::json& j) const override { write_hybrid(cfg, j); }

 protected:
  bool fused_in_proj() const noexcept override { return false; }
};

}  // namespace

const Family& qwen3_5_family() noexcept {
  static const Qwen3_5 f;
  return f;
}

}  // namespace neuron::model
