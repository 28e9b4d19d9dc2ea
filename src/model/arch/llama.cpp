// Llama 3.x (LlamaForCausalLM, model_type llama, GGUF llama): the standard
// decoder without q/k norm, RoPE with Llama 3's frequency scaling
// (rope_type llama3, config.cpp), GQA, tied (3.2 1B/3B) or untied heads.
// Biases (attention_bias, mlp_bias) are refused by config.cpp.
#include <nlohmann/json.hpp>

#include "model/arch/decoder.hpp"

namespace neuron::model {

namespace {

class Llama final : public DecoderFamily {
 public:
  std::string_view model_type() const noexcept override { return "llama"; }
  std::string_view hf_architecture() const noexcept override { return "LlamaForCausalLM"; }
  std::string_view gguf_architecture() const noexcept override { return "llama"; }
  void parse(const nlohmann::json&, ModelConfig& cfg) const override { cfg.qk_norm = false; }
  void write(const ModelConfig&, nlohmann::json& j) const override {
    j["attention_bias"] = false;
    j["mlp_bias"] = false;
  }
  void gguf_fields(const io::GgufMetadata&, nlohmann::json&) const override {}
};

}  // namespace

const Family& llama_family() noexcept {
  static const Llama f;
  return f;
}

}  // namespace neuron::model
