#pragma once
// Typed reads of one field of a client's JSON object, shared by the request
// parsers of every API (openai_request, responses_api, messages_api). Absent
// and null mean the same thing (the client did not set the field). A wrong
// type or range throws FieldError naming the field: `key` is both the JSON key
// and the param the client sees, unless `param` spells its full path
// ("input[2].call_id").
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace neuron::server {

const nlohmann::ordered_json* field(const nlohmann::ordered_json& obj, const char* key);
std::optional<float> number_in(const nlohmann::ordered_json& obj, const char* key, double lo, double hi);
std::optional<std::int64_t> integer_in(const nlohmann::ordered_json& obj, const char* key, std::int64_t lo, std::int64_t hi);
std::optional<bool> boolean(const nlohmann::ordered_json& obj, const char* key);
// A string field; `param` defaults to `key`.
std::optional<std::string> string_in(const nlohmann::ordered_json& obj, const char* key, const std::string& param = {});
// A feature neuron does not have: FieldError{unsupported_parameter} "<what> is not supported by neuron".
[[noreturn]] void unsupported(const std::string& param, const std::string& what);

}  // namespace neuron::server
