#pragma once
// ModelSpec from the two places a client names a model to load: the JSON body
// of POST /models/load, and `neuron serve --model SPEC`, where SPEC is a
// directory or Hugging Face id, optionally with options after the last ':'
// (`Qwen/Qwen3-8B:tp=2,device=cuda`), or a ModelSpec JSON object. Body fields:
// model_id (or model), tensor_parallel, expert_parallel, devices, device, quant, max_context,
// keep_alive (server/keep_alive.hpp), served_model_name, harness, wait (a
// model_id may carry a registry scheme, see kDefaultSourceScheme); the
// text options: tp (tensor_parallel), ep (expert_parallel: true/false), device, devices (a+b), quant,
// max_context, keep_alive, name (served_model_name).
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/registry.hpp"

namespace neuron::server {

// The harness names a load may ask for, all served by neuron itself: its own,
// and "candle", what the helexa gateway's catalogue (models.toml) and its
// router send (upstream's node runs candle). /discovery lists them.
inline constexpr const char* kHarnesses[] = {"neuron", "candle"};
bool known_harness(const std::string& name);

// The registry schemes a model_id may carry ("huggingface:Qwen/Qwen3-8B",
// what the gateway sends for a profile with `source`): only Hugging Face's,
// whose bytes the local cache and --hub download hold. The scheme is dropped
// from spec.model_id, so the model is listed under its bare id.
inline constexpr const char* kDefaultSourceScheme = "huggingface";

struct LoadRequest {
  engine::ModelSpec spec;
  bool wait = true;                    // answer when the load ended (200); false: 202 at once
  std::optional<std::string> harness;  // the helexa gateway's runtime choice: one of kHarnesses
};

// Throws FieldError naming the field (model_id, tensor_parallel, devices[i], ...).
LoadRequest parse_load_request(const nlohmann::json& body);

// Throws Error{invalid_argument} naming the bad option.
engine::ModelSpec parse_model_spec_text(const std::string& text);

}  // namespace neuron::server
