// Qwen3-Next (Qwen3NextForCausalLM, model_type qwen3_next): the Gated
// DeltaNet hybrid (hybrid.hpp) with fused linear-attention in-projections
// (in_proj_qkvz, in_proj_ba: rows grouped by key head) and a MoE with a shared
// expert on the sparse layers (Qwen3-MoE's fields, norm_topk_prob default
// true), weights under model.*. The MTP head (mtp.*) is kept aside.
#include <nlohmann/json.hpp>

#include "model/arch/decoder.hpp"
#include "model/arch/hybrid.hpp"
#include "model/config_fields.hpp"

namespace neuron::model {

namespace {

class Qwen3Next final : public HybridFamily {
 public:
  std::string_view model_type() const noexcept override { return "qwen3_next"; }
  std::string_view hf_architecture() const noexcept override { return "Qwen3NextForCausalLM"; }
  std::string_view gguf_architecture() const noexcept override { return "qwen3next"; }
  bool ignores_tensor(std::string_view name) const noexcept override { return name.starts_with("mtp."); }

  void parse(const nlohmann::json& j, ModelConfig& cfg) const override {
    parse_hybrid(j, cfg);
    // num_experts 0 (or absent): a dense MLP on every layer.
    const nlohmann::json* e = fields::field(j, "num_experts");
    if (!e) e = fields::field(j, "num_local_experts");
    if (e && !(e->is_number_integer() && e->get<std::int64_t>() == 0)) parse_moe_fields(j, cfg, true);
  }
  void write(const ModelConfig& cfg, nlohmann::json& j) const override {
    write_hybrid(cfg, j);
    if (cfg.moe.num_experts > 0) write_moe_fields(cfg, j);
  }

 protected:
  bool fused_in_proj() const noexcept override { return true; }
};

}  // namespace

const Family& qwen3_next_family() noexcept {
  static const Qwen3Next f;
  return f;
}

}  // namespace neuron::model
