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
// A required string field: FieldError "'<where>.<key>' is required" when absent.
std::string required_string(const nlohmann::ordered_json& obj, const char* key, const std::string& where);
// "<where>[i]": the param of an array's item.
std::string indexed(const std::string& where, std::size_t i);
// A feature neuron does not have: FieldError{unsupported_parameter} "<what> is not supported by neuron".
[[noreturn]] void unsupported(const std::string& param, const std::string& what);
// A content part or block of a type that is not text (`type`, as the client named it):
// image types (OpenAI image_url, Responses input_image, Anthropic image) are refused as image
// input to a text-only load (every load is text-only: a vision checkpoint's tower is not
// loaded); other types (files, audio, documents) as unsupported content. Both
// FieldError{unsupported_parameter} on `param`.
[[noreturn]] void non_text_content(const std::string& param, const std::string& type);

}  // namespace neuron::server
