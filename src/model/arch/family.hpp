#pragma once
// A model family: everything neuron knows about one architecture, in one place
// (src/model/arch/<family>.cpp): its config fields (from config.json, and from
// GGUF metadata), its tensor names and tensor-parallel shard rules
// (LayerSpecs), and its layer graph: the blocks each decoder layer runs, in
// order, over a backend's BlockOps. Backends implement the blocks (and fuse
// inside them as they like); they never know a family's layer order, so a new
// family touches neither runner's loop.
//
// Supported now: qwen3 (Qwen3ForCausalLM), llama (LlamaForCausalLM: Llama
// 3.x), qwen3_moe (Qwen3MoeForCausalLM), and the Gated DeltaNet hybrids
// (hybrid.hpp) qwen3_next (Qwen3NextForCausalLM), qwen3_5 and qwen3_5_moe
// (Qwen3_5[Moe]ForConditionalGeneration: text only).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "model/config.hpp"

namespace neuron::io { class GgufMetadata; }

namespace neuron::model {

class BlockOps;
struct LayerSpecs;
struct ShardPlan;

class Family {
 public:
  virtual ~Family() = default;
  virtual std::string_view model_type() const noexcept = 0;         // config.json's model_type
  virtual std::string_view hf_architecture() const noexcept = 0;    // config.json's architectures[0]
  virtual std::string_view gguf_architecture() const noexcept = 0;  // a GGUF's general.architecture

  // True when config.json keeps the text model's settings under text_config
  // (Qwen3.5's multimodal checkpoints); a flat config is read too.
  virtual bool nested_text_config() const noexcept { return false; }
  // The text model's tensor prefix: "model." ("model.embed_tokens.weight"),
  // Qwen3.5's "model.language_model.".
  virtual std::string_view weight_prefix() const noexcept { return "model."; }
  // Checkpoint tensors outside the text model that loading skips (Qwen3.5's
  // vision tower model.visual.*, the multi-token-prediction head mtp.*).
  virtual bool ignores_tensor(std::string_view name) const noexcept { return false; }

  // Reads the family's own config.json fields into cfg (the shared ones are
  // read already). Throws Error{bad_model} for malformed fields and
  // Error{unsupported_arch} for what the family does not implement.
  virtual void parse(const nlohmann::json& config, ModelConfig& cfg) const = 0;
  // Writes them back, so ModelConfig::to_json round-trips through parse.
  virtual void write(const ModelConfig& cfg, nlohmann::json& config) const = 0;
  // The "<gguf_architecture>.*" metadata as those config.json fields (the
  // shared keys are mapped by gguf_config.cpp).
  virtual void gguf_fields(const io::GgufMetadata& md, nlohmann::json& config) const = 0;
  // (llama.cpp's tensor names and storage layout, stacked experts and LLaMA's
  // permuted q/k rows included, are undone by io/gguf_names for every family.)

  // Layer `layer`'s tensors on rank plan.rank.
  virtual LayerSpecs layer_specs(const ModelConfig& cfg, const ShardPlan& plan, std::int64_t layer) const = 0;
  // Layer `layer`'s blocks, in order.
  virtual void layer(BlockOps& ops, const ModelConfig& cfg, std::int64_t layer) const = 0;
};

// The family of cfg.model_type. Throws Error{unsupported_arch} naming the supported ones.
const Family& family_of(const ModelConfig& cfg);
const Family* find_family(std::string_view model_type) noexcept;
const Family* find_gguf_family(std::string_view gguf_architecture) noexcept;
// "qwen3, llama, qwen3_moe": for errors, /discovery and capabilities.
std::vector<std::string> supported_model_types();
std::string supported_model_types_text();

}  // namespace neuron::model
