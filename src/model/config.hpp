#pragma once
// Qwen3 (dense) hyper-parameters from config.json, and the sampling defaults
// and stop ids from generation_config.json. Anything neuron does not
// implement (biases, sliding window, rope scaling, other architectures) is
// rejected here, with the offending field named, rather than run wrongly.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace neuron::model {

struct Qwen3Config {
  std::int64_t vocab_size = 0;
  std::int64_t hidden_size = 0;
  std::int64_t intermediate_size = 0;
  std::int64_t num_hidden_layers = 0;
  std::int64_t num_attention_heads = 0;
  std::int64_t num_key_value_heads = 0;
  std::int64_t head_dim = 0;  // from the config; need not equal hidden / heads
  double rope_theta = 1e6;
  double rms_norm_eps = 1e-6;
  std::int64_t max_position_embeddings = 0;
  bool tie_word_embeddings = false;
  std::optional<std::int32_t> bos_token_id;
  std::vector<std::int32_t> eos_token_ids;  // config.json's, merged with generation_config's by load_model_configs
  std::string torch_dtype = "bfloat16";

  // Throws Error{bad_model} for malformed JSON or missing/mistyped fields,
  // Error{unsupported_arch} for valid but unimplemented features.
  static Qwen3Config parse(const std::string& json_text);
  std::string to_json() const;  // round-trips through parse (the TP wire carries it)
  bool operator==(const Qwen3Config&) const = default;
};

struct GenerationDefaults {
  std::vector<std::int32_t> eos_token_ids;
  std::optional<float> temperature, top_p, min_p, repetition_penalty;
  std::optional<std::int32_t> top_k;
  static GenerationDefaults parse(const std::string& json_text);  // throws bad_model
};

// config.json (+ generation_config.json when present) of a model directory.
struct ModelConfigs {
  Qwen3Config model;
  GenerationDefaults generation;
  std::vector<std::int32_t> stop_ids() const;  // union of both files' EOS ids
};
ModelConfigs load_model_configs(const std::filesystem::path& dir);

// The positions one sequence may reach: `requested` when > 0, else
// min(max_position_embeddings, backend_default), where backend_default is what
// memory allows (engine::plan_load: the positions the KV budget holds) or a
// runner's fixed fallback (backend::default_max_context); a config without
// max_position_embeddings counts as backend_default. Throws
// Error{invalid_argument} for a negative request or one past
// max_position_embeddings, naming both.
std::int32_t resolve_max_context(const Qwen3Config& cfg, std::int64_t requested, std::int32_t backend_default);

// Full-size Qwen3 shapes for benchmarks with random weights.
Qwen3Config preset_config(const std::string& name);  // "qwen3-0.6b", "qwen3-8b", "qwen3-32b"; throws invalid_argument

}  // namespace neuron::model
