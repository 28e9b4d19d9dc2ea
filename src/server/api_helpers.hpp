#pragma once
// Small pieces the Api's route files share (server/api.cpp: OpenAI routes;
// server/management_api.cpp: the helexa node contract): a JSON answer, a
// string field of a request body, Unix seconds.
#include <chrono>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "server/api_error.hpp"
#include "server/http_types.hpp"

namespace neuron::server::detail {

inline HttpResponse json_response(const nlohmann::json& body, int status = 200) {
  HttpResponse r;
  r.status = status;
  r.body = dump(body);
  return r;
}

// The string at `key`; absent or null: empty, or FieldError when required.
template <class Json>
std::string string_field(const Json& body, const char* key, bool required) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) {
    if (required) throw FieldError(key, std::string("'") + key + "' is required");
    return {};
  }
  if (!it->is_string()) throw FieldError(key, std::string("'") + key + "' must be a string");
  return it->template get<std::string>();
}

inline std::int64_t unix_seconds(std::chrono::system_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::seconds>(t.time_since_epoch()).count();
}

}  // namespace neuron::server::detail
