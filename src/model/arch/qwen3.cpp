// Qwen3 dense (Qwen3ForCausalLM, model_type qwen3, GGUF qwen3): the standard
// decoder with an RMSNorm over head_dim on q and k before RoPE, no biases.
#include <nlohmann/json.hpp>

#include "model/arch/decoder.hpp"

namespace neuron::model {

namespace {

class Qwen3 final : public DecoderFamily {
 public:
  std::string_view model_type() const noexcept override { return "qwen3"; }
  std::string_view hf_architecture() const noexcept override { return "Qwen3ForCausalLM"; }
  std::string_view gguf_architecture() const noexcept override { return "qwen3"; }
  void parse(const nlohmann::json&, ModelConfig& cfg) const override { cfg.qk_norm = true; }
  void write(const ModelConfig&, nlohmann::json&) const override {}
  void gguf_fields(const io::GgufMetadata&, nlohmann::json&) const override {}
};

}  // namespace

const Family& qwen3_family() noexcept {
  static const Qwen3 f;
  return f;
}

}  // namespace neuron::model
