#pragma once
// keep_alive, as Ollama spells it: how long a model stays loaded after its
// last request ends. A duration string ("5m", "30s", "1h30m", "250ms", "-1s"),
// a bare number of seconds (string or JSON number, fractions allowed), 0 to
// unload right after the last request, any negative value for never.
// Used by POST /models/load, the --model spec option and --keep-alive.
#include <chrono>
#include <string_view>

#include <nlohmann/json.hpp>

namespace neuron::server {

// Throws Error{invalid_argument} naming the text; durations past ~68 years are refused.
std::chrono::milliseconds parse_keep_alive(std::string_view text);
// A JSON string or number as above; anything else throws Error{invalid_argument}.
std::chrono::milliseconds parse_keep_alive_json(const nlohmann::json& value);

}  // namespace neuron::server
